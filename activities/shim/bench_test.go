package shim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/clusterrun/clusterrun/activities/proc"
)

// BenchmarkLaunch starts and waits for one trivial task under a shim per iteration: the supervisor's cost per
// task launch, to set against BenchmarkDirectStart.
func BenchmarkLaunch(b *testing.B) { benchLaunch(b, "") }

// BenchmarkLaunchCgroup is BenchmarkLaunch with a cgroup per task.
func BenchmarkLaunchCgroup(b *testing.B) {
	parent, err := proc.CgroupParent()
	if err != nil {
		b.Skip(err)
	}
	benchLaunch(b, parent)
}

func benchLaunch(b *testing.B, cgroupParent string) {
	sockDir, _ := os.MkdirTemp("", "shimb")
	defer os.RemoveAll(sockDir)
	shimBin := filepath.Join(b.TempDir(), "clusterrun-shim")
	build(b, shimBin)
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		cfg := Config{Argv: []string{"true"}, Env: os.Environ(), Stdout: filepath.Join(dir, "out"), Stderr: filepath.Join(dir, "err"),
			Socket: filepath.Join(sockDir, "s.sock")}
		if cgroupParent != "" {
			cfg.Cgroup = filepath.Join(cgroupParent, fmt.Sprintf("bench-%d-%d", os.Getpid(), i))
		}
		if err := WriteConfig(dir, cfg); err != nil {
			b.Fatal(err)
		}
		if _, err := Launch([]string{shimBin}, dir, os.Environ()); err != nil {
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
	cmd := execCommand("go", "build", "-o", out, "github.com/clusterrun/clusterrun/workers/shim")
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build shim: %v\n%s", err, o)
	}
}

var execCommand = exec.Command
