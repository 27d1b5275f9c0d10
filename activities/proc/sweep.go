package proc

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Leftover is a process found by FindLeftovers.
type Leftover struct {
	PID     int
	Cmdline string
	env     map[string]string
}

// Env returns one variable of the process's environment.
func (l Leftover) Env(key string) string { return l.env[key] }

// Kill sends the process SIGKILL.
func (l Leftover) Kill() error { return syscall.Kill(l.PID, syscall.SIGKILL) }

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
		vars := map[string]string{}
		for _, kv := range bytes.Split(environ, []byte{0}) {
			if k, v, ok := strings.Cut(string(kv), "="); ok {
				vars[k] = v
			}
		}
		all := true
		for _, want := range env {
			k, v, _ := strings.Cut(want, "=")
			if got, ok := vars[k]; !ok || got != v {
				all = false
				break
			}
		}
		if !all {
			continue
		}
		if state, _, ok := procStat(pid); !ok || state == 'Z' || state == 'X' {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, Leftover{PID: pid, env: vars,
			Cmdline: string(bytes.ReplaceAll(bytes.TrimRight(cmd, "\x00"), []byte{0}, []byte(" ")))})
	}
	return out
}

// Sweep kills, with SIGKILL, every process FindLeftovers finds for env, and returns them.
func Sweep(env ...string) []Leftover {
	found := FindLeftovers(env...)
	for _, l := range found {
		_ = l.Kill()
	}
	return found
}
