//go:build linux

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/clusterrun/clusterrun/activities"
	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/internal/flagerr"
	"github.com/clusterrun/clusterrun/internal/version"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// config is the worker's settings: its flags, each defaulting to an environment variable (usage).
type config struct {
	host, addr, logDir  string
	socketDir, stateDir string
	shim, cgroup        string
	supervisorIdle      time.Duration
	taskEnv             activities.EnvPolicy
	policy              activities.HostPolicy
	runAs               string
	codecKeyFile        string
	pools               []string
	slots               int
	ports               *workflows.PortRange
	logCap              int64
	logRetention        time.Duration
	shutdownGrace       time.Duration
	stopTasksOnExit     bool
	heartbeatThrottle   time.Duration
	metricsAddr         string
	logFormat, logLevel string
	connection          conn.Connection // the temporal CLI's connection flags; the API key comes only from the environment
}

const usage = `clusterrun-worker runs the processes of clusterrun tasks on this machine.

Usage: clusterrun-worker [flags]

Every flag can also be set by an environment variable (shown in brackets); a flag wins.
The Temporal connection comes from the temporal CLI's flags (--address, --namespace, --tls-*, --profile,
--config-file), variables (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*) and config
file, as for the temporal CLI (default localhost:7233, namespace default). The API key has no flag here: a
flag can be read by every process on the host, tasks included. --addr is this host's address for its tasks'
peers, not the server's.

Each run's tasks here run under a supervisor of their own (clusterrun-shim, found beside this program or on
PATH), so stopping, restarting or upgrading the worker leaves the tasks running; the next worker with the same --host takes them
up again. --stop-tasks-on-exit stops them instead.

Example:
  clusterrun-worker --host gpu-a --addr 10.0.0.5 --pool gpus --slots 8 --log-dir /var/log/clusterrun

Flags:
`

