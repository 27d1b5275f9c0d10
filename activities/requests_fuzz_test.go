package activities

import (
	"bytes"
	"testing"
	"unicode/utf8"

	"github.com/clusterrun/clusterrun/internal/lines"
)

// FuzzControlRequests feeds the control socket's request readers what a task could send. Nothing may panic, and
// what is accepted stays within the bounds of what travels on to the run.
func FuzzControlRequests(f *testing.F) {
	for _, seed := range []string{
		`{"name": "ready"}`, `{"name": "epoch/1", "types": ["worker"], "timeout": "30s"}`, `{"name": "x", "timeout": "2562047h47m"}`,
		`{"name": ""}`, `{"current": 3, "total": 10, "message": "epoch 3"}`, `{"current": 1, "message": "\u001b[31mred\u001b]0;t\u0007\n"}`, `{"current": -1}`, `{"error": "boom"}`, `{}`, `[]`,
		`{"name": "a"} {"name": "b"}`, `{"nope": 1}`, `null`, `{"current": 1e308, "total": 1e308}`,
	} {
		f.Add(byte(0), []byte(seed))
		f.Add(byte(1), []byte(seed))
		f.Add(byte(2), []byte(seed))
	}
	types := map[string]bool{"chief": true, "worker": true}
	f.Fuzz(func(t *testing.T, kind byte, body []byte) {
		switch kind % 3 {
		case 0:
			req, timeout, err := readBarrier(bytes.NewReader(body), types)
			if err == nil && (len(req.Name) == 0 || timeout < 0 || timeout > maxBarrierTimeout || len(req.Types) > maxBarrierTypes) {
				t.Fatalf("accepted %+v (timeout %s)", req, timeout)
			}
		case 1:
			p, err := readProgress(bytes.NewReader(body))
			if err == nil && (p.Current < 0 || p.Total < 0 || utf8.RuneCountInString(p.Message) > maxProgressMessage || p.Message != lines.Plain(p.Message)) {
				t.Fatalf("accepted %+v", p)
			}
		case 2:
			req, err := readStop(bytes.NewReader(body))
			if err == nil && len(req.Error) > maxStopErrorBytes+32 {
				t.Fatalf("stop error of %d bytes", len(req.Error))
			}
		}
	})
}
