package shim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/clusterrun/clusterrun/activities/proc"
)

// BenchmarkLaunch starts and waits for one trivial task per iteration under one run's supervisor (started once,
// as for a run): the supervisor's cost per task launch, to set against BenchmarkDirectStart.
func BenchmarkLaunch(b *testing.B) { benchLaunch(b, "") }

// BenchmarkLaunchCgroup is BenchmarkLaunch with a cgroup per task.
func BenchmarkLaunchCgroup(b *testing.B) {
	parent, err := proc.CgroupParent()
	if err != nil {
		b.Skip(err)
	}
	benchLaunch(b, parent)
}

// BenchmarkSupervisorStart starts a run's supervisor per iteration: what the first task of a run on a host
// pays, while it waits for its rendezvous.
func BenchmarkSupervisorStart(b *testing.B) {
	sup := benchSupervisor(b)
	for i := 0; i < b.N; i++ {
		sup.Socket = filepath.Join(filepath.Dir(sup.Socket), fmt.Sprintf("s%d.sock", i))
		sup.IdleAfter = time.Millisecond
		p, err := sup.Prepare()
		if err != nil {
			b.Fatal(err)
		}
		p.Abort()
	}
}

// BenchmarkSupervisorAdopt is BenchmarkSupervisorStart with a spare ready (Spares): what the first task of a
// run on a host pays when its worker started a supervisor ahead of need.
func BenchmarkSupervisorAdopt(b *testing.B) {
	sup := benchSupervisor(b)
	spares := &Spares{Command: sup.Command, Env: sup.Env, LogDir: filepath.Dir(sup.Log), RefillAfter: time.Millisecond}
	defer spares.Close()
	sup.Spares = spares
	spares.Fill()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for !spares.isReady() {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // a spare waits long before it is needed: let it get to its wait
		sup.Socket = filepath.Join(filepath.Dir(sup.Socket), fmt.Sprintf("s%d.sock", i))
		sup.IdleAfter = time.Millisecond
		b.StartTimer()
		p, err := sup.Prepare()
		if err != nil {
			b.Fatal(err)
		}
		p.Abort()
	}
}

func benchSupervisor(b *testing.B) Supervisor {
	sockDir, _ := os.MkdirTemp("", "shimb")
	b.Cleanup(func() { os.RemoveAll(sockDir) })
	shimBin := filepath.Join(b.TempDir(), "clusterrun-shim")
	build(b, shimBin)
	return Supervisor{Command: []string{shimBin}, Socket: filepath.Join(sockDir, "run.sock"), Log: filepath.Join(b.TempDir(), "sup.log"),
		Env: append(os.Environ(), "GOMAXPROCS=1"), IdleAfter: time.Second}
}

func benchLaunch(b *testing.B, cgroupParent string) {
	sup := benchSupervisor(b)
	sockDir := filepath.Dir(sup.Socket)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		cfg := Config{Record: dir, Argv: []string{"true"}, Env: os.Environ(), Stdout: filepath.Join(dir, "out"), Stderr: filepath.Join(dir, "err"),
			Socket: filepath.Join(sockDir, "s.sock")}
		if cgroupParent != "" {
			cfg.Cgroup = filepath.Join(cgroupParent, fmt.Sprintf("bench-%d-%d", os.Getpid(), i))
		}
		p, err := sup.Prepare()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Start(cfg); err != nil {
			b.Fatal(err)
		}
		w, err := Client{Socket: cfg.Socket}.Watch(context.Background())
		if err == nil {
			<-w.Ended()
		}
	}
}

// BenchmarkDirectStart is the same task started by the worker itself, as before supervisors.
func BenchmarkDirectStart(b *testing.B) {
	for i := 0; i < b.N; i++ {
		p, err := proc.Start(proc.Config{Argv: []string{"true"}, Env: os.Environ()})
		if err != nil {
			b.Fatal(err)
		}
		p.Exit()
	}
}

func build(b *testing.B, out string) {
	b.Helper()
	cmd := execCommand("go", "build", "-ldflags=-s -w", "-o", out, "github.com/clusterrun/clusterrun/workers/clusterrun-shim")
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build shim: %v\n%s", err, o)
	}
}

var execCommand = exec.Command

// BenchmarkStop64 stops 64 sleeping tasks of one run at once, as a fail-fast does, with one request to their
// supervisor: from the request to every watcher holding its task's exit; ms-to-exit/op is the time to the last
// task's exit alone, as scenario h of make bench times a stop.
func BenchmarkStop64(b *testing.B) { benchStop(b, "", stopTogether, 64) }

// BenchmarkStop64Cgroup is BenchmarkStop64 with a cgroup per task.
func BenchmarkStop64Cgroup(b *testing.B) {
	parent, err := proc.CgroupParent()
	if err != nil {
		b.Skip(err)
	}
	benchStop(b, parent, stopTogether, 64)
}

// BenchmarkStop250Cgroup is BenchmarkStop64Cgroup with 250 tasks: a host's share of a 1,000-task run on 4 hosts.
func BenchmarkStop250Cgroup(b *testing.B) {
	parent, err := proc.CgroupParent()
	if err != nil {
		b.Skip(err)
	}
	benchStop(b, parent, stopTogether, 250)
}

