package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// BackendEnv picks the Temporal server every test cluster runs on: unset or "dev", the temporal CLI's dev
// server (SQLite); "postgres", the pinned Temporal server on PostgreSQL (make test-postgres), each cluster on
// databases of its own in one PostgreSQL that the suite starts and owns.
const BackendEnv = "CLUSTERRUN_TEST_BACKEND"

func onPostgres() bool { return os.Getenv(BackendEnv) == "postgres" }

// pgCluster is a PostgreSQL server the suite owns: its data in a folder of its own, listening on 127.0.0.1
// only, trusting local connections. It dies with the test binary.
type pgCluster struct {
	bin, data string
	port      int
	proc      *owned
	creds     *syscall.Credential // PostgreSQL refuses root: root runs it as Debian's postgres user
	next      atomic.Int64        // numbers each server's databases
}

// pgBinDir finds Debian's PostgreSQL server binaries (the newest major version installed).
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) < pgMajor(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("PostgreSQL's server is not installed: make test-postgres needs it (apt-get install -y postgresql, or make up BACKEND=postgres, which installs it)")
}

func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// startPostgres initialises a cluster in a new folder and starts it on a free port.
func startPostgres() (*pgCluster, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp("", "clusterrun-pg-")
	if err != nil {
		return nil, err
	}
	pg := &pgCluster{bin: bin, data: data}
	if os.Getuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL needs the postgres user (made by Debian's postgresql package): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pg.creds = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(data, uid, gid); err != nil {
			return nil, err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(data, "db"), "-U", "temporal", "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: pg.creds}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if pg.port, err = freeTCPPort(); err != nil {
		return nil, err
	}
	if err := pg.start(); err != nil {
		pg.stop()
		return nil, err
	}
	return pg, nil
}

