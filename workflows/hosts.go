package workflows

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

// The host registry: one long-running HostRegistry workflow (ID HostRegistryID) that every host worker reports
// to (SignalHostReport, with signal-with-start) when it starts, every ReportEvery, and when it drains or
// undrains. It answers QueryHosts, which `clusterrun hosts` prints and from which runs place their unpinned tasks.
const (
	HostRegistryWorkflowType = "HostRegistry"
	HostRegistryID           = "clusterrun-hosts"
	SignalHostReport         = "host-report"
	QueryHosts               = "hosts"
	// ActivityListHosts is the local activity a run uses to read the registry before it places tasks.
	ActivityListHosts = "ListHosts"
	// ChangePlacement marks, with workflow.GetVersion, runs that place unpinned tasks themselves.
	ChangePlacement = "clusterrun-placement"
	// ChangeStableAddresses marks runs whose restarted tasks go back to their host (and port) when it is live,
	// and whose hosts are told the new map when a task moves.
	ChangeStableAddresses = "clusterrun-stable-addresses"
	// ChangeGangKeepsAddresses marks runs whose gang restarts bring each task back to the host of its last
	// attempt, and ask the port allocator for the port it had there; asked only at a gang restart's launch.
	ChangeGangKeepsAddresses = "clusterrun-gang-keeps-addresses"
)

// ReportEvery is how often a host worker reports; a host silent for LiveFor is not live.
const (
	ReportEvery = 10 * time.Second
	LiveFor     = 3 * ReportEvery
	// forgetAfter drops a host from the registry once it has been silent this long.
	forgetAfter = 7 * 24 * time.Hour
)

// HostReport is what a host worker says about itself.
type HostReport struct {
	Host    string   `json:"host"`
	Addr    string   `json:"addr"`
	Pools   []string `json:"pools"`
	Slots   int      `json:"slots"`
	Running int      `json:"running"` // task processes running here, pinned ones included
	// Unpinned counts the running tasks that hold one of the host's slots (every task not pinned by its spec).
	Unpinned int `json:"unpinned"`
	// Runs says whose those tasks are: run by run, how many (claims.go).
	Runs    []RunLoad `json:"runs,omitempty"`
	Drained bool      `json:"drained,omitempty"`
	Version string    `json:"version,omitempty"`
	// Stopping says the worker is shutting down.
	Stopping bool `json:"stopping,omitempty"`
	// Ports is the range a run may choose its tasks' ports on this host from, in advance (--ports); nil: the
	// host chooses each port itself, and the run waits for its placements.
	Ports *PortRange `json:"ports,omitempty"`
	// PortsInUse are the ports of that range that are not free here (at most MaxPortsInUse): held by this
	// host's running tasks, or by any other socket of the machine. The allocator gives them to no task.
	PortsInUse []int `json:"portsInUse,omitempty"`
	// LogDisk is the file system of the host's --log-dir (nil from workers before this field, or where it
	// cannot be read): a full one loses its tasks' output.
	LogDisk *DiskSpace `json:"logDisk,omitempty"`
	// LogRetention is the host's --log-retention as it reads: "30d", "12h", or "0" when it keeps every run's
	// logs ("" from workers before this field).
	LogRetention string `json:"logRetention,omitempty"`
}

// DiskSpace is a file system's size and the bytes of it free to its tasks, in bytes.
type DiskSpace struct {
	Free int64 `json:"free"`
	Size int64 `json:"size"`
}

// Low says the file system is nearly full: less than a tenth of it free, and less than 1 GiB.
func (d DiskSpace) Low() bool { return d.Free < min(1<<30, d.Size/10) }

// MaxPortsInUse bounds a host report's PortsInUse.
const MaxPortsInUse = 4096

// PortRange is a host's ports From to To, both included.
type PortRange struct {
	From int `json:"from"`
	To   int `json:"to"`
}

// HostEntry is a host as the registry knows it: its last report and when it came.
type HostEntry struct {
	HostReport
	LastSeen time.Time `json:"lastSeen"`
	// Live says the host reported within LiveFor and is not shutting down (as of the query).
	Live bool `json:"live"`
}

// HostRegistryState carries the registry over continue-as-new.
type HostRegistryState struct {
	Hosts map[string]HostEntry `json:"hosts,omitempty"`
}

