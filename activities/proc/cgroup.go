package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cgroup is one cgroup v2 directory that holds a task's processes. A process that leaves its process group
// (setsid, double fork) stays in its cgroup, so killing the cgroup finds everything the task started; this is
// what Slurm's proctrack/cgroup does. No resource controller is needed: the cgroup is used for tracking only.
type Cgroup struct {
	// Path is the cgroup's directory, e.g. /sys/fs/cgroup/clusterrun/host-a.1f2e3d4c5b6a.
	Path string
}

// ErrNoCgroup says cgroup v2 is not available (not mounted, or not writable by this user).
var ErrNoCgroup = errors.New("cgroup v2 is not available")

// CgroupParent finds where this process may create task cgroups: a "clusterrun" folder inside its own cgroup
// v2. It creates that folder and returns its path, or an error wrapping ErrNoCgroup.
func CgroupParent() (string, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	own, err := ownCgroup()
	if err != nil {
		return "", err
	}
	parent := filepath.Join(mount, own, "clusterrun")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("%w: create %s: %v", ErrNoCgroup, parent, err)
	}
	// A cgroup must be writable, not merely present: probe with a child.
	probe := filepath.Join(parent, fmt.Sprintf("probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("%w: create %s: %v", ErrNoCgroup, probe, err)
	}
	_ = os.Remove(probe)
	return parent, nil
}

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on
// a hybrid system).
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ... mountpoint ... - fstype source options
		fields := strings.Fields(s.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	return "", fmt.Errorf("%w: no cgroup2 mount in /proc/self/mountinfo", ErrNoCgroup)
}

// ownCgroup returns this process's cgroup v2 path ("0::/path" in /proc/self/cgroup).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest, nil
		}
	}
	return "", fmt.Errorf("%w: this process has no cgroup v2 path", ErrNoCgroup)
}

// NewCgroup creates the cgroup parent/name.
func NewCgroup(parent, name string) (*Cgroup, error) {
	path := filepath.Join(parent, name)
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup %s: %w", path, err)
	}
	return &Cgroup{Path: path}, nil
}

// Procs lists the processes in the cgroup.
func (c *Cgroup) Procs() []int {
	b, err := os.ReadFile(filepath.Join(c.Path, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Populated reports whether any live process is left in the cgroup.
func (c *Cgroup) Populated() bool {
	b, err := os.ReadFile(filepath.Join(c.Path, "cgroup.events"))
	if err != nil {
		return len(c.Procs()) > 0
	}
	return strings.Contains(string(b), "populated 1")
}

// Signal sends sig to every process in the cgroup.
func (c *Cgroup) Signal(sig syscall.Signal) {
	for _, pid := range c.Procs() {
		_ = syscall.Kill(pid, sig)
	}
}

// Kill kills every process in the cgroup, including any that escaped their process group: through cgroup.kill
// where the kernel has it (5.14+), else one SIGKILL per process.
func (c *Cgroup) Kill() {
	if err := os.WriteFile(filepath.Join(c.Path, "cgroup.kill"), []byte("1"), 0); err != nil {
		c.Signal(syscall.SIGKILL)
	}
}

// Remove deletes the cgroup once it is empty, waiting up to max for its last processes to be reaped.
func (c *Cgroup) Remove(max time.Duration) error {
	deadline := time.Now().Add(max)
	for {
		err := syscall.Rmdir(c.Path) // not os.Remove, which tries unlink first
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", c.Path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
