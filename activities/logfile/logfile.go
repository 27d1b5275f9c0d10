// Package logfile keeps a task's log files bounded and dated without touching what the task writes.
//
// A task writes its stdout and stderr straight to files opened for append (package proc): no pipe, nobody
// copying. The supervisor samples each file a few times a second (Watcher) and keeps two small sidecars:
//
//   - X.times: 16-byte marks (size, unix nanoseconds), one whenever the file grew since the last sample: "by this
//     time, the file was this long". A line's time is the first mark that covers its end, so it is accurate to a
//     sample (SampleEvery). It costs at most 16 bytes per sample per stream while the task writes.
//   - X.dropped: the offset before which the log cap has dropped the bytes. Past the cap, the oldest whole blocks
//     are freed in place (fallocate PUNCH_HOLE): offsets never move, so readers keep their place, and the task
//     keeps appending to the same open file. The file's apparent size keeps growing; its disk use stays near the cap.
//
// Readers (Dropped, OffsetAt, Marks) only read the sidecars, so they work whether or not a supervisor is alive.
package logfile

import (
	"encoding/binary"

	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SampleEvery is how often a Watcher samples its files: the precision of line times.
const SampleEvery = 250 * time.Millisecond

// Sidecar suffixes.
const (
	TimesSuffix   = ".times"
	DroppedSuffix = ".dropped"
)

const (
	markSize  = 16
	blockSize = 4096
	// fallocate(2) modes: free the range, keep the file's size.
	punchHole = 0x02 | 0x01
)

// Mark says the file was Size bytes long at At (unix nanoseconds).
type Mark struct {
	Size int64 `json:"size"`
	At   int64 `json:"at"`
}

// Watcher samples one log file: it appends marks and enforces the cap. It holds no file open between samples
// (a supervisor of a thousand tasks would hold thousands, and each task it starts later closes every one of
// them in its exec), and the marks file is made by the first mark: a task that writes nothing has none.
type Watcher struct {
	path    string
	cap     int64 // 0: no cap
	size    int64
	dropped int64
}

// NewWatcher watches the log file at path (it must exist), keeping at most capBytes of it (0: no cap).
func NewWatcher(path string, capBytes int64) (*Watcher, error) {
	if _, err := regularSize(path); err != nil {
		return nil, err
	}
	w := &Watcher{path: path, cap: capBytes, dropped: Dropped(path)}
	if last, ok := lastMark(path); ok {
		w.size = last.Size
	}
	return w, nil
}

// regularSize is the size of the regular file at path; a task that put something else there (a symlink) is
// not followed.
func regularSize(path string) (int64, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file", path)
	}
	return st.Size(), nil
}

// Sample records a mark if the file grew, and frees its oldest blocks once it holds more than the cap.
func (w *Watcher) Sample(now time.Time) error {
	size, err := regularSize(w.path)
	if err != nil {
		return err
	}
	if size <= w.size {
		return nil
	}
	w.size = size
	var b [markSize]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(size))
	binary.LittleEndian.PutUint64(b[8:], uint64(now.UnixNano()))
	if err := appendFile(w.path+TimesSuffix, b[:]); err != nil {
		return fmt.Errorf("record the time of %s: %w", w.path, err)
	}
	return w.enforceCap(size)
}

func appendFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// enforceCap drops whole blocks from the front once the file holds more than the cap plus an eighth (so the
// work is done in batches), keeping at least the last cap bytes.
func (w *Watcher) enforceCap(size int64) error {
	if w.cap <= 0 || size-w.dropped <= w.cap+max(w.cap/8, blockSize) {
		return nil
	}
	next := (size - w.cap) / blockSize * blockSize
	if next <= w.dropped {
		return nil
	}
	// The new boundary is published before the bytes go, so a reader that checks it after reading never
	// takes the freed range (it reads as zeros) for output.
	if err := writeFileAtomic(w.path+DroppedSuffix, []byte(strconv.FormatInt(next, 10)+"\n")); err != nil {
		return fmt.Errorf("record the log cap of %s: %w", w.path, err)
	}
	from := w.dropped / blockSize * blockSize
	f, err := os.OpenFile(w.path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open %s for its log cap: %w", w.path, err)
	}
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), punchHole, from, next-from); err != nil {
		return fmt.Errorf("free the oldest %d bytes of %s for its log cap (does its file system support hole punching?): %w",
			next-from, w.path, err)
	}
	w.dropped = next
	return nil
}

// Close samples a last time.
func (w *Watcher) Close(now time.Time) error { return w.Sample(now) }

// Dropped is the offset before which the cap has dropped the file's bytes (0: nothing dropped).
func Dropped(path string) int64 {
	data, err := os.ReadFile(path + DroppedSuffix)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Marks returns the marks that date the bytes in [from, to): each mark past from, up to the first that reaches
// to. A line ending at offset E was written by the first mark whose Size is at least E; bytes past the last
// mark were written after it (the file's modification time dates them).
func Marks(path string, from, to int64) []Mark {
	f, n, err := openTimes(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	i := sort.Search(n, func(i int) bool { m, _ := markAt(f, i); return m.Size > from })
	var out []Mark
	for ; i < n; i++ {
		m, err := markAt(f, i)
		if err != nil {
			break
		}
		out = append(out, m)
		if m.Size >= to {
			break
		}
	}
	return out
}

// OffsetAt is where output written at or after t begins: the file's size at the last mark before t.
func OffsetAt(path string, t time.Time) int64 {
	f, n, err := openTimes(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	ns := t.UnixNano()
	i := sort.Search(n, func(i int) bool { m, _ := markAt(f, i); return m.At >= ns })
	if i == 0 {
		return 0
	}
	m, _ := markAt(f, i-1)
	return m.Size
}

func lastMark(path string) (Mark, bool) {
	f, n, err := openTimes(path)
	if err != nil || n == 0 {
		return Mark{}, false
	}
	defer f.Close()
	m, err := markAt(f, n-1)
	return m, err == nil
}

// openTimes opens a log's marks and counts them.
func openTimes(path string) (*os.File, int, error) {
	f, err := os.OpenFile(path+TimesSuffix, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, int(st.Size() / markSize), nil
}

func markAt(f *os.File, i int) (Mark, error) {
	var b [markSize]byte
	if _, err := f.ReadAt(b[:], int64(i)*markSize); err != nil {
		return Mark{}, err
	}
	return Mark{Size: int64(binary.LittleEndian.Uint64(b[:8])), At: int64(binary.LittleEndian.Uint64(b[8:]))}, nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