// HostRegistry keeps every host's last report. It never ends; it continues as new when its history is due
// (historyDue).
func HostRegistry(ctx workflow.Context, st HostRegistryState) error {
	if st.Hosts == nil {
		st.Hosts = map[string]HostEntry{}
	}
	err := workflow.SetQueryHandler(ctx, QueryHosts, func() ([]HostEntry, error) {
		return hostList(st.Hosts, workflow.Now(ctx)), nil
	})
	if err != nil {
		return err
	}
	reports := workflow.GetSignalChannel(ctx, SignalHostReport)
	record := func(r HostReport) {
		if r.Host != "" {
			st.Hosts[r.Host] = HostEntry{HostReport: r, LastSeen: workflow.Now(ctx)}
		}
	}
	for {
		var r HostReport
		reports.Receive(ctx, &r)
		record(r)
		if !historyDue(ctx) {
			continue
		}
		for reports.ReceiveAsync(&r) {
			record(r)
		}
		now := workflow.Now(ctx)
		for _, h := range hostNames(st.Hosts) {
			if now.Sub(st.Hosts[h].LastSeen) > forgetAfter {
				delete(st.Hosts, h)
			}
		}
		return workflow.NewContinueAsNewError(ctx, HostRegistryWorkflowType, st)
	}
}

// hostList is the registry's hosts by name, each marked live or not as of now.
func hostList(hosts map[string]HostEntry, now time.Time) []HostEntry {
	out := make([]HostEntry, 0, len(hosts))
	for _, h := range hostNames(hosts) {
		e := hosts[h]
		e.Live = !e.Stopping && now.Sub(e.LastSeen) <= LiveFor
		out = append(out, e)
	}
	return out
}

func hostNames(hosts map[string]HostEntry) []string {
	names := make([]string, 0, len(hosts))
	//workflowcheck:ignore
	for h := range hosts {
		names = append(names, h)
	}
	sort.Strings(names)
	return names
}

// placeTasks picks a host for each unpinned task from the live, undrained hosts of its pool, in three tiers:
// hosts with a free slot by their reports (spread: the lowest share of slots in use, then the most free slots,
// then by name; pack: the busiest with a free slot); else, since reports may be up to ReportEvery old, hosts
// where this launch alone still fits in the slots (the fewest of this launch's tasks for their slots first);
// else, the launch is larger than the pool, and the task waits on the host with the fewest of its tasks. So a
// launch that fits in the pool's slots never waits on its own tasks, however stale the reports. A restart
// goes back to the host of its last attempt when that host is live and this launch leaves it room. Tasks of a pool with no live host get "" (they
// wait in their pool's queue for any host). hosts is updated with the tasks placed.
func placeTasks(tasks []placeRequest, hosts []HostEntry, pack bool) []string {
	out := make([]string, len(tasks))
	now := make([]HostEntry, len(hosts)) // this launch's tasks per host, as loads
	for j, h := range hosts {
		now[j] = HostEntry{HostReport: HostReport{Host: h.Host, Slots: h.Slots}}
	}
	for i, t := range tasks {
		eligible := func(h HostEntry, avoid string) bool {
			return h.Live && !h.Drained && h.Slots > 0 && inPool(h.Pools, t.pool) && (avoid == "" || h.Host != avoid)
		}
		tiers := []func(j int) (ok bool, better func(a, b int) bool){
			func(j int) (bool, func(a, b int) bool) {
				return hosts[j].Unpinned < hosts[j].Slots, func(a, b int) bool { return better(hosts[a], hosts[b], pack) }
			},
			func(j int) (bool, func(a, b int) bool) {
				return now[j].Unpinned < now[j].Slots, func(a, b int) bool { return better(now[a], now[b], false) }
			},
			func(int) (bool, func(a, b int) bool) {
				return true, func(a, b int) bool { return better(now[a], now[b], false) }
			},
		}
		best := -1
		for j, h := range hosts {
			if t.prefer != "" && h.Host == t.prefer && eligible(h, "") && now[j].Unpinned < now[j].Slots {
				best = j
			}
		}
		for _, tier := range tiers {
			if best >= 0 {
				break
			}
			for _, avoid := range []string{t.avoid, ""} {
				for j, h := range hosts {
					ok, isBetter := tier(j)
					if ok && eligible(h, avoid) && (best < 0 || isBetter(j, best)) {
						best = j
					}
				}
				if best >= 0 {
					break
				}
			}
			if best >= 0 {
				break
			}
		}
		if best >= 0 {
			out[i] = hosts[best].Host
			hosts[best].Unpinned++
			hosts[best].Running++
			now[best].Unpinned++
		}
	}
	return out
}

// placeRequest is one task to place: its pool, and a host to prefer when it is live with room in this
// launch (a restart's, so that it keeps its address), or, in runs from before, a host to avoid unless it is
// the only one.
type placeRequest struct{ pool, prefer, avoid string }

