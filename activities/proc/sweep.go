package proc

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// Leftover is a process found by Sweep.
type Leftover struct {
	PID     int
	Cmdline string
}

// FindLeftovers lists live processes (other than this one) whose environment holds every one of the given
// KEY=VALUE pairs. Processes of other users cannot be read and are skipped.
func FindLeftovers(env ...string) []Leftover {
	var out []Leftover
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		environ, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		vars := bytes.Split(environ, []byte{0})
		all := true
		for _, want := range env {
			found := false
			for _, v := range vars {
				if string(v) == want {
					found = true
					break
				}
			}
			all = all && found
		}
		if !all {
			continue
		}
		if state, _, ok := procStat(pid); !ok || state == 'Z' || state == 'X' {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, Leftover{PID: pid, Cmdline: string(bytes.ReplaceAll(bytes.TrimRight(cmd, "\x00"), []byte{0}, []byte(" ")))})
	}
	return out
}

// Sweep kills, with SIGKILL, every process FindLeftovers finds for env, and returns them.
func Sweep(env ...string) []Leftover {
	found := FindLeftovers(env...)
	for _, l := range found {
		_ = syscall.Kill(l.PID, syscall.SIGKILL)
	}
	return found
}
