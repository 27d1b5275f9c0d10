//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/clusterrun/clusterrun/activities"
	"github.com/clusterrun/clusterrun/internal/version"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// reporter tells the host registry (workflows.HostRegistry) about this host: at start, every
// workflows.ReportEvery, as soon as its tasks take fewer slots than its last report counted (freedSoonest apart
// at most), on a drain or undrain (report, called by the drain itself), and once more when the worker stops.
type reporter struct {
	cl     client.Client
	c      config
	host   *activities.Host
	logger log.Logger
	// retry is how soon a failed report is tried again; it doubles with each failure in a row, up to
	// workflows.ReportEvery.
	retry time.Duration
	// load is the host's load (Host.Load), and lookEvery how often the reporter looks at it between reports.
	load      func() (held, unpinned int, runs []workflows.RunLoad)
	lookEvery time.Duration

	mu       sync.Mutex
	reported int // the unpinned tasks the last report that went through counted (-1: none went through)
}

// reportRetry is a reporter's first retry after a failed report. A host that is not in the registry gets no
// unpinned task from a run that places in those seconds: a launch larger than the pool's other hosts then
// waits on them, where this host would have taken its share.
const reportRetry = time.Second

// A report goes out as soon as the host's tasks have freed slots since the last one: a launch waiting for
// room (workflows/claims.go) sees them free within about a second of a task's end, not up to ReportEvery
// later. The reporter looks at the load every loadEvery, and reports so at most every freedSoonest.
const (
	loadEvery    = 250 * time.Millisecond
	freedSoonest = time.Second
)

func newReporter(cl client.Client, c config, host *activities.Host, logger log.Logger) *reporter {
	return &reporter{cl: cl, c: c, host: host, logger: logger, retry: reportRetry, load: host.Load, lookEvery: loadEvery, reported: -1}
}

// run reports until ctx ends, then says the host is stopping.
func (r *reporter) run(ctx context.Context) {
	failed, looked := false, false
	retry := r.retry
	look := time.NewTicker(r.lookEvery)
	defer look.Stop()
	for {
		err := r.report(ctx, false)
		last := time.Now()
		if err == nil && !looked {
			looked = true
			r.warnSharedPorts(ctx)
		}
		switch {
		case err != nil && !failed && ctx.Err() == nil:
			r.logger.Warn("cannot report to the host registry; runs place unpinned tasks without this host's load until it can", "error", err)
			failed = true
		case err == nil && failed:
			r.logger.Info("reporting to the host registry again")
			failed = false
		}
		next := workflows.ReportEvery
		if err != nil {
			next, retry = retry, min(2*retry, workflows.ReportEvery)
		} else {
			retry = r.retry
		}
		wait := time.NewTimer(next)
	waiting:
		for {
			select {
			case <-ctx.Done():
				wait.Stop()
				stopCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = r.report(stopCtx, true)
				cancel()
				return
			case <-wait.C:
				break waiting
			case <-look.C:
				if err == nil && time.Since(last) >= freedSoonest && r.freed() {
					wait.Stop()
					break waiting
				}
			}
		}
	}
}

// warnSharedPorts warns, once the registry has this host, of the live hosts at this host's address whose
// --ports overlap its own: workers that share a machine each need their own range, or two of their tasks may be
// given one port at once (make up gives each its own).
func (r *reporter) warnSharedPorts(ctx context.Context) {
	if r.c.ports == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hosts, err := listHosts(r.cl)(ctx)
	if err != nil {
		return // only a warning: the next start looks again
	}
	for _, h := range sharingPorts(r.c.host, r.c.addr, *r.c.ports, hosts) {
		r.logger.Warn("another host worker has this host's address and --ports that overlap its own: two tasks may be given "+
			"one port at once; give each worker on a machine its own --ports range", "other", h.Host, "addr", h.Addr,
			"its_ports", fmt.Sprintf("%d-%d", h.Ports.From, h.Ports.To), "ports", fmt.Sprintf("%d-%d", r.c.ports.From, r.c.ports.To))
	}
}

// sharingPorts returns the live hosts other than host at addr whose port ranges overlap ports.
func sharingPorts(host, addr string, ports workflows.PortRange, hosts []workflows.HostEntry) []workflows.HostEntry {
	var out []workflows.HostEntry
	for _, h := range hosts {
		if h.Host != host && h.Live && h.Addr == addr && h.Ports != nil && h.Ports.From <= ports.To && ports.From <= h.Ports.To {
			out = append(out, h)
		}
	}
	return out
}

// retention writes --log-retention as a host report carries it: as the flag reads, "0" for none.
func retention(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return spec.FormatDays(d)
}

// freed says whether the host's tasks take fewer slots than its last report said.
func (r *reporter) freed() bool {
	_, unpinned, _ := r.load()
	r.mu.Lock()
	defer r.mu.Unlock()
	return unpinned < r.reported
}