// better says whether host a should take the next task before host b.
func better(a, b HostEntry, pack bool) bool {
	freeA, freeB := a.Slots-a.Unpinned, b.Slots-b.Unpinned
	if pack && (freeA > 0) != (freeB > 0) {
		return freeA > 0 // a host with room first
	}
	if pack && freeA > 0 && a.Unpinned != b.Unpinned {
		return a.Unpinned > b.Unpinned // the busiest with room
	}
	// Spread (and pack once every host is full): the lowest share of its slots in use.
	if la, lb := a.Unpinned*b.Slots, b.Unpinned*a.Slots; la != lb {
		return la < lb
	}
	if freeA != freeB {
		return freeA > freeB
	}
	return a.Host < b.Host
}

func inPool(pools []string, pool string) bool {
	for _, p := range pools {
		if p == pool {
			return true
		}
	}
	return false
}

// startingTogether counts, per pool, the unpinned tasks that start with these: tasks, and while the
// generation's rendezvous is not complete, those launched before them that wait at it for them (each holding a
// slot of its host). A launch's overflow held back and launched again is so still counted with its whole gang:
// 2 held tasks of a 6-task gang on 4 slots can never start, though the other 4 are placed.
func (r *run) startingTogether(tasks []*task) map[string]int {
	need := map[string]int{}
	launching := map[*task]bool{}
	for _, t := range tasks {
		need[t.Pool]++
		launching[t] = true
	}
	if r.released {
		return need
	}
	for _, t := range r.tasks {
		if !launching[t] && t.Host == "" && t.future != nil && !t.done && !t.released {
			need[t.Pool]++
		}
	}
	return need
}

// gangKeepsAddresses says whether this launch, a gang restart's (a generation after the first), brings its
// tasks back to their hosts and ports.
func (r *run) gangKeepsAddresses(ctx workflow.Context) bool {
	return r.generation > 0 && workflow.GetVersion(ctx, ChangeGangKeepsAddresses, workflow.DefaultVersion, 1) == 1
}

// lastHost is the host of the last attempt st keeps among its earlier ones ("" when none started).
func lastHost(st TaskStatus) string {
	if len(st.Earlier) == 0 {
		return ""
	}
	return st.Earlier[len(st.Earlier)-1].Host
}

// testRegistry stands in for the host registry in the workflow tests with fake hosts, which script leases to
// the mocked clock: a local activity there runs on the wall clock beside them. Placement itself is tested by
// placeTasks' tests and end to end. Nil outside those tests.
var testRegistry func() []HostEntry

