// Package tests holds clusterrun's end-to-end tests: a real Temporal dev server (the pinned temporal CLI in
// ../bin), real clusterrun-worker processes and real task processes.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/clusterrun/clusterrun/activities"
	"github.com/clusterrun/clusterrun/workflows"
)

// cluster is the shared test environment: one dev server, the built binaries, and host workers.
type cluster struct {
	root    string // repository root
	bin     string // where the binaries under test were built
	logDir  string
	address string
	uiURL   string     // the dev server's Web UI
	marker  string     // set in every worker's environment, so every task process inherits it
	dev     *devServer // its own server: the suite's, or an isolated cluster's, which tests may kill
	client  client.Client
	mu      sync.Mutex
	workers map[string]*owned
	workDir string
	// runtime is its workers' --socket-dir (sockets, cluster files, records): on the machine's tmpfs, as the
	// default is, but the cluster's own, so that it goes with the cluster.
	runtime string
	// ports is its workers' --ports: a block of the default range of its own, so that the suite's clusters,
	// each with its own registry handing ports out, never give two tasks of one machine the same port.
	ports string
	// shared lists the hosts of the suite's shared cluster. Any other host a test starts there takes only the
	// tasks pinned to it: it joins a pool of its own, so no other test's unpinned task lands on a host that
	// leaves when its test ends.
	shared []string
	// workerVars are added to every worker's environment, after the suite's own.
	workerVars []string
}

// portBlocks hands each cluster of the suite its block of ports (cluster.ports).
var portBlocks struct {
	sync.Mutex
	next int
}

const portBlock = 250

// testPorts are the ports this test process hands out: blocks for its clusters' tasks, from blocksFrom up to
// blocksTo, and its servers' ports, from serversFrom up to serversTo. tests/e2e.sh runs the suite as two
// processes side by side (CLUSTERRUN_TEST_PART), each with ranges of its own, so that neither gives a port the
// other gave.
var testPorts = func() (r struct{ blocksFrom, blocksTo, serversFrom, serversTo int }) {
	switch os.Getenv("CLUSTERRUN_TEST_PART") {
	case "parallel":
		r.blocksFrom, r.blocksTo, r.serversFrom, r.serversTo = 20000, 27500, 30000, 31500
	case "serial":
		r.blocksFrom, r.blocksTo, r.serversFrom, r.serversTo = 27500, 30000, 31500, 32000
	default:
		r.blocksFrom, r.blocksTo, r.serversFrom, r.serversTo = 20000, 30000, 30000, 32000
	}
	return r
}()

func nextPortBlock() string {
	portBlocks.Lock()
	defer portBlocks.Unlock()
	from := testPorts.blocksFrom + portBlocks.next*portBlock
	portBlocks.next = (portBlocks.next + 1) % ((testPorts.blocksTo - testPorts.blocksFrom) / portBlock)
	return fmt.Sprintf("%d-%d", from, from+portBlock-1)
}

// newRuntimeDir makes a cluster's runtime folder beside the machine's default one (a tmpfs where there is one).
func newRuntimeDir() (string, error) {
	return os.MkdirTemp(filepath.Dir(activities.RuntimeDir(os.Getenv("XDG_RUNTIME_DIR"))), "crt-")
}

var env *cluster

// suitePostgres is the PostgreSQL every cluster's server uses on the postgres backend (BackendEnv); nil otherwise.
var suitePostgres *pgCluster

