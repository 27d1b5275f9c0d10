package tests

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/workflows"
)

// devServer is a Temporal server that the tests own outright: the pinned temporal CLI's dev server or, on the
// postgres backend (BackendEnv), the pinned Temporal server on PostgreSQL. It can be SIGKILLed and started
// again on the same database, as an outage does, without touching any other test. (The SDK's
// testsuite.DevServer stops with SIGINT and cannot be started again on its database.) It dies with the test
// binary, even one that panics.
type devServer struct {
	bin, dir string
	port     int
	httpPort int // the dev server's HTTP API and metrics ports: fixed, low (see lowFreePort), kept across restarts
	metrics  int
	uiPort   int    // 0: no Web UI
	uiCodec  string // the Web UI's codec server, if any
	proc     *owned
	postgres *postgresServer   // non-nil: the server runs on PostgreSQL
	dynamic  map[string]string // dynamic config values over the deployment's, as key: value
}

// owned is a process the test binary started: Pdeathsig ends it when the test binary dies, even by a panic that
// skips every cleanup. The kernel fires Pdeathsig when the forking *thread* exits, so the process is started
// and waited for on a goroutine locked to its thread.
type owned struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startOwned(cmd *exec.Cmd) (*owned, error) {
	o := &owned{cmd: cmd, done: make(chan struct{})}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, after the process
		if err := cmd.Start(); err != nil {
			started <- err
			close(o.done)
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(o.done)
	}()
	return o, <-started
}

func (o *owned) exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

func (s *devServer) address() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// start starts the server (again) and waits until it answers.
func (s *devServer) start() error {
	if s.postgres != nil {
		return s.startOnPostgres(filepath.Dir(filepath.Dir(s.bin)))
	}
	ui := []string{"--headless"}
	if s.uiPort > 0 {
		ui = []string{"--ui-port", fmt.Sprint(s.uiPort)}
	}
	if s.uiCodec != "" {
		ui = append(ui, "--ui-codec-endpoint", s.uiCodec)
	}
	// As make up does: clusterrun list shows each run's own state from these search attributes.
	if s.httpPort == 0 {
		s.httpPort, s.metrics = lowFreePort(), lowFreePort()
	}
	// As make up does: the dev server's shared flags (its database's journal) come from start-server.sh.
	script := filepath.Join(filepath.Dir(filepath.Dir(s.bin)), "deployments", "dev", "start-server.sh")
	args := append([]string{"--ip", "127.0.0.1", "--port", fmt.Sprint(s.port),
		"--http-port", fmt.Sprint(s.httpPort), "--metrics-port", fmt.Sprint(s.metrics), "--db-filename", filepath.Join(s.dir, "temporal.db"), "--log-level", "error",
		"--search-attribute", workflows.SearchAttrName + "=Keyword", "--search-attribute", workflows.SearchAttrState + "=Keyword"}, ui...)
	for k, v := range s.dynamic {
		args = append(args, "--dynamic-config-value", k+"="+v)
	}
	return s.startProcess(exec.Command(script, args...))
}

// startProcess starts the server's process, logging to temporal.log in its folder, and waits until it answers.
// The dev server still picks its history, matching and worker services' ports itself (bind to ":0", then
// release); should another process take one first, the server exits with "address already in use", and it is
// started once more.
func (s *devServer) startProcess(cmd *exec.Cmd) error {
	err := s.startOnce(cmd)
	if err != nil && strings.Contains(err.Error(), "address already in use") {
		again := exec.Command(cmd.Path, cmd.Args[1:]...)
		again.Dir, again.Env = cmd.Dir, cmd.Env
		err = s.startOnce(again)
	}
	return err
}

