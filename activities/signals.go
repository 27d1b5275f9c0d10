package activities

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/clusterrun/clusterrun/activities/shim"
)

// signalOrder is a signal for one attempt: a notice (the deadline warning, mapChangeSignal, stopRequestSignal)
// to its process group (and cgroup), or, with the spec's signalTo: main, to its own process only.
type signalOrder struct {
	e   *entry
	sig syscall.Signal
}

// signalEntries sends each attempt its signal, with one request to each supervisor for its attempts that get the
// same signal the same way, and returns once every one is sent or has failed. Sent over each task's own socket,
// one after the other, a stopRequestSignal took 12 s to reach 500 tasks of a host (2026-11-29), most of a
// stop's grace period; what names the signal in the log.
func (h *Host) signalEntries(orders []signalOrder, what string) {
	type group struct {
		supervisor string
		sig        syscall.Signal
		main       bool
	}
	groups := map[group][]*entry{}
	var keys []group
	for _, o := range orders {
		if o.e.process() == nil || o.e.exited() != nil {
			continue
		}
		k := group{o.e.supervisor, o.sig, o.e.task.SignalMain}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], o.e)
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() { h.signalGroup(k.supervisor, groups[k], k.sig, k.main, what) })
	}
	wg.Wait()
}

// signalGroup signals attempts of one supervisor with one request; a supervisor from before that request, or
// attempts with none (their own shims), are signalled one by one.
func (h *Host) signalGroup(supervisor string, es []*entry, sig syscall.Signal, main bool, what string) {
	if supervisor != "" {
		records := make([]string, len(es))
		for i, e := range es {
			records[i] = e.record
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := shim.Supervisor{Socket: supervisor}.SignalTasks(ctx, records, sig, main)
		cancel()
		var some *shim.SignalFailures
		switch {
		case err == nil:
			return
		case errors.As(err, &some), errors.Is(err, os.ErrDeadlineExceeded):
			// It took the request (the others got the signal), or does not answer: one by one would not do better.
			h.Logger.Warn(what+" failed", "tasks", len(es), "supervisor", supervisor, "error", err)
			return
		}
		h.Logger.Info("signalling tasks one by one: their supervisor took no signal for all", "tasks", len(es), "error", err)
	}
	for _, e := range es {
		if err := h.signalEntry(e, sig); err != nil {
			h.Logger.Warn(what+" failed", "task", e.ref.Task, "error", err)
		}
	}
}

// signalEntry sends one attempt a signal over its own socket: to its process group (and cgroup), or, with the
// spec's signalTo: main, to its own process only.
func (h *Host) signalEntry(e *entry, sig syscall.Signal) error {
	if e.process() == nil || e.exited() != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := h.shimClient(e)
	if e.task.SignalMain {
		err := c.SignalMain(ctx, sig)
		if !errors.Is(err, shim.ErrNoSignalMain) {
			return err
		}
		h.Logger.Warn("the task's supervisor predates signalTo: main, so its whole group gets the signal", "task", e.ref.Task, "signal", sig, "error", err)
	}
	return c.Signal(ctx, sig)
}
