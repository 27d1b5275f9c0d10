package activities

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/activities/logfile"
	"github.com/clusterrun/clusterrun/workflows"
)

// BenchmarkReadChunk is one stream's read by a host, with and without the marks that date its lines (which
// clusterrun run and logs --follow ask for to print a read in the order it was written): a live follower's
// read of the newest output, and a page of a long log (1 MiB, sampled every 40 lines of 64 bytes).
func BenchmarkReadChunk(b *testing.B) {
	h := &Host{Name: "h", LogDir: b.TempDir()}
	dir := AttemptDir(h.LogDir, "run-1", 1, "worker-0")
	require.NoError(b, os.MkdirAll(dir, 0o700))
	path := filepath.Join(dir, "stdout.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	require.NoError(b, err)
	w, err := logfile.NewWatcher(path, 0)
	require.NoError(b, err)
	at := time.Unix(1_700_000_000, 0)
	line := fmt.Sprintf("%063d\n", 0)
	for i := 0; i < 1<<14; i++ {
		_, err := f.WriteString(line)
		require.NoError(b, err)
		if i%40 == 39 {
			require.NoError(b, w.Sample(at.Add(time.Duration(i)*time.Millisecond)))
		}
	}
	require.NoError(b, f.Close())
	size := int64(1 << 20)
	for _, read := range []struct {
		name string
		req  workflows.ReadLogsRequest
	}{
		{"live", workflows.ReadLogsRequest{Offset: size - 4096, Max: 16 << 10}},
		{"page", workflows.ReadLogsRequest{Offset: size / 2, Max: 16 << 10}},
	} {
		for _, times := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/times=%v", read.name, times), func(b *testing.B) {
				r := read.req
				r.Task, r.Attempt, r.Stream, r.Deflate, r.Times = "worker-0", 1, "stdout", true, times
				b.ReportAllocs()
				for b.Loop() {
					if c := h.readChunk("run-1", r); c.Error != "" || len(c.Data) == 0 {
						b.Fatalf("read: %+v", c.Error)
					}
				}
			})
		}
	}
}