// BenchmarkStop64EachTask is BenchmarkStop64 with a stop request per task, on the task's own socket (as workers
// before the supervisor's stop request did, and do for tasks of older supervisors).
func BenchmarkStop64EachTask(b *testing.B) {
	benchStop(b, "", func(_ Supervisor, clients []Client, _ []string) error {
		for _, c := range clients {
			go func() { _ = c.Stop(context.Background(), Stop{Grace: time.Second, By: "bench"}) }()
		}
		return nil
	}, 64)
}

// BenchmarkSignal250Cgroup sends 250 sleeping tasks of one run a signal that ends them (a stopRequestSignal to
// a host's share of a 1,000-task run on 4 hosts), with one request to their supervisor.
func BenchmarkSignal250Cgroup(b *testing.B) {
	parent, err := proc.CgroupParent()
	if err != nil {
		b.Skip(err)
	}
	benchStop(b, parent, func(sup Supervisor, _ []Client, records []string) error {
		return sup.SignalTasks(context.Background(), records, syscall.SIGUSR1, false)
	}, 250)
}

// BenchmarkSignal250EachTaskCgroup is BenchmarkSignal250Cgroup with a request per task on its own socket, one
// after the other, as host workers signalled before the supervisor's signal request (and do for tasks of older
// supervisors).
func BenchmarkSignal250EachTaskCgroup(b *testing.B) {
	parent, err := proc.CgroupParent()
	if err != nil {
		b.Skip(err)
	}
	benchStop(b, parent, func(_ Supervisor, clients []Client, _ []string) error {
		for _, c := range clients {
			if err := c.Signal(context.Background(), syscall.SIGUSR1); err != nil {
				return err
			}
		}
		return nil
	}, 250)
}

// stopTogether stops a benchmark's tasks with one request to their supervisor.
func stopTogether(sup Supervisor, _ []Client, records []string) error {
	return sup.StopTasks(context.Background(), records, Stop{Grace: time.Second, By: "bench"})
}

// benchStop starts n sleeping tasks under one supervisor per iteration, and times send's ending them: to the
// last one's exit (ms-to-exit/op), and until every watcher holds its exit.
func benchStop(b *testing.B, cgroupParent string, send func(sup Supervisor, clients []Client, records []string) error, n int) {
	sup := benchSupervisor(b)
	sockDir := filepath.Dir(sup.Socket)
	var toExit time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var exits []unix.PollFd
		var clients []Client
		var watches []*Watch
		var records []string
		for k := range n {
			dir := recordDir(b)
			cfg := Config{Record: dir, Argv: []string{"sleep", "600"}, Env: os.Environ(), Stdout: filepath.Join(dir, "out"),
				Stderr: filepath.Join(dir, "err"), Socket: filepath.Join(sockDir, fmt.Sprintf("t%d.sock", k)), Grace: time.Second}
			if cgroupParent != "" {
				cfg.Cgroup = filepath.Join(cgroupParent, fmt.Sprintf("bench-%d-%d-%d", os.Getpid(), i, k))
			}
			p, err := sup.Prepare()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Start(cfg); err != nil {
				b.Fatal(err)
			}
			c := Client{Socket: cfg.Socket}
			w, err := c.Watch(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			clients, watches, records = append(clients, c), append(watches, w), append(records, dir)
			fd, err := unix.PidfdOpen(w.Started.PID, 0)
			if err != nil {
				b.Fatal(err)
			}
			exits = append(exits, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
		time.Sleep(100 * time.Millisecond) // the tasks of a stop have run a while: let their starts settle
		b.StartTimer()
		start := time.Now()
		if err := send(sup, clients, records); err != nil {
			b.Fatal(err)
		}
		waitExits(b, exits)
		toExit += time.Since(start)
		for _, w := range watches {
			<-w.Ended()
		}
	}
	b.ReportMetric(float64(toExit.Microseconds())/1000/float64(b.N), "ms-to-exit/op")
}

// waitExits waits until every process of fds has exited (not reaped: what scenario h of make bench waits for)
// and closes the fds.
func waitExits(b *testing.B, fds []unix.PollFd) {
	for left := len(fds); left > 0; {
		if _, err := unix.Poll(fds, 10_000); err != nil && err != unix.EINTR {
			b.Fatal(err)
		}
		for i := range fds {
			if fds[i].Fd >= 0 && fds[i].Revents != 0 {
				unix.Close(int(fds[i].Fd))
				fds[i].Fd, left = -1, left-1
			}
		}
	}
}

// recordDir makes a folder for a task's records on tmpfs where the machine has one, as a host worker does: on a
// disk, each exit record's fsync would be most of what a stop measures.
func recordDir(b *testing.B) string {
	if _, err := os.Stat("/dev/shm"); err != nil {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "shimbench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// BenchmarkDirectStop64 is BenchmarkStop64 for tasks the worker started itself, as before supervisors.
func BenchmarkDirectStop64(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var ps []*proc.Process
		for range 64 {
			p, err := proc.Start(proc.Config{Argv: []string{"sleep", "600"}, Env: os.Environ()})
			if err != nil {
				b.Fatal(err)
			}
			ps = append(ps, p)
		}
		b.StartTimer()
		for _, p := range ps {
			go p.Stop(time.Second)
		}
		for _, p := range ps {
			<-p.Done()
		}
	}
}
