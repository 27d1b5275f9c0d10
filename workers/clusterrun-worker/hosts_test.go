//go:build linux

package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/clusterrun/clusterrun/activities"
	"github.com/clusterrun/clusterrun/workflows"
)

// registryClient answers the reporter's signal-with-start: it fails the first fails calls, then takes them,
// and keeps what each call reported.
type registryClient struct {
	client.Client // nil: the reporter calls nothing else
	mu            sync.Mutex
	fails         int
	reports       []workflows.HostReport
}

func (c *registryClient) SignalWithStartWorkflow(_ context.Context, _, _ string, arg any, _ client.StartWorkflowOptions,
	_ any, _ ...any) (client.WorkflowRun, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports = append(c.reports, arg.(workflows.HostReport))
	if len(c.reports) <= c.fails {
		return nil, errors.New("context deadline exceeded")
	}
	return nil, nil
}

func (c *registryClient) calls() []workflows.HostReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]workflows.HostReport(nil), c.reports...)
}

// A report that fails is tried again within seconds, not at the next ReportEvery: a host whose first reports
// were lost (a server that had just started) is in the registry before most launches place, and after the
// first report that goes through, the reporter keeps to ReportEvery. It says the host is stopping at the end.
func TestReporter_TriesAFailedReportAgainSoon(t *testing.T) {
	cl := &registryClient{fails: 3}
	logger := log.NewStructuredLogger(slog.New(slog.DiscardHandler))
	r := newReporter(cl, config{host: "h1", slots: 4}, activities.NewHost("h1", "", t.TempDir(), cl, logger), logger)
	r.retry = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx)
	}()
	// Three failures and the report that goes through: 20 + 40 + 80 ms apart, where one ReportEvery is 10 s.
	require.Eventually(t, func() bool { return len(cl.calls()) >= 4 }, 5*time.Second, 5*time.Millisecond,
		"a failed report was not tried again before the next ReportEvery")
	time.Sleep(300 * time.Millisecond) // the next retry would have been 160 ms after the fourth
	assert.Len(t, cl.calls(), 4, "reports went on at the retry's pace after one went through")
	cancel()
	<-done
	reports := cl.calls()
	require.Len(t, reports, 5)
	assert.False(t, reports[3].Stopping)
	assert.True(t, reports[4].Stopping, "the last report says the host is stopping")
	assert.Equal(t, "h1", reports[4].Host)
	assert.Equal(t, 4, reports[4].Slots)
}

// Tasks that free slots are reported within about a second (freedSoonest), not at the next ReportEvery: a
// launch waiting for room sees them free. A load that grows waits for the next ReportEvery.
func TestReporter_ReportsFreedSlotsAtOnce(t *testing.T) {
	cl := &registryClient{}
	logger := log.NewStructuredLogger(slog.New(slog.DiscardHandler))
	r := newReporter(cl, config{host: "h1", slots: 4}, activities.NewHost("h1", "", t.TempDir(), cl, logger), logger)
	var mu sync.Mutex
	unpinned := 3
	r.load = func() (int, int, []workflows.RunLoad) {
		mu.Lock()
		defer mu.Unlock()
		return unpinned, unpinned, []workflows.RunLoad{{Run: "r", Unpinned: unpinned}}
	}
	r.lookEvery = 10 * time.Millisecond
	set := func(n int) {
		mu.Lock()
		defer mu.Unlock()
		unpinned = n
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	require.Eventually(t, func() bool { return len(cl.calls()) == 1 }, 5*time.Second, 5*time.Millisecond)
	set(4)
	time.Sleep(freedSoonest + 200*time.Millisecond)
	require.Len(t, cl.calls(), 1, "a load that grows is not reported before ReportEvery")
	set(1)
	require.Eventually(t, func() bool { return len(cl.calls()) == 2 }, 2*time.Second, 5*time.Millisecond,
		"slots freed were not reported within a second")
	second := cl.calls()[1]
	if assert.NotNil(t, second.LogDisk, "the report carries the log folder's file system") {
		assert.Positive(t, second.LogDisk.Size)
		assert.LessOrEqual(t, second.LogDisk.Free, second.LogDisk.Size)
	}
	assert.Equal(t, 1, second.Unpinned)
	assert.Equal(t, []workflows.RunLoad{{Run: "r", Unpinned: 1}}, second.Runs)
	time.Sleep(freedSoonest + 200*time.Millisecond)
	assert.Len(t, cl.calls(), 2, "nothing more freed: no more reports before ReportEvery")
}

// Live hosts at this host's address whose --ports overlap its own are named; itself, other addresses, ranges
// that do not meet, silent hosts and hosts without a range are not.
func TestSharingPorts(t *testing.T) {
	r := func(from, to int) *workflows.PortRange { return &workflows.PortRange{From: from, To: to} }
	entry := func(host, addr string, ports *workflows.PortRange, live bool) workflows.HostEntry {
		return workflows.HostEntry{HostReport: workflows.HostReport{Host: host, Addr: addr, Ports: ports}, Live: live}
	}
	hosts := []workflows.HostEntry{
		entry("a", "10.0.0.1", r(20000, 29999), true), // itself
		entry("b", "10.0.0.1", r(29999, 30999), true), // meets at 29999
		entry("c", "10.0.0.1", r(30000, 30999), true), // past the range
		entry("d", "10.0.0.2", r(20000, 29999), true), // another machine
		entry("e", "10.0.0.1", r(20000, 29999), false),
		entry("f", "10.0.0.1", nil, true), // --ports off
		entry("g", "10.0.0.1", r(10000, 20000), true),
	}
	var names []string
	for _, h := range sharingPorts("a", "10.0.0.1", *r(20000, 29999), hosts) {
		names = append(names, h.Host)
	}
	assert.Equal(t, []string{"b", "g"}, names)
}