func TestMain(m *testing.M) {
	code, err := runSuite(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	os.Exit(code)
}

func runSuite(m *testing.M) (int, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return 1, err
	}
	temporalCLI := filepath.Join(root, "bin", "temporal")
	if _, err := os.Stat(temporalCLI); err != nil {
		return 1, fmt.Errorf("%s is missing: run `make tools` (or `make test`, which does)", temporalCLI)
	}
	work, err := os.MkdirTemp("", "clusterrun-e2e-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(work)
	c := &cluster{root: root, bin: filepath.Join(work, "bin"), logDir: filepath.Join(work, "logs"), workDir: work,
		marker: randomHex(8), workers: map[string]*owned{}, ports: nextPortBlock()}
	if c.runtime, err = newRuntimeDir(); err != nil {
		return 1, err
	}
	defer os.RemoveAll(c.runtime)
	for name, pkg := range map[string]string{"clusterrun": "./starter/clusterrun", "clusterrun-worker": "./workers/clusterrun-worker", "clusterrun-shim": "./workers/clusterrun-shim"} {
		build := exec.Command("go", "build", "-ldflags=-s -w", "-o", filepath.Join(c.bin, name), pkg)
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build does for the shim: a static binary starts faster
		if out, err := build.CombinedOutput(); err != nil {
			return 1, fmt.Errorf("build %s: %v\n%s", name, err, out)
		}
	}

	uiPort, err := freeTCPPort()
	if err != nil {
		return 1, err
	}
	port, err := freeTCPPort()
	if err != nil {
		return 1, err
	}
	c.uiURL = fmt.Sprintf("http://127.0.0.1:%d", uiPort)
	if onPostgres() {
		if suitePostgres, err = startPostgres(); err != nil {
			return 1, err
		}
		defer suitePostgres.stop()
	}
	c.dev = newServer(root, work, port)
	c.dev.uiPort = uiPort
	if err := c.dev.start(); err != nil {
		return 1, fmt.Errorf("start the Temporal server: %w", err)
	}
	defer c.dev.close()
	c.address = c.dev.address()
	c.client, err = client.Dial(client.Options{HostPort: c.address, Logger: quietLogger()})
	if err != nil {
		return 1, err
	}
	defer c.client.Close()

	// Two hosts for the whole suite; tests that kill or stop a worker start their own.
	c.shared = []string{"host-a", "host-b"}
	for _, h := range c.shared {
		if err := c.startWorker(h); err != nil {
			c.stopWorkers()
			return 1, err
		}
	}
	env = c
	code := m.Run()
	if dir := os.Getenv(RecordHistoriesEnv); dir != "" {
		if err := c.recordHistories(dir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: record histories:", err)
			code = 1
		}
	}
	c.stopWorkers()
	if orphans := c.orphans(); len(orphans) > 0 {
		killMarked(c.marker)
		return 1, fmt.Errorf("processes left behind after the suite: %s", strings.Join(orphans, "; "))
	}
	return code, nil
}

func quietLogger() log.Logger { return log.NewStructuredLogger(slog.New(slog.DiscardHandler)) }

// freeTCPPort is a free port for a test's server (see lowFreePort); the error is kept for its callers.
func freeTCPPort() (int, error) {
	return lowFreePort(), nil
}

var lowPorts struct {
	sync.Mutex
	given map[int]bool
}

// lowFreePort is a free port in 30000-31999 (testPorts) that no other test was given. Below 32768, the kernel never hands
// it out as an ephemeral port, so a server's own outgoing connections cannot take it between the check and the
// server's bind (this raced in CI: "bind: address already in use" for a port chosen by ":0"); and the
// PostgreSQL schema keeps membership ports in a smallint (a port above it stops the server with "value out
// of range for type smallint"). Above 29999, the host workers' default --ports, from which runs choose their
// tasks' ports.
func lowFreePort() int {
	lowPorts.Lock()
	defer lowPorts.Unlock()
	if lowPorts.given == nil {
		lowPorts.given = map[int]bool{}
	}
	for {
		port := testPorts.serversFrom + mrand.IntN(testPorts.serversTo-testPorts.serversFrom)
		if lowPorts.given[port] {
			continue
		}
		if portFree(fmt.Sprintf("127.0.0.1:%d", port)) == 0 {
			continue
		}
		lowPorts.given[port] = true
		return port
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startWorker starts a clusterrun-worker for host and waits until it is ready.
func (c *cluster) startWorker(host string, extra ...string) error {
	return c.startWorkerVia(host, c.address, extra...)
}

// startWorkerVia starts a clusterrun-worker for host that reaches the server at address (a proxy, say). A worker
// with no tasks exits when the server does not answer its health check within 10 s, as it should; on a machine
// loaded by the suite's other servers that happened to a live one (make check, 2026-12-02, load average 17), so such a
// worker is started again while the minute lasts.
func (c *cluster) startWorkerVia(host, address string, extra ...string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		w, logPath, readyBefore, err := c.launchWorker(host, address, extra...)
		if err != nil {
			return err
		}
		ready := func() bool {
			b, _ := os.ReadFile(logPath)
			return bytes.Count(b, []byte("clusterrun-worker ready")) > readyBefore
		}
		for !ready() && !w.exited() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if ready() {
			return nil
		}
		b, _ := os.ReadFile(logPath)
		last := b[bytes.LastIndex(b, []byte("\n20"))+1:] // the worker's last line: why it exited
		slow := bytes.Contains(last, []byte("cannot reach the Temporal server")) && bytes.Contains(last, []byte("context deadline exceeded"))
		if !w.exited() || !slow || time.Now().After(deadline) {
			return fmt.Errorf("worker %s did not become ready:\n%s", host, b)
		}
	}
}

// launchWorker starts a clusterrun-worker for host without waiting for it to be ready: it returns the worker,
// its log and how many times that log said "ready" before.
func (c *cluster) launchWorker(host, address string, extra ...string) (w *owned, logPath string, readyBefore int, err error) {
	logPath = filepath.Join(c.workDir, "worker-"+host+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", 0, err
	}
	cmd := c.workerCommand(host, address, extra...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The log holds earlier lives of this host's worker: wait for one more "ready" than it had.
	before, _ := os.ReadFile(logPath)
	readyBefore = bytes.Count(before, []byte("clusterrun-worker ready"))
	if w, err = startOwned(cmd); err != nil {
		return nil, "", 0, err
	}
	c.mu.Lock()
	c.workers[host] = w
	c.mu.Unlock()
	return w, logPath, readyBefore, nil
}

// workerCommand is the command of a clusterrun-worker for host that reaches the server at address.
func (c *cluster) workerCommand(host, address string, extra ...string) *exec.Cmd {
	args := append([]string{"--address", address, "--host", host, "--addr", "127.0.0.1", "--log-dir", c.logDir, "--state-dir", filepath.Join(c.workDir, "state"),
		"--socket-dir", c.runtime, "--shutdown-grace", "2s", "--supervisor-idle", "500ms"}, extra...)
	if os.Getuid() == 0 && !slices.Contains(extra, "--run-as") {
		args = append(args, "--run-as", "root") // a worker running as root must say whom its tasks run as
	}
	if !slices.Contains(extra, "--ports") {
		args = append(args, "--ports", c.ports)
	}
	if c.shared != nil && !slices.Contains(c.shared, host) && !slices.Contains(extra, "--pool") {
		args = append(args, "--pool", "own-"+host)
	}
	if !slices.Contains(extra, "--slots") {
		args = append(args, "--slots", "16") // the default is the machine's cores: too few for the suite's runs on 2
	}
	cmd := exec.Command(filepath.Join(c.bin, "clusterrun-worker"), args...)
	cmd.Dir = c.root
	// Tasks inherit this environment (the clusterrun CLI under test is on their PATH), but for the worker's Temporal
	// settings and its own configuration. The server's address goes as the flag, which the whole suite so tests.
	// A host's service manager sets no PYTHONUNBUFFERED or PYTHONFAULTHANDLER, whatever this machine's shell does.
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PYTHONUNBUFFERED=") || strings.HasPrefix(kv, "PYTHONFAULTHANDLER=")
	})
	cmd.Env = append(base, "CLUSTERRUN_E2E_MARK="+c.marker,
		"PATH="+c.bin+":"+os.Getenv("PATH"), "CLUSTERRUN_WORKER_LOG_FORMAT=console")
	cmd.Env = append(cmd.Env, c.workerVars...)
	return cmd
}

// workerPID is the pid of host's worker.
func (c *cluster) workerPID(host string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.workers[host].cmd.Process.Pid
}

// stopWorker sends sig to one worker and waits for it to exit.
func (c *cluster) stopWorker(host string, sig syscall.Signal) {
	c.mu.Lock()
	w := c.workers[host]
	delete(c.workers, host)
	c.mu.Unlock()
	if w == nil {
		return
	}
	_ = w.cmd.Process.Signal(sig)
	select {
	case <-w.done:
	case <-time.After(60 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

func (c *cluster) stopWorkers() {
	c.mu.Lock()
	var hosts []string
	for h := range c.workers {
		hosts = append(hosts, h)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() { defer wg.Done(); c.stopWorker(h, syscall.SIGTERM) }()
	}
	wg.Wait()
}

// orphans lists live processes that carry this suite's marker: task processes (or workers) that outlived it.
func (c *cluster) orphans() []string {
	return markedProcesses(c.marker, "", 5*time.Second)
}

// markedProcesses waits up to grace for every process with CLUSTERRUN_E2E_MARK=marker whose command line holds
// substr to be gone, and lists those that are not.
func markedProcesses(marker, substr string, grace time.Duration) []string {
	needle := []byte("CLUSTERRUN_E2E_MARK=" + marker + "\x00")
	deadline := time.Now().Add(grace)
	for {
		var found []string
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil || !bytes.Contains(environ, needle) {
				continue
			}
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
				continue
			}
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			cmd := strings.ReplaceAll(string(cmdline), "\x00", " ")
			if !strings.Contains(cmd, substr) {
				continue
			}
			found = append(found, fmt.Sprintf("pid %d: %s", pid, cmd))
		}
		if len(found) == 0 || time.Now().After(deadline) {
			return found
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cli runs the clusterrun CLI against the test server.
type cliResult struct {
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

func cli(t *testing.T, args ...string) cliResult {
	t.Helper()
	return env.cli(t, args...)
}

func cliEnv(t *testing.T, extraEnv []string, args ...string) cliResult {
	t.Helper()
	return env.cliEnv(t, extraEnv, args...)
}

// cli runs the clusterrun CLI against this cluster's server.
func (c *cluster) cli(t *testing.T, args ...string) cliResult {
	t.Helper()
	return c.cliEnv(t, []string{"TEMPORAL_ADDRESS=" + c.address}, args...)
}

// withEnv is base with extra laid over it: NAME=VALUE sets NAME, and -NAME takes it out (a variable that is set
// wins over a temporal.toml profile even when empty, as make's TEMPORAL_ADDRESS would).
func withEnv(base, extra []string) []string {
	var unset []string
	env := slices.Clone(base)
	for _, kv := range extra {
		if name, ok := strings.CutPrefix(kv, "-"); ok {
			unset = append(unset, name+"=")
		} else {
			env = append(env, kv)
		}
	}
	return slices.DeleteFunc(env, func(kv string) bool {
		return slices.ContainsFunc(unset, func(prefix string) bool { return strings.HasPrefix(kv, prefix) })
	})
}

func (c *cluster) cliEnv(t *testing.T, extraEnv []string, args ...string) cliResult {
	t.Helper()
	return c.cliWithin(t, 3*time.Minute, extraEnv, args...)
}

// cliWithin runs the CLI as cliEnv does, giving it up to limit to end.
func (c *cluster) cliWithin(t *testing.T, limit time.Duration, extraEnv []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "clusterrun"), args...)
	cmd.Dir = c.root
	cmd.Env = withEnv(os.Environ(), extraEnv)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("clusterrun %v did not end within %s\n%s", args, limit, r)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run clusterrun %v: %v", args, err)
	}
	return r
}

// backgroundCLI is a clusterrun command started with startCLI, running while the test does other things.
type backgroundCLI struct {
	cmd       *exec.Cmd
	out, errb syncBuffer // read while the command writes
	done      chan error
}

// startCLI starts the CLI against this cluster's server and returns at once; wait collects it. The test's end
// kills it if it still runs.
func (c *cluster) startCLI(t *testing.T, args ...string) *backgroundCLI {
	t.Helper()
	return c.startInBackground(t, exec.Command(filepath.Join(c.bin, "clusterrun"), args...))
}

// startCLIOnTerminal starts the CLI as startCLI does, on a terminal of its own (a pseudo-terminal that
// script(1) opens): out holds all it drew there, stdout and stderr in one, escape sequences and all.
func (c *cluster) startCLIOnTerminal(t *testing.T, args ...string) *backgroundCLI {
	t.Helper()
	line := "exec " + filepath.Join(c.bin, "clusterrun")
	for _, a := range args {
		line += " '" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return c.startInBackground(t, exec.Command("script", "-qefc", line, "/dev/null"))
}

func (c *cluster) startInBackground(t *testing.T, cmd *exec.Cmd) *backgroundCLI {
	t.Helper()
	b := &backgroundCLI{cmd: cmd, done: make(chan error, 1)}
	b.cmd.Dir = c.root
	b.cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.address)
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.errb
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", b.cmd.Args, err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	t.Cleanup(func() { _ = b.cmd.Process.Kill() })
	return b
}

// wait waits up to limit for the command to end and returns its result.
func (b *backgroundCLI) wait(t *testing.T, limit time.Duration) cliResult {
	t.Helper()
	var err error
	select {
	case err = <-b.done:
	case <-time.After(limit):
		_ = b.cmd.Process.Kill()
		<-b.done
		t.Fatalf("clusterrun %v did not end within %s\n%s", b.cmd.Args[1:], limit, cliResult{stdout: b.out.String(), stderr: b.errb.String()})
	}
	r := cliResult{stdout: b.out.String(), stderr: b.errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run clusterrun %v: %v", b.cmd.Args[1:], err)
	}
	return r
}

// fileCLI is a clusterrun command started with startCLIToFile: its output (stdout and stderr) goes to a file,
// which the test reads while the command runs, as a user reads a piped log.
type fileCLI struct {
	path string
	cmd  *exec.Cmd
	done chan error
}

// startCLIToFile starts the CLI against this cluster's server with its output in a file, and returns at once.
// The test's end kills it if it still runs.
func (c *cluster) startCLIToFile(t *testing.T, args ...string) *fileCLI {
	t.Helper()
	f := &fileCLI{path: filepath.Join(t.TempDir(), "out"), cmd: exec.Command(filepath.Join(c.bin, "clusterrun"), args...), done: make(chan error, 1)}
	out, err := os.Create(f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	f.cmd.Dir, f.cmd.Env, f.cmd.Stdout, f.cmd.Stderr = c.root, append(os.Environ(), "TEMPORAL_ADDRESS="+c.address), out, out
	if err := f.cmd.Start(); err != nil {
		t.Fatalf("start clusterrun %v: %v", args, err)
	}
	go func() { f.done <- f.cmd.Wait() }()
	t.Cleanup(func() { _ = f.cmd.Process.Kill() })
	return f
}

// output is what the command has written so far.
func (f *fileCLI) output() string {
	b, _ := os.ReadFile(f.path)
	return string(b)
}

// waitFor waits up to 2 minutes for the output to match re, while the command runs, and shows the output if
// it does not.
func (f *fileCLI) waitFor(t *testing.T, what string, re *regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !re.MatchString(f.output()) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 2m0s waiting for %s; clusterrun %v wrote:\n%s", what, f.cmd.Args[1:], f.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wait waits up to limit for the command to end and returns its error (an *exec.ExitError for an exit code).
func (f *fileCLI) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-f.done:
		f.done <- err
		return err
	case <-time.After(limit):
		t.Fatalf("clusterrun %v did not end within %s\n%s", f.cmd.Args[1:], limit, f.output())
		return nil
	}
}

// temporalBusy is how the Temporal server answers a request to a run that could not take the run's lock in
// time (its disk slow to sync, many hosts reporting at once). The temporal CLI does not retry it; a user runs the
// command again (docs/operations.md, "Failure modes").
const temporalBusy = "Workflow is busy."

// temporalCLI runs the temporal CLI against the test server, again while the server answers temporalBusy, at most
// 10 times, 2 s apart (as the README's session does in TestE2E_ReadmeCommands). It returns the last attempt's
// combined output.
func temporalCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		out, err := exec.Command(filepath.Join(env.root, "bin", "temporal"), append(args, "--address", env.address)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), temporalBusy) || attempt == 10 {
			return string(out), err
		}
		t.Logf("temporal %v: %s; again", args, bytes.TrimSpace(out))
		time.Sleep(2 * time.Second)
	}
}

// writeSpec writes a spec into the test's temp dir and returns its path.
func writeSpec(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runID returns a fresh run ID for a test.
func runID(t *testing.T) string {
	return strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + "-" + randomHex(3)
}

// outcome fetches a finished run's status through the SDK (the result or the failure's details).
func outcome(t *testing.T, id string) (workflows.RunStatus, error) {
	t.Helper()
	return env.outcome(t, id)
}

func (c *cluster) outcome(t *testing.T, id string) (workflows.RunStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var st workflows.RunStatus
	err := c.client.GetWorkflow(ctx, id, "").Get(ctx, &st)
	if err != nil {
		st, _ = workflows.StatusFromError(err)
	}
	return st, err
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// query returns a running run's live status.
func query(t *testing.T, id string) (workflows.RunStatus, bool) { return env.query(t, id) }

func (c *cluster) query(_ *testing.T, id string) (workflows.RunStatus, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.client.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
	if err != nil {
		return workflows.RunStatus{}, false
	}
	var st workflows.RunStatus
	return st, v.Get(&st) == nil
}

func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines
}
