package starter

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

// Both streams together: a round's lines go out in the order their host dated them, lines dated alike with
// stdout's first, each stream's own lines never reordered (a line past the last mark, dated by the file's
// coarse modification time, can read earlier than the mark before it), and every line whole.
func TestLogs_BothStreamsInTheOrderWritten(t *testing.T) {
	at := func(ms int64) int64 {
		return time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC).UnixNano() + ms*int64(time.Millisecond)
	}
	chunk := func(data string, modTime int64, marks ...workflows.LogMark) (workflows.LogChunk, []byte) {
		return workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true}, Data: []byte(data), Next: int64(len(data)),
			Marks: marks, ModTime: modTime}, []byte(data)
	}
	out := &logStream{task: "worker-0", name: "stdout"}
	errs := &logStream{task: "worker-0", name: "stderr"}
	c, data := chunk("step 1\nstep 2\nstep 3 with no mark yet", at(100), workflows.LogMark{Size: 7, At: at(0)}, workflows.LogMark{Size: 14, At: at(500)})
	var round []datedLine
	round = append(round, out.dated(data, c.LineTimes(data), true)...)
	c, data = chunk("warning\n\rtqdm 10%\rtqdm 20%\n", 0, workflows.LogMark{Size: 8, At: at(0)}, workflows.LogMark{Size: 27, At: at(250)})
	round = append(round, errs.dated(data, c.LineTimes(data), true)...)
	var w bytes.Buffer
	require.NoError(t, writeInOrder(&w, round))
	assert.Equal(t, "[worker-0] step 1\n[worker-0] warning\n[worker-0] tqdm 20%\n[worker-0] step 2\n[worker-0] step 3 with no mark yet\n", w.String())

	w.Reset()
	c, data = chunk("plain\n", 0, workflows.LogMark{Size: 6, At: at(900)})
	require.NoError(t, writeInOrder(&w, errs.dated(data, c.LineTimes(data), false)))
	assert.Equal(t, "plain\n", w.String(), "one task's lines have no prefix")
}