func (r *reporter) report(ctx context.Context, stopping bool) error {
	held, unpinned, runs := r.load()
	rep := workflows.HostReport{Host: r.c.host, Addr: r.c.addr, Pools: r.c.pools, Slots: r.c.slots, Running: held,
		Unpinned: unpinned, Runs: runs, Drained: r.host.Drained(), Version: version.String("clusterrun-worker"), Stopping: stopping,
		Ports: r.c.ports, LogDisk: r.host.LogDisk(), LogRetention: retention(r.host.LogRetention)}
	if r.c.ports != nil {
		rep.PortsInUse = r.host.PortsIn(*r.c.ports, workflows.MaxPortsInUse)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := r.cl.SignalWithStartWorkflow(ctx, workflows.HostRegistryID, workflows.SignalHostReport, rep,
		client.StartWorkflowOptions{ID: workflows.HostRegistryID, TaskQueue: workflows.TaskQueue, StaticSummary: "clusterrun host registry"},
		workflows.HostRegistryWorkflowType, workflows.HostRegistryState{})
	if err == nil {
		r.mu.Lock()
		r.reported = unpinned
		r.mu.Unlock()
	}
	return err
}

// listHosts is the local activity runs read the registry with before they place tasks. No registry yet (no
// host has reported) is no hosts.
func listHosts(cl client.Client) func(context.Context) ([]workflows.HostEntry, error) {
	return func(ctx context.Context) ([]workflows.HostEntry, error) {
		v, err := cl.QueryWorkflow(ctx, workflows.HostRegistryID, "", workflows.QueryHosts)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var hosts []workflows.HostEntry
		return hosts, v.Get(&hosts)
	}
}

// searchAttributesRegistered is the local activity a run started without clusterrun's search attributes asks
// whether its namespace has them (workflows/searchattrs.go): both, as Keyword. A server that does not say (an
// error, a credential that may not list them) is a no, and the run goes on without them, as before.
func searchAttributesRegistered(cl client.Client) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		resp, err := cl.OperatorService().ListSearchAttributes(ctx,
			&operatorservice.ListSearchAttributesRequest{Namespace: activity.GetInfo(ctx).Namespace})
		if err != nil {
			return false, nil
		}
		for _, name := range []string{workflows.SearchAttrName, workflows.SearchAttrState} {
			if resp.GetCustomAttributes()[name] != enumspb.INDEXED_VALUE_TYPE_KEYWORD {
				return false, nil
			}
		}
		return true, nil
	}
}

// allocatePorts is the local activity runs get their pre-placed launches' ports with: an update of the port
// allocator (workflows/ports.go), started first when there is none yet. A launch refused for slots other runs
// claimed is asked again without the claims of those runs that have ended.
func allocatePorts(cl client.Client) func(context.Context, workflows.PortRequest) (workflows.PortGrant, error) {
	ask := askAllocator(cl)
	return func(ctx context.Context, req workflows.PortRequest) (workflows.PortGrant, error) {
		grant, err := ask(ctx, req)
		if err != nil || len(grant.BusyRuns) == 0 {
			return grant, err
		}
		// Slot claims of runs that have ended since hold nothing: ask again without them (workflows/claims.go).
		req.Ended = endedRuns(ctx, cl, grant.BusyRuns)
		if len(req.Ended) == 0 {
			return grant, nil
		}
		return ask(ctx, req)
	}
}

// endedRuns says which of runs (workflow IDs) no longer run: closed, or unknown to the server. A run that cannot
// be asked about counts as running.
func endedRuns(ctx context.Context, cl client.Client, runs []string) []string {
	var ended []string
	for _, id := range runs {
		d, err := cl.DescribeWorkflowExecution(ctx, id, "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			ended = append(ended, id)
		case err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			ended = append(ended, id)
		}
	}
	return ended
}

// awaitRunEnd watches runs for a launch waiting for their room (workflows/roomwake.go): it long-polls each
// run's history for its close event and names the first run that has ended, or none once in.For has passed. A
// run the server does not know has ended (its history is gone); one that cannot be asked about is not watched.
func awaitRunEnd(cl client.Client) func(context.Context, workflows.AwaitRunEndInput) (workflows.AwaitRunEndResult, error) {
	return func(ctx context.Context, in workflows.AwaitRunEndInput) (workflows.AwaitRunEndResult, error) {
		ctx, cancel := context.WithTimeout(ctx, in.For)
		defer cancel()
		ended := make(chan string, len(in.Runs))
		for _, id := range in.Runs {
			go func() {
				if runCloses(ctx, cl, id) {
					ended <- id
				}
			}()
		}
		select {
		case id := <-ended:
			return workflows.AwaitRunEndResult{Ended: id}, nil
		case <-ctx.Done():
			return workflows.AwaitRunEndResult{}, nil
		}
	}
}

// runCloses says whether run id closes (or is unknown) before ctx is done.
func runCloses(ctx context.Context, cl client.Client, id string) bool {
	it := cl.GetWorkflowHistory(ctx, id, "", true, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	if !it.HasNext() {
		return false
	}
	_, err := it.Next()
	var nf *serviceerror.NotFound
	return err == nil || errors.As(err, &nf)
}

// askAllocator sends the allocator one request, starting the allocator first when there is none.
func askAllocator(cl client.Client) func(context.Context, workflows.PortRequest) (workflows.PortGrant, error) {
	return func(ctx context.Context, req workflows.PortRequest) (workflows.PortGrant, error) {
		for try := 0; ; try++ {
			var grant workflows.PortGrant
			h, err := cl.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: workflows.PortAllocatorID,
				UpdateName: workflows.UpdateAllocatePorts, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err == nil {
				err = h.Get(ctx, &grant)
			}
			var nf *serviceerror.NotFound
			if try > 0 || !errors.As(err, &nf) {
				return grant, err
			}
			_, err = cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.PortAllocatorID, TaskQueue: workflows.TaskQueue,
				WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING, StaticSummary: "clusterrun port allocator"},
				workflows.PortAllocatorWorkflowType, workflows.PortAllocatorState{})
			if err != nil {
				return grant, err
			}
		}
	}
}

var gpuDevice = regexp.MustCompile(`^nvidia[0-9]+$`)

// defaultSlots is what a user would guess a host can take: its GPUs when it has any (/dev/nvidiaN), else its
// CPU cores.
func defaultSlots() int {
	if n := countGPUs("/dev"); n > 0 {
		return n
	}
	return runtime.NumCPU()
}

func countGPUs(dev string) int {
	entries, err := os.ReadDir(dev)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if gpuDevice.MatchString(filepath.Base(e.Name())) {
			n++
		}
	}
	return n
}