func parseFlags(args []string) (config, error) {
	hostname, _ := os.Hostname()
	home, _ := os.UserHomeDir()
	fs := flag.NewFlagSet("clusterrun-worker", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); flagerr.PrintDefaults(fs) }
	var c config
	var pools string
	fs.StringVar(&c.host, "host", env("CLUSTERRUN_WORKER_HOST", hostname), "host name that tasks pin to with hosts: [CLUSTERRUN_WORKER_HOST]")
	fs.StringVar(&c.addr, "addr", env("CLUSTERRUN_WORKER_ADDR", ""), "address other tasks dial to reach tasks here (default: this machine's first non-loopback IPv4) [CLUSTERRUN_WORKER_ADDR]")
	fs.StringVar(&pools, "pool", env("CLUSTERRUN_WORKER_POOL", "default"), "comma-separated pools whose unpinned tasks this host takes [CLUSTERRUN_WORKER_POOL]")
	slotsDefault, slotsEnvErr := envInt("CLUSTERRUN_WORKER_SLOTS", defaultSlots())
	fs.IntVar(&c.slots, "slots", slotsDefault, "most unpinned tasks run here at once (pinned tasks always run); default: the host's GPUs (/dev/nvidiaN), else its CPU cores [CLUSTERRUN_WORKER_SLOTS]")
	ports := fs.String("ports", env("CLUSTERRUN_WORKER_PORTS", defaultPorts), "the range FROM-TO of this host's tasks' ports: runs may choose them here in advance, so that a launch needs no round trip to learn them (a chosen port found taken is replaced, at the cost of that round trip), and this host picks the others' here; keep it below the kernel's ephemeral ports; off: the kernel picks each port [CLUSTERRUN_WORKER_PORTS]")
	fs.StringVar(&c.logDir, "log-dir", env("CLUSTERRUN_WORKER_LOG_DIR", filepath.Join(home, ".clusterrun", "logs")), "root of the per-run task log folders [CLUSTERRUN_WORKER_LOG_DIR]")
	logCap := fs.String("log-cap", env("CLUSTERRUN_WORKER_LOG_CAP", "1GiB"), "keep at most this much of each task's stdout and of its stderr, per attempt: past it the oldest output is dropped and readers are told how much (a spec's logCap may ask for less, not more; 0: no cap) [CLUSTERRUN_WORKER_LOG_CAP]")
	logRetention := fs.String("log-retention", env("CLUSTERRUN_WORKER_LOG_RETENTION", "0"), "delete the log folder of a run that has ended once nothing in it was written for this long, e.g. 30d (a run that runs keeps its logs; 0: keep every run's logs) [CLUSTERRUN_WORKER_LOG_RETENTION]")
	fs.StringVar(&c.stateDir, "state-dir", env("CLUSTERRUN_WORKER_STATE_DIR", filepath.Join(home, ".clusterrun", "state")), "records of the tasks this host supervises (a restarted worker takes them up from here); keep it on a disk that outlives the worker [CLUSTERRUN_WORKER_STATE_DIR]")
	fs.StringVar(&c.socketDir, "socket-dir", env("CLUSTERRUN_WORKER_SOCKET_DIR", ""), "folder for the tasks' sockets and cluster files (default: a runtime folder on tmpfs, the first of $XDG_RUNTIME_DIR/clusterrun, /run/clusterrun-<uid>, /dev/shm/clusterrun-<uid>; else <tmp>/clusterrun-<uid>) [CLUSTERRUN_WORKER_SOCKET_DIR]")
	fs.StringVar(&c.shim, "shim", env("CLUSTERRUN_WORKER_SHIM", ""), "the task supervisor program (default: clusterrun-shim beside this program, else on PATH) [CLUSTERRUN_WORKER_SHIM]")
	idleDefault, idleEnvErr := envDuration("CLUSTERRUN_WORKER_SUPERVISOR_IDLE", shim.DefaultIdleAfter)
	fs.DurationVar(&c.supervisorIdle, "supervisor-idle", idleDefault, "how long a run's task supervisor (clusterrun-shim) lives on once it has no task left here and no new one is starting [CLUSTERRUN_WORKER_SUPERVISOR_IDLE]")
	c.taskEnv.Withhold = envList("CLUSTERRUN_WORKER_TASK_ENV_WITHHOLD")
	c.taskEnv.Pass = envList("CLUSTERRUN_WORKER_TASK_ENV_PASS")
	fs.Var((*listFlag)(&c.taskEnv.Withhold), "task-env-withhold", "keep this variable of the worker's environment from tasks (a name or glob, repeatable; TEMPORAL_* and CLUSTERRUN_WORKER_* always are) [CLUSTERRUN_WORKER_TASK_ENV_WITHHOLD, comma-separated]")
	fs.Var((*listFlag)(&c.taskEnv.Pass), "task-env-pass", "let tasks inherit this variable even where a withheld pattern matches it, e.g. TEMPORAL_ADDRESS (a name or glob, repeatable) [CLUSTERRUN_WORKER_TASK_ENV_PASS, comma-separated]")
	c.policy.Commands = envList("CLUSTERRUN_WORKER_ALLOW_COMMAND")
	c.policy.Dirs = envList("CLUSTERRUN_WORKER_ALLOW_DIR")
	fs.Var((*listFlag)(&c.policy.Commands), "allow-command", "run only programs whose absolute path (found on the task's PATH, or where its symlinks lead) matches this glob, e.g. /usr/bin/python3* or /opt/train/bin/** (repeatable; default: any program) [CLUSTERRUN_WORKER_ALLOW_COMMAND, comma-separated]")
	fs.Var((*listFlag)(&c.policy.Dirs), "allow-dir", "run tasks only in this working directory or beneath it (repeatable; default: any) [CLUSTERRUN_WORKER_ALLOW_DIR, comma-separated]")
	fs.StringVar(&c.runAs, "run-as", env("CLUSTERRUN_WORKER_RUN_AS", ""), "the user tasks run as (default: the worker's user; a worker running as root needs it, and runs tasks as root only with --run-as root) [CLUSTERRUN_WORKER_RUN_AS]")
	fs.StringVar(&c.codecKeyFile, "codec-key-file", env("CLUSTERRUN_CODEC_KEY_FILE", ""), "encrypt and decrypt payloads with the keys in this file (AES-256-GCM; every worker and CLI of the namespace needs the same keys) [CLUSTERRUN_CODEC_KEY_FILE]")
	fs.StringVar(&c.cgroup, "cgroup", env("CLUSTERRUN_WORKER_CGROUP", "auto"), "auto: put each task in its own cgroup v2 where one can be made, so its escaped descendants are found; off: process groups only [CLUSTERRUN_WORKER_CGROUP]")
	stopDefault, stopEnvErr := envBool("CLUSTERRUN_WORKER_STOP_TASKS_ON_EXIT")
	fs.BoolVar(&c.stopTasksOnExit, "stop-tasks-on-exit", stopDefault, "on SIGTERM or SIGINT, stop this host's tasks (they end failed, so their restart policy applies) instead of leaving them running for the next worker [CLUSTERRUN_WORKER_STOP_TASKS_ON_EXIT]")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", 15*time.Second, "with --stop-tasks-on-exit: time between SIGTERM and SIGKILL for this host's tasks")
	fs.DurationVar(&c.heartbeatThrottle, "heartbeat-throttle", 0, "most time a task's heartbeat (pid, progress, last line) waits before it is sent (default: the SDK's, 0.8 × the run's heartbeatTimeout); the SDK also gives each heartbeat RPC this long (at least 1s)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", env("CLUSTERRUN_WORKER_METRICS_ADDR", ""), "serve Prometheus metrics at http://ADDR/metrics, e.g. :9464 (default: off) [CLUSTERRUN_WORKER_METRICS_ADDR]")
	fs.StringVar(&c.logFormat, "log-format", env("CLUSTERRUN_WORKER_LOG_FORMAT", "console"), "console or json [CLUSTERRUN_WORKER_LOG_FORMAT]")
	fs.StringVar(&c.logLevel, "log-level", env("CLUSTERRUN_WORKER_LOG_LEVEL", "info"), "debug, info, warn or error [CLUSTERRUN_WORKER_LOG_LEVEL]")
	conn.AddFlags(fs, &c.connection)
	fs.Func("api-key", "not taken here: a flag can be read by every process on this host, tasks included; set TEMPORAL_API_KEY or the config file's profile", func(string) error {
		return errors.New("not taken by the worker, whose command line every process on this host can read: set TEMPORAL_API_KEY, or api_key in the config file's profile")
	})
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.SetOutput(io.Discard) // a problem is said in one line, below
	err := fs.Parse(args)
	fs.SetOutput(os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return c, err
	}
	if err != nil {
		return c, errors.New(flagerr.Problem(fs, err, " (see clusterrun-worker --help)"))
	}
	if *showVersion {
		fmt.Println(version.String("clusterrun-worker"))
		return c, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (clusterrun-worker takes only flags; see --help)", fs.Arg(0))
	}
	if c.host == "" {
		return c, errors.New("--host is empty and the machine has no hostname: pass --host NAME")
	}
	if err := spec.CheckHostName(c.host); err != nil {
		return c, fmt.Errorf("--host: %v, so no spec could pin a task to it: pass --host NAME", err)
	}
	for _, p := range strings.Split(pools, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if err := spec.CheckPoolName(p); err != nil {
			return c, fmt.Errorf("--pool: %v, so no spec could name it", err)
		}
		c.pools = append(c.pools, p)
	}
	for _, err := range []error{slotsEnvErr, idleEnvErr, stopEnvErr, unknownVariable(fs)} {
		if err != nil {
			return c, err // a variable the operator set is not silently taken for its default
		}
	}
	if c.supervisorIdle <= 0 {
		return c, fmt.Errorf("--supervisor-idle %s: must be positive, e.g. 15s", c.supervisorIdle)
	}
	if err := activities.CheckEnvPatterns("--task-env-withhold", c.taskEnv.Withhold); err != nil {
		return c, err
	}
	if err := activities.CheckEnvPatterns("--task-env-pass", c.taskEnv.Pass); err != nil {
		return c, err
	}
	if err := activities.CheckPolicy(c.policy); err != nil {
		return c, err
	}
	if c.logCap, err = spec.ParseSize(*logCap); err != nil {
		return c, fmt.Errorf("--log-cap: %v", err)
	}
	if c.logRetention, err = spec.ParseDays(*logRetention); err != nil {
		return c, fmt.Errorf("--log-retention: %w", err)
	}
	if c.logCap != 0 && c.logCap < spec.MinLogCap {
		return c, fmt.Errorf("--log-cap %s: at least %s, or 0 for no cap", *logCap, spec.FormatSize(spec.MinLogCap))
	}
	if c.slots < 1 {
		return c, fmt.Errorf("--slots %d: must be at least 1", c.slots)
	}
	if c.ports, err = parsePorts(*ports); err != nil {
		return c, err
	}
	c.cgroup, c.logFormat, c.logLevel = strings.ToLower(c.cgroup), strings.ToLower(c.logFormat), strings.ToLower(c.logLevel)
	if c.cgroup != "auto" && c.cgroup != "off" {
		return c, fmt.Errorf("--cgroup %q: use auto or off", c.cgroup)
	}
	// Who tasks run as is a decision, not a typo: it is asked for once every value given reads.
	if c.policy.User, err = taskUser(c.runAs); err != nil {
		return c, err
	}
	if c.addr == "" {
		c.addr = defaultAddr()
	} else if err := checkAddr(c.addr); err != nil {
		return c, err
	}
	shimPath, err := findShim(c.shim)
	if err != nil {
		return c, err
	}
	c.shim = shimPath
	return c, nil
}

