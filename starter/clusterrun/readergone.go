package main

import (
	"context"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// exitReaderGone ends a follow whose reader has gone, as the SIGPIPE of its next write would have (128 + 13).
const exitReaderGone = 141

// pipeReaderGone closes its channel once out's reader has gone: out is a pipe whose every reader closed its end
// (clusterrun logs -f RUN | head -5). A follow writes only when its run says something, so without this it
// waited, after head had what it wanted, for the task's next line: for good, if the task was quiet. GNU
// tail -f leaves at once too (coreutils 8.28 and later). For anything but a pipe the channel never closes.
func pipeReaderGone(w io.Writer) <-chan struct{} {
	gone := make(chan struct{})
	out, ok := w.(*os.File)
	var st unix.Stat_t
	if !ok || unix.Fstat(int(out.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return gone
	}
	go func() {
		// POLLERR is reported, whatever is asked for, once a pipe's write end has no reader left.
		fds := []unix.PollFd{{Fd: int32(out.Fd())}}
		for {
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || fds[0].Revents&unix.POLLNVAL != 0 {
				return // not a reader's leaving: the follow goes on as it would have
			}
			if fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
				close(gone)
				return
			}
		}
	}()
	return gone
}

// endWithReader is ctx for a follow that prints to stdout, canceled once stdout's reader has gone; the
// follow then ends with exitReaderGone, whatever it returned, in *err (the command's result, set by stop).
func endWithReader(ctx context.Context, stdout io.Writer, err *error) (_ context.Context, stop func()) {
	gone := pipeReaderGone(stdout)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel()
		select {
		case <-gone:
			*err = &exitError{code: exitReaderGone}
		default:
		}
	}
}
