package activities

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/spec"
)

// heard is what a stand-in socket was asked: each request's op, signal, records and main.
type heard struct {
	mu   sync.Mutex
	reqs []string
}

func (h *heard) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.reqs)
}

// standIn listens on a socket and answers every request with answer, noting it in h; greeting, when set, goes
// first, as a supervisor's socket greets.
func standIn(t *testing.T, sock, greeting, answer string, h *heard) {
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if greeting != "" {
				_, _ = conn.Write([]byte(greeting + "\n"))
			}
			line, _ := bufio.NewReader(conn).ReadBytes('\n')
			var req struct {
				Op      string   `json:"op"`
				Signal  int      `json:"signal"`
				Records []string `json:"records"`
				Main    bool     `json:"main"`
			}
			_ = json.Unmarshal(line, &req)
			h.mu.Lock()
			h.reqs = append(h.reqs, fmt.Sprintf("%s %d %v main=%v", req.Op, req.Signal, req.Records, req.Main))
			h.mu.Unlock()
			_, _ = conn.Write([]byte(answer + "\n"))
			conn.Close()
		}
	}()
}

// signalled sets up three running attempts of one supervisor, the third with signalTo: main, each with a
// stand-in task socket, and a stand-in supervisor that answers supAnswer; it signals all three SIGUSR1 and
// returns what the supervisor and the task sockets were asked.
func signalled(t *testing.T, supAnswer string) (sup []string, tasks []string) {
	dir, err := os.MkdirTemp("", "sig")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	var supHeard, taskHeard heard
	supSock := filepath.Join(dir, "run.sock")
	standIn(t, supSock, `{"ok": true, "rawEnv": true}`, supAnswer, &supHeard)
	var orders []signalOrder
	for i := range 3 {
		e := &entry{task: spec.Task{Name: fmt.Sprintf("w-%d", i), SignalMain: i == 2}, record: fmt.Sprintf("rec%d", i),
			supervisor: supSock, shimSocket: filepath.Join(dir, fmt.Sprintf("t%d.sock", i))}
		e.markStarted(shim.Started{PID: 100 + i})
		standIn(t, e.shimSocket, "", `{"ok": true}`, &taskHeard)
		orders = append(orders, signalOrder{e, syscall.SIGUSR1})
	}
	h := &Host{Name: "h", Logger: quiet()}
	h.signalEntries(orders, "test signal")
	sup, tasks = supHeard.all(), taskHeard.all()
	slices.Sort(sup)
	slices.Sort(tasks)
	return sup, tasks
}

// A host signals a supervisor's tasks with one request for those that get the signal the same way, not over
// each task's socket (one after the other, that took 12 s for 500 tasks).
func TestSignals_OneRequestPerSupervisorAndWay(t *testing.T) {
	sup, tasks := signalled(t, `{"ok": true}`)
	assert.Equal(t, []string{"signal 10 [rec0 rec1] main=false", "signal 10 [rec2] main=true"}, sup)
	assert.Empty(t, tasks)
}

// A supervisor from before that request refuses it: each task is signalled over its own socket instead.
func TestSignals_AnOlderSupervisorsTasksOneByOne(t *testing.T) {
	sup, tasks := signalled(t, `{"error": "malformed request: the supervisor's socket takes one start or stop request"}`)
	assert.Len(t, sup, 2)
	assert.Equal(t, []string{"signal 10 [] main=false", "signal 10 [] main=false", "signal-main 10 [] main=false"}, tasks)
}

// A supervisor that took the request but could not signal some tasks has signalled the others: nothing is sent
// again, which would signal those twice.
func TestSignals_NoSecondSignalAfterAPartialFailure(t *testing.T) {
	sup, tasks := signalled(t, `{"ok": true, "error": "cannot signal w-1 attempt 1: operation not permitted"}`)
	assert.Len(t, sup, 2)
	assert.Empty(t, tasks)
}