// checkAddr says why --addr cannot be what other tasks dial (TF_CONFIG and MASTER_ADDR join it to a port).
func checkAddr(addr string) error {
	ip := net.ParseIP(addr)
	switch {
	case ip != nil && ip.To4() == nil:
		return fmt.Errorf("--addr %q: an IPv6 address cannot be joined to a port in TF_CONFIG; give a host name that resolves to it", addr)
	case ip == nil && spec.CheckHostName(addr) != nil:
		return fmt.Errorf("--addr %q: give the IPv4 address or host name other tasks dial to reach this host, without a port", addr)
	}
	return nil
}

// defaultPorts lies below Linux's default range of ephemeral ports (32768-60999), which outgoing connections
// take from.
const defaultPorts = "20000-29999"

// parsePorts reads --ports: FROM-TO, or off.
func parsePorts(s string) (*workflows.PortRange, error) {
	if strings.EqualFold(strings.TrimSpace(s), "off") {
		return nil, nil
	}
	from, to, ok := strings.Cut(s, "-")
	a, errA := strconv.Atoi(strings.TrimSpace(from))
	b, errB := strconv.Atoi(strings.TrimSpace(to))
	switch {
	case !ok || errA != nil || errB != nil:
		return nil, fmt.Errorf("--ports %q: give a range FROM-TO, e.g. %s, or off", s, defaultPorts)
	case a < 1024 || b > 65535 || a > b:
		return nil, fmt.Errorf("--ports %q: the range must lie within 1024-65535 and FROM must not exceed TO, e.g. %s", s, defaultPorts)
	}
	return &workflows.PortRange{From: a, To: b}, nil
}