// place picks hosts for the unpinned tasks about to start a process, from the host registry (runs that
// place; older ones leave every unpinned task to its pool's queue), and pre-places the launch when it can. A
// registry that cannot be read leaves unpinned tasks to their pools too, and the launch to its rendezvous. It
// returns the orders held back for room in their pools (overflow.go), which are not to be launched now, and
// how they wait.
func (r *run) place(ctx workflow.Context, orders []launchOrder) ([]launchOrder, roomWait) {
	if !r.leased {
		return nil, roomWait{}
	}
	notePinned(orders)
	prePlace := r.mayPrePlace(ctx, orders)
	var tasks []*task
	var unpinned []launchOrder // tasks[i]'s
	var reqs []placeRequest
	for _, o := range orders {
		if o.how == reattach || o.t.Host != "" {
			continue
		}
		o.t.placedHost = ""
		tasks = append(tasks, o.t)
		unpinned = append(unpinned, o)
		req := placeRequest{pool: o.t.Pool}
		if o.how == newAttempt && o.t.attempt > 0 {
			last := o.t.status.Host
			if last == "" && r.gangKeepsAddresses(ctx) {
				last = lastHost(o.t.status) // a gang restart's: its status starts afresh
			}
			switch {
			case workflow.GetVersion(ctx, ChangeStableAddresses, workflow.DefaultVersion, 1) == workflow.DefaultVersion, o.t.lostHost:
				req.avoid = last // runs from before, and a task lost with its host: elsewhere when it can
			default:
				req.prefer = last // a restart comes back where it was, at its address, when that host is live
			}
		}
		if o.how == sameAttempt && o.t.movedFrom != "" && workflow.GetVersion(ctx, ChangeMoveFromGoneHosts, workflow.DefaultVersion, 1) == 1 {
			req.avoid = o.t.movedFrom // launched again after that host lost it, or moved off it: elsewhere when it can
		}
		reqs = append(reqs, req)
	}
	if len(tasks) == 0 && !prePlace || workflow.GetVersion(ctx, ChangePlacement, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil, roomWait{}
	}
	hosts, err := listHosts(ctx)
	if err != nil {
		workflow.GetLogger(ctx).Warn("cannot read the host registry; unpinned tasks wait in their pools' queues", "error", err)
		return nil, roomWait{}
	}
	free, reported := freeSlots(hosts), slices.Clone(hosts) // placeTasks counts this launch in hosts
	for i, h := range placeTasks(reqs, hosts, r.plan.Placement == spec.PlacementPack) {
		tasks[i].placedHost, tasks[i].waitNote = h, ""
	}
	need := r.startingTogether(tasks)
	held := r.holdOverflow(ctx, tasks, unpinned, hosts, need)
	placed := map[string]int{}
	for _, t := range tasks {
		placed[t.placedHost]++
	}
	// Every task on a host given more of this launch than the slots its report left free may wait there (which
	// of them waits is the host's pick): say so, so that a run larger than its pool does not look like a
	// missing host.
	for _, t := range tasks {
		f := free[t.Pool]
		switch {
		case t.placedHost == "" && t.waitNote != "": // held back
		case t.placedHost != "" && f != nil && placed[t.placedHost] > f.hostFree[t.placedHost]:
			t.waitNote = slotNote(t.placedHost, t.Pool, need[t.Pool], f)
		case f == nil:
			t.waitNote = fmt.Sprintf("waiting for a host of pool %s: the host registry has no live, undrained host in it "+
				"(clusterrun hosts%s); start a clusterrun-worker with --pool %s, or undrain one", t.Pool, poolOtherCase(t.Pool, hosts), t.Pool)
		}
	}
	noteAbsentHosts(orders, hosts)
	if prePlace && len(held) == 0 {
		if no := r.prePlace(ctx, orders, reported, need, free); no != nil {
			return r.holdForRoom(ctx, unpinned, *no, need, reported)
		}
	}
	return held, roomWait{d: holdEvery}
}

// noteAbsentHosts notes, for each task pinned to a host the registry does not list as live, or lists as drained,
// that it waits for that host: a misspelt host name, a host whose worker is down, or one an operator drained,
// otherwise showed only as Pending (or placed there) until startTimeout.
func noteAbsentHosts(orders []launchOrder, hosts []HostEntry) {
	live, open := map[string]bool{}, map[string]bool{}
	for _, h := range hosts {
		live[h.Host] = live[h.Host] || h.Live
		open[h.Host] = open[h.Host] || (h.Live && !h.Drained)
	}
	for _, o := range orders {
		if t := o.t; o.how != reattach && t.Host != "" {
			switch {
			case !live[t.Host]:
				t.waitNote = fmt.Sprintf("waiting for host %s: the host registry has no live clusterrun-worker --host %s "+
					"(clusterrun hosts lists the live ones%s)", t.Host, t.Host, otherCase(t.Host, hosts))
			case !open[t.Host]:
				t.waitNote = fmt.Sprintf("waiting for host %s: it is drained and takes no new tasks "+
					"(clusterrun drain %s --undo takes them again)", t.Host, t.Host)
			default:
				t.waitNote = lostNote(t) // the registry lists a host whose worker just died as live for LiveFor
			}
		}
	}
}

// otherCase names the live host whose name is host's in other letter case ("; host-a is live" for host-A): host
// names are case-sensitive, and the two look alike in a spec. Only that: a host a letter away (host-c beside
// host-a) is as often another machine whose worker is down.
func otherCase(host string, hosts []HostEntry) string {
	for _, h := range hosts {
		if h.Live && h.Host != host && strings.EqualFold(h.Host, host) {
			return fmt.Sprintf("; %s is live, and host names are case-sensitive", h.Host)
		}
	}
	return ""
}

// poolOtherCase names the pool with live hosts whose name is pool's in other letter case, as otherCase does for
// a host.
func poolOtherCase(pool string, hosts []HostEntry) string {
	for _, h := range hosts {
		for _, name := range h.Pools {
			if h.Live && !h.Drained && name != pool && strings.EqualFold(name, pool) {
				return fmt.Sprintf("; pool %s has live hosts, and pool names are case-sensitive", name)
			}
		}
	}
	return ""
}

// notePinned sets the note of each pinned task about to launch from what the run knows itself, before (and
// whether or not) a registry read says more (noteAbsentHosts): a restart pinned to the host that lost its last
// attempt waits for that host's worker, and otherwise nothing is known yet, so an older note goes.
func notePinned(orders []launchOrder) {
	for _, o := range orders {
		if o.how != reattach && o.t.Host != "" {
			o.t.waitNote = lostNote(o.t)
		}
	}
}

