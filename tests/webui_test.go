package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

// ensureChromium returns Debian's Chromium, installing it when it is missing.
func ensureChromium(t *testing.T) string {
	t.Helper()
	return ensureDebian(t, "/usr/bin/chromium", "chromium", "the Web UI test")
}

// ensureDebian returns the program at path, installing its Debian package when it is missing (as root; CI is).
func ensureDebian(t *testing.T, path, pkg, forWhat string) string {
	t.Helper()
	there := func() bool { _, err := os.Stat(path); return err == nil }
	if !there() {
		aptInstall(t, pkg, forWhat, there)
	}
	return path
}

// aptInstall installs Debian's pkg for forWhat unless there says, once the lock is held, that it is in place.
// The suite's two processes (tests/e2e.sh) take turns on a lock of their own: apt-get refuses to run beside
// another.
func aptInstall(t *testing.T, pkg, forWhat string, there func() bool) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatalf("%s is missing and this test is not root, so it cannot install it: apt-get install %s", pkg, pkg)
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "clusterrun-e2e-apt.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	if there() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t.Logf("installing %s (Debian) for %s; this takes a while once", pkg, forWhat)
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", pkg}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "apt-get %v:\n%s", args, out)
	}
}

// A run reads well in the Temporal Web UI: its pending activities are the tasks, by name, with their heartbeat.
func TestE2E_WebUI(t *testing.T) {
	chromium := ensureChromium(t)
	id := runID(t)
	spec := writeSpec(t, `{name: webui, command: [sh, -c, 'echo "serving $CLUSTERRUN_TASK"; exec sleep 308'], stopGracePeriod: 1s, tasks: {chief: {replicas: 1}, worker: {replicas: 2}}}`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	defer cli(t, "cancel", id)
	waitUntil(t, "tasks running", time.Minute, func() bool { return len(markedProcessesOf(t, "sleep 308")) == 3 })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	desc, err := env.client.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()

	browser, closeBrowser := newBrowser(ctx, t, chromium)
	defer closeBrowser()

	page := env.uiURL + "/namespaces/default/workflows/" + id + "/" + runID + "/pending-activities"
	_, err = chromedp.Run(browser, chromedp.Navigate(page))
	require.NoError(t, err, "open %s", page)
	_, err = chromedp.Run(browser, chromedp.Poll[bool](
		`document.body && ["chief-0", "worker-0", "worker-1", '"pid"', '"running"'].every(s => document.body.innerText.includes(s))`,
		chromedp.WithPollingTimeout(60*time.Second)))
	if err != nil {
		text, _ := chromedp.Run(browser, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("the tasks did not show on %s: %v\npage text:\n%s", page, err, clipText(text, 3000))
	}
	_, _ = chromedp.Run(browser, chromedp.Sleep(500*time.Millisecond)) // let the page settle before the picture
	text, err := chromedp.Run(browser, chromedp.Evaluate[string](`document.body.innerText`))
	require.NoError(t, err)
	// Quality 100 gives a PNG; anything less a JPEG.
	shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	require.NoError(t, err, "screenshot of %s", page)
	for _, want := range []string{"chief-0", "worker-0", "worker-1", workflows.ActivityRunTasks} {
		assert.Contains(t, text, want)
	}
	assert.Contains(t, text, `"phase": "running"`, "the heartbeat details show the running process")
	assert.Equal(t, 3, strings.Count(text, `"pid"`), "each task's heartbeat has its pid")

	out := filepath.Join(env.root, "out")
	require.NoError(t, os.MkdirAll(out, 0o755))
	shotPath := filepath.Join(out, "webui-pending-activities.png")
	require.NoError(t, os.WriteFile(shotPath, shot, 0o644))
	t.Logf("screenshot: %s", shotPath)
}

// newBrowser starts a headless Chromium for chromedp. Chromium puts its singleton socket in a folder of
// TMPDIR that it leaves behind when it is killed, so its TMPDIR is the test's own, which the test removes.
func newBrowser(ctx context.Context, t *testing.T, chromium string) (context.Context, func()) {
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.Env("TMPDIR="+t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1400, 1000),
	)...)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	return browser, func() { cancelBrowser(); cancelAlloc() }
}