// ephemeralPorts is where Linux says it takes outgoing connections' local ports from.
const ephemeralPorts = "/proc/sys/net/ipv4/ip_local_port_range"

// ephemeralOverlap says, when --ports r shares ports with the kernel's ephemeral ones (the text of
// ephemeralPorts, "32768\t60999"), how to fix it; "" when they do not, or the text is not such a range.
func ephemeralOverlap(r *workflows.PortRange, text string) string {
	f := strings.Fields(text)
	if r == nil || len(f) != 2 {
		return ""
	}
	lo, errLo := strconv.Atoi(f[0])
	hi, errHi := strconv.Atoi(f[1])
	if errLo != nil || errHi != nil || r.To < lo || r.From > hi {
		return ""
	}
	return fmt.Sprintf("--ports %s overlaps the kernel's ephemeral ports %d-%d (%s), which outgoing connections take: "+
		"one may hold a task's port when the task binds it; give a range below %d, such as %s", portsText(r), lo, hi, ephemeralPorts, lo, defaultPorts)
}

func portsText(r *workflows.PortRange) string {
	if r == nil {
		return "off"
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envInt(key string, def int) (int, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return def, fmt.Errorf("%s=%q: not a whole number; use e.g. 8", key, v)
	}
	return n, nil
}

func envDuration(key string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return def, fmt.Errorf("%s=%q: not a duration; use e.g. 15s or 1m", key, v)
	}
	return d, nil
}

// listFlag is a repeatable flag; its default (from the environment) is kept and added to.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// envList reads a comma-separated list from the environment.
func envList(key string) []string {
	var out []string
	for _, v := range strings.Split(os.Getenv(key), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func envBool(key string) (bool, error) {
	v := os.Getenv(key)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("%s=%q: use true or false", key, v)
	}
	return b, nil
}

// defaultAddr is the first non-loopback IPv4 address of this machine, or 127.0.0.1.
func defaultAddr() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return ipn.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// workerPrefix begins the name of each of the worker's variables.
const workerPrefix = "CLUSTERRUN_WORKER_"

// variableInUsage finds the variable a flag's usage names ("[CLUSTERRUN_WORKER_SLOTS]").
var variableInUsage = regexp.MustCompile(`\[(CLUSTERRUN_[A-Z_]+)`)

// unknownVariable refuses a CLUSTERRUN_WORKER_* variable, set in the environment, that no flag of fs reads: a
// misspelt setting in the worker's environment file (CLUSTERRUN_WORKER_SLOT=8) was taken for the default in
// silence, where the same flag misspelt stops the worker.
func unknownVariable(fs *flag.FlagSet) error {
	var known, suffixes []string // the names, and what follows workerPrefix in them
	fs.VisitAll(func(f *flag.Flag) {
		if m := variableInUsage.FindStringSubmatch(f.Usage); m != nil {
			known = append(known, m[1])
			suffixes = append(suffixes, strings.TrimPrefix(m[1], workerPrefix))
		}
	})
	environ := os.Environ()
	slices.Sort(environ)
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, workerPrefix) || value == "" || slices.Contains(known, name) {
			continue
		}
		hint := ""
		if near := flagerr.Nearest(strings.TrimPrefix(name, workerPrefix), suffixes); near != "" {
			hint = fmt.Sprintf(" (did you mean %s%s?)", workerPrefix, near)
		}
		return fmt.Errorf("%s=%q: not a setting of clusterrun-worker%s; unset it (--help names each flag's variable)", name, value, hint)
	}
	return nil
}