// start starts the server (again, after a kill: PostgreSQL recovers from its log) and waits until it answers.
func (pg *pgCluster) start() error {
	// Durability is PostgreSQL's default (fsync on): the figures measured here are a real server's.
	cmd := exec.Command(filepath.Join(pg.bin, "postgres"), "-D", filepath.Join(pg.data, "db"), "-p", strconv.Itoa(pg.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "max_connections=500")
	logFile, err := os.OpenFile(filepath.Join(pg.data, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.creds, Setpgid: true}
	if pg.proc, err = startOwned(cmd); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if pg.psql("select 1") == nil {
			return nil
		}
		if pg.proc.exited() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(filepath.Join(pg.data, "postgres.log"))
	return fmt.Errorf("PostgreSQL did not come up:\n%s", b)
}

// kill SIGKILLs PostgreSQL and every one of its processes, as a crash of its machine does.
func (pg *pgCluster) kill() {
	if pg.proc != nil {
		_ = syscall.Kill(-pg.proc.cmd.Process.Pid, syscall.SIGKILL)
		<-pg.proc.done
	}
}

func (pg *pgCluster) psql(query string) error {
	out, err := exec.Command(filepath.Join(pg.bin, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(pg.port), "-U", "temporal",
		"-d", "postgres", "-tAc", query).CombinedOutput()
	if err != nil {
		return fmt.Errorf("psql: %v: %s", err, out)
	}
	return nil
}

// newDatabases creates a Temporal database and its visibility database, with their schemas set up by the
// server's own tool, and returns the first one's name.
func (pg *pgCluster) newDatabases(root string) (string, error) {
	name := fmt.Sprintf("temporal_%d", pg.next.Add(1))
	tool := filepath.Join(root, "bin", "temporal-sql-tool")
	for db, schema := range map[string]string{name: "postgresql/v12/temporal", name + "_visibility": "postgresql/v12/visibility"} {
		for _, step := range [][]string{{"create-database"}, {"setup-schema", "-v", "0.0"}, {"update-schema", "--schema-name", schema}} {
			args := append([]string{"--plugin", "postgres12", "--ep", "127.0.0.1", "-p", strconv.Itoa(pg.port), "-u", "temporal", "--db", db}, step...)
			if out, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
				return "", fmt.Errorf("temporal-sql-tool %s on %s: %v\n%s", step[0], db, err, out)
			}
		}
	}
	return name, nil
}

// stop shuts PostgreSQL down (its fast shutdown, SIGINT), so that it removes its shared memory: a killed
// postmaster leaves a System V segment and its /dev/shm segments behind, which only a later start of the same
// data folder would remove. After 30 s it is killed.
func (pg *pgCluster) stop() {
	if pg.proc != nil {
		_ = pg.proc.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-pg.proc.done:
		case <-time.After(30 * time.Second):
		}
	}
	pg.kill()
	os.RemoveAll(pg.data)
}

// postgresServer is what devServer.start runs on the postgres backend: the pinned Temporal server on a
// database of its own (made on first start, kept across a kill and a start), config/postgres.yaml from
// deployments/postgres with every port its own, and the Web UI server when uiPort is set.
type postgresServer struct {
	pg   *pgCluster
	db   string
	env  []string // the config's ports and database, fixed on first start
	ui   *owned
	made bool // the namespace and search attributes exist
}

// dynamicConfigFile is the server's dynamic config: the deployment's, or a copy in the server's folder with
// s.dynamic's values added.
func (s *devServer) dynamicConfigFile(root string) (string, error) {
	file := filepath.Join(root, "deployments", "postgres", "config", "dynamicconfig.yaml")
	if len(s.dynamic) == 0 {
		return file, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	for k, v := range s.dynamic {
		b = fmt.Appendf(b, "%s:\n  - value: %s\n", k, v)
	}
	mine := filepath.Join(s.dir, "dynamicconfig.yaml")
	return mine, os.WriteFile(mine, b, 0o644)
}

func (s *devServer) startOnPostgres(root string) error {
	p := s.postgres
	if p.db == "" {
		db, err := p.pg.newDatabases(root)
		if err != nil {
			return err
		}
		p.db = db
		dynamic, err := s.dynamicConfigFile(root)
		if err != nil {
			return err
		}
		p.env = []string{"TEMPORAL_DB=" + db, "POSTGRES_PORT=" + strconv.Itoa(p.pg.port), "TEMPORAL_PORT=" + strconv.Itoa(s.port),
			"TEMPORAL_LOG_LEVEL=error", "TEMPORAL_DYNAMIC_CONFIG=" + dynamic}
		for _, name := range []string{"HTTP", "HISTORY", "MATCHING", "WORKER"} {
			port, err := freeTCPPort()
			if err != nil {
				return err
			}
			p.env = append(p.env, fmt.Sprintf("TEMPORAL_%s_PORT=%d", name, port))
		}
		for _, name := range []string{"FRONTEND", "HISTORY", "MATCHING", "WORKER"} {
			p.env = append(p.env, fmt.Sprintf("TEMPORAL_%s_MEMBERSHIP_PORT=%d", name, lowFreePort()))
		}
	}
	cmd := exec.Command(filepath.Join(root, "bin", "temporal-server"), "--root", filepath.Join(root, "deployments", "postgres"),
		"--config", "config", "--env", "postgres", "--allow-no-auth", "start")
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), p.env...)
	if err := s.startProcess(cmd); err != nil {
		return err
	}
	if !p.made {
		if err := s.makeNamespace(root); err != nil {
			return err
		}
		p.made = true
	}
	if s.uiPort > 0 && p.ui == nil {
		ui := exec.Command(filepath.Join(root, "bin", "temporal-ui-server"), "--root", filepath.Join(root, "deployments", "postgres"),
			"--config", "config", "--env", "ui", "start")
		ui.Env = append(os.Environ(), fmt.Sprintf("TEMPORAL_PORT=%d", s.port), fmt.Sprintf("TEMPORAL_UI_PORT=%d", s.uiPort),
			"TEMPORAL_UI_CODEC_ENDPOINT="+s.uiCodec)
		ui.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var err error
		if p.ui, err = startOwned(ui); err != nil {
			return err
		}
	}
	return nil
}

