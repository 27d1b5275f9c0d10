package starter

import (
	"bytes"
	"context"
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

// hostsAnswering is a log reader whose hosts do not answer until their turn: host h answers from its
// answerFrom[h]-th read on; live says which the host registry counts live.
type hostsAnswering struct {
	answerFrom map[string]int
	live       map[string]bool
	reads      map[string]int
	liveReads  int
}

func (r *hostsAnswering) Read(_ context.Context, reqs []workflows.ReadLogsRequest) (*workflows.ReadLogsResult, error) {
	res := &workflows.ReadLogsResult{}
	for _, q := range reqs {
		r.reads[q.Host]++
		if r.reads[q.Host] < r.answerFrom[q.Host] {
			res.Chunks = append(res.Chunks, workflows.LogChunk{ReadLogsRequest: q, Next: q.Offset, Unreachable: true,
				Error: "host " + q.Host + " did not pick up the read within 5s"})
			continue
		}
		data := "last words of " + q.Task + "\n"
		res.Chunks = append(res.Chunks, workflows.LogChunk{ReadLogsRequest: q, Data: []byte(data), Next: int64(len(data)), EOF: true})
	}
	return res, nil
}

func (r *hostsAnswering) LiveHosts(context.Context) map[string]bool { r.liveReads++; return r.live }

// An ended attempt's log is not given up on one unanswered read while the host registry counts its host live:
// the host is asked again, EndedRereads times at most. A host that is not live is given up at once.
func TestLogs_ALiveHostIsAskedAgainForAnEndedAttempt(t *testing.T) {
	r := &hostsAnswering{answerFrom: map[string]int{"back": 2, "gone": 99, "slow": 99}, live: map[string]bool{"back": true, "slow": true},
		reads: map[string]int{}}
	streams := map[string]*logStream{
		"a": {host: "back", task: "worker-0", name: "stdout", attempt: 1, done: true},
		"b": {host: "gone", task: "worker-1", name: "stdout", attempt: 1, done: true},
		"c": {host: "slow", task: "worker-2", name: "stdout", attempt: 1, done: true},
	}
	order := []string{"a", "b", "c"}
	var w bytes.Buffer
	var unread []string
	for round := 0; round < 5 && !allClosed(streams); round++ {
		_, err := readRound(context.Background(), r, streams, order, false, true, &w, &unread)
		require.NoError(t, err)
	}
	assert.Equal(t, "[worker-0] last words of worker-0\n", w.String(), "the host that answered its second read")
	assert.Equal(t, map[string]int{"back": 2, "gone": 1, "slow": 1 + EndedRereads}, r.reads)
	assert.Equal(t, 2, r.liveReads, "the registry is read once per read that a host left unanswered")
	require.Len(t, unread, 2)
	assert.Contains(t, unread[0], "worker-1 stdout (attempt 1): host gone did not pick up the read")
	assert.Contains(t, unread[1], "worker-2 stdout (attempt 1): host slow did not pick up the read")
}