// lostNote says that t, pinned to the host that lost its last attempt, waits for that host's worker; "" for
// any other task.
func lostNote(t *task) string {
	if !t.lostHost {
		return ""
	}
	return fmt.Sprintf("waiting for host %s: it lost the last attempt, and starts this one once its clusterrun-worker "+
		"--host %s is back (clusterrun hosts shows when it last reported)", t.Host, t.Host)
}

// slotNotePrefix begins every slotNote.
const slotNotePrefix = "waiting for a free slot on "

// slotNote says why a task placed on host may wait there for a slot: the launch's need tasks of pool start
// together (they meet at the rendezvous), and the pool's live hosts have too few slots, or too few free.
func slotNote(host, pool string, need int, f *poolSlots) string {
	head := slotNotePrefix + host + ": "
	drained := drainedClause(f.drained)
	if need > f.slots {
		fix := "add hosts to the pool, raise their --slots, or run fewer replicas"
		if len(f.drained) > 0 {
			fix = "undrain a host, " + fix
		}
		return head + fmt.Sprintf("this launch's %d tasks of pool %s start together, and the pool's live hosts have %s in all "+
			"(--slots)%s: %s", need, pool, slotCount(f.slots), drained, fix)
	}
	if need == 1 {
		return head + fmt.Sprintf("the live hosts of pool %s have %d of their %s free (--slots)%s: it starts as other tasks end",
			pool, f.free, slotCount(f.slots), drained)
	}
	return head + fmt.Sprintf("this launch's %d tasks of pool %s start together, and the pool's live hosts have %d of their %s "+
		"free (--slots)%s: they start as other tasks end", need, pool, f.free, slotCount(f.slots), drained)
}

func slotCount(n int) string {
	if n == 1 {
		return "1 slot"
	}
	return fmt.Sprintf("%d slots", n)
}

// listHosts reads the host registry, with a local activity.
func listHosts(ctx workflow.Context) ([]HostEntry, error) {
	if testRegistry != nil {
		return testRegistry(), nil
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 5 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var hosts []HostEntry
	err := workflow.ExecuteLocalActivity(lctx, ActivityListHosts).Get(ctx, &hosts)
	return hosts, err
}

// poolSlots counts a pool's slots on its live, undrained hosts, how many are free, and which host has how many;
// drained names its live hosts that are drained, whose slots a note says are left out.
type poolSlots struct {
	slots, free int
	hostFree    map[string]int
	drained     []string
}

func freeSlots(hosts []HostEntry) map[string]*poolSlots {
	out := map[string]*poolSlots{}
	for _, h := range hosts {
		if !h.Live || h.Drained {
			continue
		}
		for _, p := range h.Pools {
			if out[p] == nil {
				out[p] = &poolSlots{hostFree: map[string]int{}}
			}
			out[p].slots += h.Slots
			out[p].free += max(h.Slots-h.Unpinned, 0)
			out[p].hostFree[h.Host] = max(h.Slots-h.Unpinned, 0)
		}
	}
	for _, h := range hosts { // the drained hosts of pools that have others, in the registry's order
		if h.Live && h.Drained {
			for _, p := range h.Pools {
				if f := out[p]; f != nil {
					f.drained = append(f.drained, h.Host)
				}
			}
		}
	}
	return out
}

// drainedHosts names the live hosts of pool that are drained.
func drainedHosts(hosts []HostEntry, pool string) []string {
	var out []string
	for _, h := range hosts {
		if h.Live && h.Drained && inPool(h.Pools, pool) {
			out = append(out, h.Host)
		}
	}
	return out
}

// drainedClause tells a note's reader that the slots it counts leave drained hosts out, and how to take one
// back: ", not counting drained host u-b (clusterrun drain u-b --undo takes tasks there again)". Empty when
// none is drained.
func drainedClause(drained []string) string {
	switch {
	case len(drained) == 0:
		return ""
	case len(drained) == 1:
		return fmt.Sprintf(", not counting drained host %s (clusterrun drain %s --undo takes tasks there again)", drained[0], drained[0])
	case len(drained) <= 3:
		return fmt.Sprintf(", not counting drained hosts %s (clusterrun drain HOST --undo takes tasks there again)", strings.Join(drained, ", "))
	}
	return fmt.Sprintf(", not counting drained hosts %s and %d more (clusterrun drain HOST --undo takes tasks there again)",
		strings.Join(drained[:3], ", "), len(drained)-3)
}