// makeNamespace does what the dev server does by itself: the default namespace (waiting until the frontend
// knows it) and clusterrun's search attributes.
func (s *devServer) makeNamespace(root string) error {
	temporal := filepath.Join(root, "bin", "temporal")
	addr := "--address=" + s.address()
	if out, err := exec.Command(temporal, "operator", "namespace", "create", addr, "--namespace", "default", "--retention", "72h").CombinedOutput(); err != nil {
		return fmt.Errorf("create namespace: %v\n%s", err, out)
	}
	for _, attr := range []string{"ClusterRunName", "ClusterRunState"} {
		if out, err := exec.Command(temporal, "operator", "search-attribute", "create", addr, "--name", attr, "--type", "Keyword").CombinedOutput(); err != nil &&
			!strings.Contains(string(out), "already") {
			return fmt.Errorf("create search attribute %s: %v\n%s", attr, err, out)
		}
	}
	c, err := client.Dial(client.Options{HostPort: s.address(), Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// The query also waits for the search attributes: each service learns a new one at its namespace
		// cache's next refresh.
		_, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", PageSize: 1,
			Query: `ClusterRunName = "probe" AND ClusterRunState = "probe"`})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace default or its search attributes not usable within 60s: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// PostgreSQL SIGKILLed under a running Temporal server, for 30 s: the server answers, but with errors, and the
// work goes on as through a server outage (testServerOutage). The cluster has a PostgreSQL of its own.
func TestPostgres_DatabaseOutage(t *testing.T) {
	t.Parallel()
	if !onPostgres() {
		t.Skip("make test-postgres runs this (" + BackendEnv + "=postgres)")
	}
	pg, err := startPostgres()
	require.NoError(t, err)
	t.Cleanup(pg.stop)
	c := isolatedWith(t, func(s *devServer) { s.postgres = &postgresServer{pg: pg} })
	testServerOutage(t, c, 30*time.Second, pg.kill, pg.start, false)
}

// PostgreSQL SIGKILLed under a running server for longer than the task clients' own retry, while tasks make
// calls that need the server: they wait for it (testCallsWaitOutAnOutage).
func TestPostgres_TaskCallsWaitOutADatabaseOutage(t *testing.T) {
	t.Parallel()
	if !onPostgres() {
		t.Skip("make test-postgres runs this (" + BackendEnv + "=postgres)")
	}
	pg, err := startPostgres()
	require.NoError(t, err)
	t.Cleanup(pg.stop)
	c := isolatedWith(t, func(s *devServer) { s.postgres = &postgresServer{pg: pg} })
	testCallsWaitOutAnOutage(t, c, pg.kill, pg.start)
}

// make up BACKEND=postgres brings the whole local environment up from nothing (a new state folder: its own
// PostgreSQL cluster, the schemas, the server, the Web UI, the namespace and search attributes, the host
// workers); a run works on it and shows in clusterrun list and the Web UI's API; make down stops everything
// and keeps the data, which the next make up finds again. It makes its own PostgreSQL, but runs with the
// postgres backend's suite (make test-postgres, which builds the server first).
func TestPostgres_UpFromNothing(t *testing.T) {
	t.Parallel()
	if !onPostgres() {
		t.Skip("make test-postgres runs this (" + BackendEnv + "=postgres)")
	}
	if _, err := pgBinDir(); err != nil && os.Getuid() != 0 {
		t.Skip(err) // only root can install PostgreSQL; up.sh says so to everyone else
	}
	state, err := os.MkdirTemp("", "clusterrun-pgup-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(state, 0o755)) // PostgreSQL runs as the postgres user when we are root
	// The workers' runtime folder is the test's, not the machine's: their records and sockets go with it.
	runtime, err := newRuntimeDir()
	require.NoError(t, err)
	vars := []string{"CLUSTERRUN_STATE=" + state, "CLUSTERRUN_DEV_HOSTS=host-a host-b", "CLUSTERRUN_WORKER_SOCKET_DIR=" + runtime}
	port := lowFreePort()
	vars = append(vars, fmt.Sprintf("TEMPORAL_PORT=%d", port), fmt.Sprintf("TEMPORAL_ADDRESS=127.0.0.1:%d", port))
	for _, name := range []string{"TEMPORAL_UI_PORT", "POSTGRES_PORT", "TEMPORAL_HTTP_PORT", "TEMPORAL_HISTORY_PORT", "TEMPORAL_MATCHING_PORT", "TEMPORAL_WORKER_PORT"} {
		p, err := freeTCPPort()
		require.NoError(t, err)
		vars = append(vars, fmt.Sprintf("%s=%d", name, p))
	}
	for _, name := range []string{"FRONTEND", "HISTORY", "MATCHING", "WORKER"} {
		vars = append(vars, fmt.Sprintf("TEMPORAL_%s_MEMBERSHIP_PORT=%d", name, lowFreePort()))
	}
	shellEnv := append(os.Environ(), vars...)
	sh := func(what string, wantCode int, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Env = env.root, shellEnv
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err, what)
		}
		require.Equal(t, wantCode, code, "%s:\n%s", what, out)
		return string(out)
	}
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(env.root, "deployments", "dev", "down.sh"))
		cmd.Dir, cmd.Env = env.root, shellEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("down.sh: %v\n%s", err, out)
		}
		os.RemoveAll(runtime)
		if !t.Failed() {
			os.RemoveAll(state)
		} else {
			t.Logf("the environment's state is kept in %s", state)
		}
	})

	up := sh("make up BACKEND=postgres", 0, "make", "--no-print-directory", "up", "BACKEND=postgres")
	assert.Contains(t, up, "creating a PostgreSQL cluster")
	assert.Contains(t, up, "creating database temporal_visibility and its schema")
	assert.Contains(t, up, "ready. Temporal (PostgreSQL)")
	// up.sh returns once the host registry lists every worker: the first run's placement sees them all.
	assert.Regexp(t, `(?s)host-a +ready.*host-b +ready`, sh("clusterrun hosts right after make up", 0, "bin/clusterrun", "hosts"))
	other := sh("make up on the dev backend while postgres runs", 1, "./deployments/dev/up.sh")
	assert.Contains(t, other, "the postgres backend is running")

	run := sh("the demo", 0, "bin/clusterrun", "run", "examples/demo.yaml", "--id", "pg-demo")
	assert.Contains(t, run, "run pg-demo Succeeded: chief-0 exited 0")
	assert.Regexp(t, `pg-demo +demo +Succeeded`, sh("clusterrun list", 0, "bin/clusterrun", "list"))
	assert.Contains(t, sh("a query on the search attributes", 0, "bin/temporal", "workflow", "list", "--query", "ClusterRunName = 'demo' AND ClusterRunState = 'Succeeded'"),
		"pg-demo", "clusterrun's search attributes are set and queried on SQL visibility")
	var uiPort string
	for _, v := range vars {
		if p, ok := strings.CutPrefix(v, "TEMPORAL_UI_PORT="); ok {
			uiPort = p
		}
	}
	resp, err := http.Get("http://127.0.0.1:" + uiPort + "/api/v1/namespaces/default/workflows/pg-demo")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, "the Web UI's API reaches the server: %s", body)
	assert.Contains(t, string(body), "ClusterRun")

	down := sh("make down", 0, "make", "--no-print-directory", "down")
	assert.Contains(t, down, "down: stopped PostgreSQL")
	again := sh("make up again", 0, "make", "--no-print-directory", "up", "BACKEND=postgres")
	assert.NotContains(t, again, "creating", "the cluster and its databases are kept")
	assert.Contains(t, sh("clusterrun status", 0, "bin/clusterrun", "status", "pg-demo"), "Succeeded", "the run outlived make down")

	// PostgreSQL SIGKILLed under the running server, for long enough that the server's pool has lost every
	// connection: make up starts it again, and a run works. (make up once failed here, taking the server's
	// first "no usable database connection" for a missing namespace.)
	b, err := os.ReadFile(filepath.Join(state, "postgres", "postmaster.pid"))
	require.NoError(t, err)
	first, _, _ := strings.Cut(string(b), "\n")
	pgPid, err := strconv.Atoi(strings.TrimSpace(first))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pgPid, syscall.SIGKILL))
	waitUntil(t, "PostgreSQL to die", 30*time.Second, func() bool { return !alive(pgPid) })
	outage := sh("clusterrun list while PostgreSQL is down", 1, "bin/clusterrun", "list")
	assert.Contains(t, outage, "is up but did not answer in time: its database may be down")
	back := sh("make up after PostgreSQL died", 0, "make", "--no-print-directory", "up", "BACKEND=postgres")
	assert.Contains(t, back, "up: started PostgreSQL")
	assert.Contains(t, sh("a run after that", 0, "bin/clusterrun", "run", "examples/demo.yaml", "--id", "pg-demo-2"), "run pg-demo-2 Succeeded")
}