func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// A run's work-item counts read in the Web UI, on its items child workflow (the memo clusterrun.items).
func TestE2E_WebUIItemCounts(t *testing.T) {
	chromium := ensureChromium(t)
	id := runID(t)
	spec := writeSpec(t, `
name: webui-items
env: {PYTHONPATH: `+filepath.Join(env.root, "python")+`}
items: {}
stopGracePeriod: 1s
tasks:
  chief: {replicas: 1, command: [python3, -c, 'import clusterrun, time; [clusterrun.schedule("noop", args=(i,)) for i in range(50)]; clusterrun.join(); time.sleep(300)']}
  worker: {replicas: 1, command: [python3, -c, 'import clusterrun; clusterrun.serve({"noop": lambda i: i})']}
`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	defer cli(t, "cancel", id)
	waitUntil(t, "50 items done", time.Minute, func() bool {
		return strings.Contains(cli(t, "status", id).stdout, "ITEMS: 50 scheduled, 0 queued, 0 running, 50 done")
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	items := workflows.ItemsWorkflowID(id)
	desc, err := env.client.DescribeWorkflowExecution(ctx, items, "")
	require.NoError(t, err)
	browser, closeBrowser := newBrowser(ctx, t, chromium)
	defer closeBrowser()
	page := env.uiURL + "/namespaces/default/workflows/" + url.PathEscape(items) + "/" + desc.GetWorkflowExecutionInfo().GetExecution().GetRunId() + "/history"
	_, err = chromedp.Run(browser, chromedp.Navigate(page))
	require.NoError(t, err, "open %s", page)
	// The workflow page shows its memo in the "Memo" tab of its details: open it.
	_, err = chromedp.Run(browser, chromedp.Poll[bool](
		`(() => { const m = document.getElementById('memo-tab'); if (m) m.click(); return !!m })()`,
		chromedp.WithPollingTimeout(60*time.Second)))
	if err != nil {
		dump, _ := chromedp.Run(browser, chromedp.Evaluate[string](`[...document.querySelectorAll('*')].filter(e => e.innerText && e.innerText.trim() === 'Memo').map(e => e.outerHTML.slice(0, 300) + ' PARENT ' + e.parentElement.outerHTML.slice(0, 300)).join('\n----\n')`))
		t.Fatalf("no Memo section on %s: %v\n%s", page, err, dump)
	}
	_, err = chromedp.Run(browser, chromedp.Poll[bool](
		`document.body && ['"scheduled": 50', '"done": 50'].every(s => document.body.innerText.includes(s))`,
		chromedp.WithPollingTimeout(60*time.Second)))
	if err != nil {
		text, _ := chromedp.Run(browser, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("the item counts did not show on %s: %v\npage text:\n%s", page, err, clipText(text, 20000))
	}
}

// A sharded run in the Web UI: the run's page lists its shards as children, and a shard's page shows its
// tasks' leases with their heartbeats, as a small run's page does.
func TestE2E_WebUIShowsShards(t *testing.T) {
	chromium := ensureChromium(t)
	id := runID(t)
	spec := writeSpec(t, `{name: webui-shards, tasksPerShard: 2, command: [sh, -c, 'exec sleep 309'], stopGracePeriod: 1s, tasks: {chief: {replicas: 1}, worker: {replicas: 2}}}`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	defer cli(t, "cancel", id)
	waitUntil(t, "tasks running", time.Minute, func() bool { return len(markedProcessesOf(t, "sleep 309")) == 3 })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	browser, closeBrowser := newBrowser(ctx, t, chromium)
	defer closeBrowser()
	see := func(workflowID, tab string, want ...string) {
		t.Helper()
		desc, err := env.client.DescribeWorkflowExecution(ctx, workflowID, "")
		require.NoError(t, err)
		page := env.uiURL + "/namespaces/default/workflows/" + url.PathEscape(workflowID) + "/" + desc.GetWorkflowExecutionInfo().GetExecution().GetRunId() + "/" + tab
		_, err = chromedp.Run(browser, chromedp.Navigate(page))
		require.NoError(t, err, "open %s", page)
		wantJSON, _ := json.Marshal(want)
		_, err = chromedp.Run(browser, chromedp.Poll[bool](
			fmt.Sprintf(`document.body && %s.every(s => document.body.innerText.includes(s))`, wantJSON),
			chromedp.WithPollingTimeout(60*time.Second)))
		if err != nil {
			text, _ := chromedp.Run(browser, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			t.Fatalf("%v did not show on %s: %v\npage text:\n%s", want, page, err, clipText(text, 3000))
		}
	}
	see(id, "relationships", workflows.ShardWorkflowID(id, 0, 0), workflows.ShardWorkflowID(id, 0, 1))
	see(workflows.ShardWorkflowID(id, 0, 1), "pending-activities", "worker-1", workflows.ActivityRunTasks, `"pid"`, `"running"`)
}
