package activities

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/clusterrun/clusterrun/internal/lines"
	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// Bounds on what a task may send over its control socket. The task is user code: its requests are read as
// untrusted input, and anything that travels on to the run's history (a stop's error, a barrier's types) is
// bounded here.
const (
	maxRequestBody     = 64 << 10
	maxBarrierTypes    = 100
	maxBarrierTimeout  = 30 * 24 * time.Hour
	maxStopErrorBytes  = 4 << 10
	maxProgressMessage = 40 // runes shown in a status line
)

// decode reads a JSON body strictly: at most maxRequestBody bytes, no unknown fields, nothing after the value.
func decode(path string, body io.Reader, v any) error {
	return decodeLimit(path, body, v, maxRequestBody)
}

// decodeLimit is decode with a bound of its own.
func decodeLimit(path string, body io.Reader, v any, limit int64) error {
	dec := json.NewDecoder(io.LimitReader(body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON body for %s (at most %d KiB): %v", path, limit>>10, err)
	}
	if dec.More() {
		return fmt.Errorf("malformed JSON body for %s: more than one JSON value", path)
	}
	return nil
}

// readBarrier reads a barrier request and checks it against the run's task types; the timeout is 0 for none.
func readBarrier(body io.Reader, types map[string]bool) (task.BarrierRequest, time.Duration, error) {
	var req task.BarrierRequest
	if err := decode(task.PathBarrier, body, &req); err != nil {
		return req, 0, err
	}
	if err := task.CheckBarrierName(req.Name); err != nil {
		return req, 0, err
	}
	if len(req.Types) > maxBarrierTypes {
		return req, 0, fmt.Errorf("barrier %q names %d task types; at most %d", req.Name, len(req.Types), maxBarrierTypes)
	}
	for _, typ := range req.Types {
		if !types[typ] {
			return req, 0, fmt.Errorf("barrier %q names task type %q, which this run does not have (it has %s)",
				req.Name, cut(typ, 64), strings.Join(sortedSet(types), ", "))
		}
	}
	if req.Timeout == "" {
		return req, 0, nil
	}
	d, err := time.ParseDuration(req.Timeout)
	if err != nil || d <= 0 || d > maxBarrierTimeout {
		return req, 0, fmt.Errorf("barrier timeout %q is not a positive duration of at most %s; write e.g. 30s or 5m",
			cut(req.Timeout, 64), maxBarrierTimeout)
	}
	return req, d, nil
}

// readProgress reads a progress report; its message is plain text (lines.Plain: a bar block redrawn on the
// reader's terminal has no room for a task's escape sequences) cut to what a status line shows.
func readProgress(body io.Reader) (*workflows.Progress, error) {
	var req task.ProgressRequest
	if err := decode(task.PathProgress, body, &req); err != nil {
		return nil, err
	}
	if req.Current < 0 || req.Total < 0 {
		return nil, errors.New("progress current and total must not be negative")
	}
	msg := strings.TrimSpace(lines.Plain(strings.ReplaceAll(req.Message, "\n", " ")))
	if utf8.RuneCountInString(msg) > maxProgressMessage {
		msg = string([]rune(msg)[:maxProgressMessage-1]) + "…"
	}
	return &workflows.Progress{Current: req.Current, Total: req.Total, Message: msg}, nil
}

// readStop reads a stop request; a long error is cut, as it travels to the run's history.
func readStop(body io.Reader) (task.StopRequest, error) {
	var req task.StopRequest
	if err := decode(task.PathStop, body, &req); err != nil {
		return req, err
	}
	req.Error = cut(req.Error, maxStopErrorBytes)
	return req, nil
}

// cut shortens s to at most n bytes, on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + fmt.Sprintf("… (%d bytes cut)", len(s)-i)
}
