package logfile

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func appendTo(t *testing.T, f *os.File, n int, b byte) {
	t.Helper()
	_, err := f.Write(bytes.Repeat([]byte{b}, n))
	require.NoError(t, err)
}

func TestWatcher_MarksDateTheBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stdout.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	require.NoError(t, err)
	defer f.Close()
	w, err := NewWatcher(path, 0)
	require.NoError(t, err)
	t0 := time.Unix(1000, 0)
	appendTo(t, f, 10, 'a')
	require.NoError(t, w.Sample(t0))
	require.NoError(t, w.Sample(t0.Add(time.Second))) // no growth, no mark
	appendTo(t, f, 5, 'b')
	require.NoError(t, w.Sample(t0.Add(2*time.Second)))
	appendTo(t, f, 5, 'c')
	require.NoError(t, w.Close(t0.Add(3*time.Second)))

	require.Equal(t, []Mark{{10, t0.UnixNano()}, {15, t0.Add(2 * time.Second).UnixNano()}, {20, t0.Add(3 * time.Second).UnixNano()}},
		Marks(path, 0, 20))
	require.Equal(t, []Mark{{15, t0.Add(2 * time.Second).UnixNano()}}, Marks(path, 10, 15))
	require.Equal(t, int64(0), OffsetAt(path, t0))
	require.Equal(t, int64(10), OffsetAt(path, t0.Add(time.Second)))
	require.Equal(t, int64(15), OffsetAt(path, t0.Add(3*time.Second)))
	require.Equal(t, int64(20), OffsetAt(path, t0.Add(time.Hour)))

	// A new watcher (a restarted supervisor) carries on from the last mark.
	w, err = NewWatcher(path, 0)
	require.NoError(t, err)
	require.NoError(t, w.Close(t0.Add(4*time.Second)))
	require.Len(t, Marks(path, 0, 100), 3)
}

func TestWatcher_CapFreesTheOldestBlocksInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stdout.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	require.NoError(t, err)
	defer f.Close()
	const capBytes = 64 << 10
	w, err := NewWatcher(path, capBytes)
	require.NoError(t, err)
	defer w.Close(time.Now())
	for i := 0; i < 64; i++ {
		appendTo(t, f, 16<<10, byte('a'+i%26))
		require.NoError(t, w.Sample(time.Now()))
	}
	size := int64(64 * 16 << 10)
	dropped := Dropped(path)
	require.Greater(t, dropped, int64(0))
	require.LessOrEqual(t, size-dropped, int64(capBytes+capBytes/8+blockSize), "at most the cap and a batch are kept")
	require.GreaterOrEqual(t, size-dropped, int64(capBytes), "at least the cap is kept")

	// Offsets do not move: the bytes past the boundary are the ones written there.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, data, int(size))
	require.Equal(t, bytes.Repeat([]byte{0}, blockSize), data[dropped-blockSize:dropped], "dropped bytes read as a hole")
	require.Equal(t, byte('a'+int(dropped/(16<<10))%26), data[dropped])

	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	require.Less(t, st.Blocks*512, int64(2*capBytes), "the disk holds about the cap, not %d bytes", size)
}
