package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/clusterrun/clusterrun/internal/lines"
	"github.com/clusterrun/clusterrun/task"
)

// Serving work items from a task's shell: each item runs a command, its arguments on the command's stdin, and
// what the command prints is its result. Python's and Go's serve run a function in a long-lived process instead.

const serveUsageTail = `
Each item runs COMMAND once: the item's JSON arguments are on its stdin (and in CLUSTERRUN_ITEM_ARGS, up to
64 KiB), its function's name in CLUSTERRUN_ITEM_FN. What it prints on stdout is the item's result: JSON as
written, other text as a JSON string, nothing as null (at most 16 KiB). An exit other than 0 fails the item
with the last line of its stderr, which goes to the task's stderr. Returns 0 once the run asks its tasks to
stop, as Python's serve does.

Example:
  clusterrun task serve shard -- python3 run_shard.py
`

// commandLinger is how long an item's command is waited for past its exit (a child of it holding its output)
// or past its SIGTERM.
const commandLinger = 5 * time.Second

// maxItemArgsEnv bounds the arguments also given in CLUSTERRUN_ITEM_ARGS (stdin has them whatever their size):
// Linux refuses an environment string over 128 KiB.
const maxItemArgsEnv = 64 << 10

func taskServe(args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("task serve", flag.ContinueOnError)
	head, command, split := cutCommand(args)
	fns, err := parse(fs, taskSubUsage("serve")+serveUsageTail, head, 1, 100, stderr)
	if err != nil {
		return err
	}
	if !split || len(command) == 0 || command[0] == "" {
		return usageErrorf("no command: give the one each item runs after --, e.g. clusterrun task serve %s -- python3 step.py", fns[0])
	}
	if _, err := exec.LookPath(command[0]); err != nil {
		if why := errors.Unwrap(err); why != nil {
			err = why // exec's own words name the command again
		}
		return usageErrorf("cannot run %q: %v", command[0], err)
	}
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	c.ServeBatch = 1 // a process per item is never fast: a batch would keep items from idle workers
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	handlers := map[string]task.Handler{}
	for _, fn := range fns {
		handlers[fn] = itemCommand(fn, command, stderr)
	}
	err = c.ServeUntilStop(ctx, handlers)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return &exitError{code: 128 + int(syscall.SIGTERM)} // as a process dying of its SIGTERM: without a word
	}
	return taskError(err)
}

// cutCommand splits serve's arguments at the first --: the functions and flags before it, the command after.
func cutCommand(args []string) (head, command []string, split bool) {
	i := slices.Index(args, "--")
	if i < 0 {
		return args, nil, false
	}
	return args[:i], args[i+1:], true
}

// itemCommand is the handler that runs argv for an item of fn.
func itemCommand(fn string, argv []string, stderr io.Writer) task.Handler {
	return func(ctx context.Context, args json.RawMessage) (any, error) {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // the task's stop: let it end
		// A child the command left running with its stdout or stderr does not hold the item past commandLinger
		// after the command exits; a command that has not ended commandLinger after its SIGTERM is killed.
		cmd.WaitDelay = commandLinger
		cmd.Stdin = bytes.NewReader(args)
		cmd.Env = append(os.Environ(), "CLUSTERRUN_ITEM_FN="+fn)
		if len(args) <= maxItemArgsEnv {
			cmd.Env = append(cmd.Env, "CLUSTERRUN_ITEM_ARGS="+string(args))
		}
		out := &capped{max: 16 << 10}
		errTail := &capped{max: 4 << 10, keepEnd: true}
		cmd.Stdout, cmd.Stderr = out, io.MultiWriter(stderr, errTail)
		if err := cmd.Run(); err != nil {
			return nil, commandFailure(argv[0], err, errTail.String())
		}
		if out.over {
			return nil, fmt.Errorf("%s printed over 16 KiB: write a large result to a file and print its path", argv[0])
		}
		return resultOf(out.buf.Bytes()), nil
	}
}

// resultOf is an item's result from what its command printed: JSON as written, other text as a string, nothing
// as null.
func resultOf(printed []byte) any {
	trimmed := bytes.TrimSpace(printed)
	switch {
	case len(trimmed) == 0:
		return nil
	case json.Valid(trimmed):
		return json.RawMessage(trimmed)
	}
	return string(trimmed)
}

// commandFailure is why an item's command failed: its exit, and the last line of its stderr.
func commandFailure(name string, err error, stderrTail string) error {
	msg := fmt.Sprintf("%s: %v", name, err)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		msg = fmt.Sprintf("%s exited with code %d", name, exit.ExitCode())
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			msg = fmt.Sprintf("%s was killed by %s", name, unix.SignalName(ws.Signal()))
		}
	}
	all := strings.Split(strings.TrimRight(stderrTail, "\n"), "\n")
	if last := strings.TrimSpace(lines.Plain(lines.LastDrawing(all[len(all)-1]))); last != "" {
		msg += ": " + last
	}
	return errors.New(msg)
}

// capped keeps at most max bytes of what is written to it: the first (or, with keepEnd, the last) of them.
type capped struct {
	max     int
	keepEnd bool
	buf     bytes.Buffer
	over    bool
}

func (c *capped) Write(p []byte) (int, error) {
	c.buf.Write(p)
	if c.buf.Len() > c.max {
		c.over = true
		b := c.buf.Bytes()
		if c.keepEnd {
			b = b[len(b)-c.max:]
		} else {
			b = b[:c.max]
		}
		kept := slices.Clone(b)
		c.buf.Reset()
		c.buf.Write(kept)
	}
	return len(p), nil
}

func (c *capped) String() string { return c.buf.String() }
