package workflows

import "go.temporal.io/sdk/workflow"

// The host registry and the port allocator never end: each continues as new, carrying its state. A worker
// that has neither in its cache (it just started: a restart, an upgrade) replays its whole history before it
// answers the first query or update of a launch. Waiting for the server's suggestion let the allocator reach
// 3,786 events (1.25 MB), and the first launch after the workers' restart then spent 170–200 ms in its first
// workflow task against 25 ms warm (PostgreSQL, 2026-11-26); with a fresh allocator, 38–59 ms.

// ChangeShortHistories marks registry and allocator runs that continue as new once their history passes
// shortHistory events, not only when the server suggests it.
const ChangeShortHistories = "clusterrun-short-histories"

// shortHistory is how many events the registry's and the allocator's histories reach before they continue as
// new: a few minutes of reports from a handful of hosts, a few hundred launches.
var shortHistory = 1000 // a variable only so tests can shorten it

// historyDue says whether a long-running workflow should continue as new now: the server suggests it, or its
// history passed shortHistory events. The version is asked only then, so that a workflow task an older worker
// completed past that point (it went on) replays as it was written, and the run waits for the suggestion.
func historyDue(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	if info.GetContinueAsNewSuggested() {
		return true
	}
	return info.GetCurrentHistoryLength() >= shortHistory &&
		workflow.GetVersion(ctx, ChangeShortHistories, workflow.DefaultVersion, 1) == 1
}