func (s *devServer) startOnce(cmd *exec.Cmd) error {
	logFile, err := os.OpenFile(filepath.Join(s.dir, "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p, err := startOwned(cmd)
	logFile.Close()
	if err != nil {
		return err
	}
	s.proc = p
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		c, err := client.Dial(client.Options{HostPort: s.address(), Logger: quietLogger()})
		if err == nil {
			_, err = c.CheckHealth(context.Background(), &client.CheckHealthRequest{})
			c.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-s.proc.done:
			b, _ := os.ReadFile(filepath.Join(s.dir, "temporal.log"))
			return fmt.Errorf("the Temporal server exited:\n%s", b)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the Temporal server on %s did not answer within 90s", s.address())
}

// kill SIGKILLs the server, as a crash does.
func (s *devServer) kill() {
	if s.proc == nil {
		return
	}
	_ = syscall.Kill(-s.proc.cmd.Process.Pid, syscall.SIGKILL)
	<-s.proc.done
}

// close kills the server and its Web UI for good.
func (s *devServer) close() {
	s.kill()
	if s.postgres != nil && s.postgres.ui != nil {
		_ = syscall.Kill(-s.postgres.ui.cmd.Process.Pid, syscall.SIGKILL)
		<-s.postgres.ui.done
	}
}

// newServer is a server for a cluster with its files in dir, on the suite's backend.
func newServer(root, dir string, port int) *devServer {
	s := &devServer{bin: filepath.Join(root, "bin", "temporal"), dir: dir, port: port}
	if suitePostgres != nil {
		s.postgres = &postgresServer{pg: suitePostgres}
	}
	return s
}

// isolated starts a cluster of its own for one test: its own dev server (database in the test's folder), the
// suite's binaries, and host workers for hosts. Its cleanup stops everything it started and fails the test if
// a process outlived it.
func isolated(t *testing.T, hosts ...string) *cluster {
	t.Helper()
	return isolatedWith(t, nil, hosts...)
}

// isolatedWith is isolated with the server configured first (its Web UI port, its codec server).
func isolatedWith(t *testing.T, configure func(*devServer), hosts ...string) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "clusterrun-iso-")
	if err != nil {
		t.Fatal(err)
	}
	port, err := freeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{root: env.root, bin: env.bin, logDir: filepath.Join(dir, "logs"), workDir: dir, marker: randomHex(8), ports: nextPortBlock(),
		workers: map[string]*owned{}, dev: newServer(env.root, dir, port)}
	if c.runtime, err = newRuntimeDir(); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	if configure != nil {
		configure(c.dev)
	}
	if err := c.dev.start(); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	c.address = c.dev.address()
	c.client, err = client.Dial(client.Options{HostPort: c.address, Logger: quietLogger()})
	if err != nil {
		c.dev.close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if hdir := os.Getenv(RecordHistoriesEnv); hdir != "" {
			if err := c.recordHistories(hdir); err != nil {
				t.Errorf("record histories: %v", err)
			}
		}
		c.stopWorkers()
		if left := markedProcesses(c.marker, "", 3*time.Second); len(left) > 0 {
			t.Errorf("processes outlived the test: %s", strings.Join(left, "; "))
			killMarked(c.marker)
		}
		c.client.Close()
		c.dev.close()
		os.RemoveAll(c.runtime)
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("logs of this cluster kept in %s", dir)
		}
	})
	for _, h := range hosts {
		if err := c.startWorker(h); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// killMarked SIGKILLs every live process that carries marker.
func killMarked(marker string) {
	for _, p := range markedProcesses(marker, "", 0) {
		var pid int
		if _, err := fmt.Sscanf(p, "pid %d:", &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// proxy is a TCP proxy between one host worker and the server: cutting it cuts that host off, and only it.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	// hold, while set, holds the server's answers back (in order, none lost) from the first request that
	// carries it until release: a call the server answered whose answer the client waits for in vain.
	hold     []byte
	holding  bool
	released *sync.Cond
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	return newProxyOn(t, listenLocal(t), target)
}

// newProxyOn is newProxy taking its connections from ln: a TLS listener, say, so that the proxy ends TLS.
func newProxyOn(t *testing.T, ln net.Listener, target string) *proxy {
	t.Helper()
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.released = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.release(); p.setCut(true) })
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// listenLocal listens on a free port of 127.0.0.1.
func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			in.Close()
			continue
		}
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		go p.pipe(out, in, p.requests)
		go p.pipe(in, out, p.answers)
	}
}

// pipe copies src to dst, each chunk seen by through first.
func (p *proxy) pipe(dst, src net.Conn, through func([]byte)) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			through(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// requests sees what the client sends: the first request that carries hold starts holding the answers.
func (p *proxy) requests(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil && bytes.Contains(b, p.hold) {
		p.hold, p.holding = nil, true
	}
}

// answers sees what the server sends, and waits while answers are held.
func (p *proxy) answers([]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.holding {
		p.released.Wait()
	}
}

// holdAnswersFrom holds the server's answers from the first request that carries marker until release.
func (p *proxy) holdAnswersFrom(marker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = []byte(marker)
}

// release lets the answers held back through.
func (p *proxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = false
	p.released.Broadcast()
}

// setCut cuts the host off (every connection closed, new ones refused) or lets it through again.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}
