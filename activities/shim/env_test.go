package shim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigEnv is an environment like a large run's: a TF_CONFIG of n endpoints (quotes and all), an empty value, a
// value with '=' in it, and text that is not ASCII.
func bigEnv(dir string, n int) []string {
	eps := make([]string, n)
	for i := range eps {
		eps[i] = fmt.Sprintf(`"10.0.%d.%d:%d"`, i/250, i%250, 20000+i)
	}
	return append(os.Environ(), "DIR="+dir,
		`TF_CONFIG={"cluster":{"worker":[`+strings.Join(eps, ",")+`]},"task":{"type":"worker","index":7}}`,
		"EMPTY=", "EQUALS=a=b==c", "GREETING=grüße ✓")
}

// startedEnv starts a task that saves the environment it was started with, on p, and returns that environment.
func startedEnv(t *testing.T, p *Pending, env func(dir string) []string) []string {
	t.Helper()
	dir, cfg := record(t, `cat /proc/$$/environ > "$DIR/environ"`, nil)
	cfg.Env = env(dir)
	_, err := p.Start(cfg)
	require.NoError(t, err)
	waitFor(t, "the task's exit", func() bool { _, ok, _ := ReadExit(dir); return ok })
	b, err := os.ReadFile(filepath.Join(dir, "environ"))
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

func TestShim_TaskGetsItsEnvironmentAsRawBytes(t *testing.T) {
	p, err := supervisorOf(t).Prepare()
	require.NoError(t, err)
	require.True(t, p.rawEnv, "the supervisor's greeting says it takes the environment as raw bytes")
	var want []string
	got := startedEnv(t, p, func(dir string) []string { want = bigEnv(dir, 4000); return want })
	assert.Equal(t, want, got)
}

func TestShim_SupervisorTakesAnOlderWorkersJSONEnvironment(t *testing.T) {
	p, err := supervisorOf(t).Prepare()
	require.NoError(t, err)
	p.rawEnv = false // what a worker from before this sends: the environment in the task's Config
	var want []string
	got := startedEnv(t, p, func(dir string) []string { want = bigEnv(dir, 64); return want })
	assert.Equal(t, want, got)
}

func TestShim_EnvironmentGoesAsJSONToAnOlderSupervisor(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "shim")
	require.NoError(t, err)
	defer os.RemoveAll(sockDir)
	old := Supervisor{Socket: filepath.Join(sockDir, "old.sock"), Log: filepath.Join(sockDir, "old.log")}
	ln, err := net.Listen("unix", old.Socket)
	require.NoError(t, err)
	defer ln.Close()
	type asked struct {
		line string
		cfg  Config
		rest int // bytes after the request's line: none
	}
	got := make(chan asked, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		writeMessage(conn, message{OK: true}) // the greeting of a supervisor from before raw environments
		r := bufio.NewReader(conn)
		line, _ := r.ReadBytes('\n')
		var req struct {
			Config Config `json:"config"`
		}
		_ = json.Unmarshal(line, &req)
		got <- asked{line: string(line), cfg: req.Config, rest: r.Buffered()}
		writeMessage(conn, message{Started: &Started{PID: 4242}})
	}()
	p, err := old.Prepare()
	require.NoError(t, err)
	env := bigEnv("d", 100)
	st, err := p.Start(Config{Record: "r", Socket: "s", Env: env})
	require.NoError(t, err)
	assert.Equal(t, 4242, st.PID)
	a := <-got
	assert.Equal(t, env, a.cfg.Env)
	assert.NotContains(t, a.line, "envBytes")
	assert.Zero(t, a.rest)
}

func TestShim_EnvironmentWithANULGoesAsJSON(t *testing.T) {
	_, ok := envBlock([]string{"A=1", "B=x\x00y"})
	assert.False(t, ok, "a NUL inside an entry cannot be told from the end of one")
	b, ok := envBlock([]string{"A=1", "B="})
	require.True(t, ok)
	assert.Equal(t, "A=1\x00B=\x00", string(b))
}

func TestShim_MalformedRawEnvironmentIsRefused(t *testing.T) {
	sup := supervisorOf(t)
	warm, err := sup.Prepare() // starts the supervisor
	require.NoError(t, err)
	defer warm.Abort()
	for name, req := range map[string]string{
		"too large":       fmt.Sprintf(`{"op":"start","config":{"record":"r","socket":"s"},"envBytes":%d}`, maxEnvBytes+1),
		"negative":        `{"op":"start","config":{"record":"r","socket":"s"},"envBytes":-4}`,
		"without a task":  `{"op":"start","envBytes":4}`,
		"in both places":  `{"op":"start","config":{"record":"r","socket":"s","env":["A=1"]},"envBytes":4}`,
		"shorter than it": `{"op":"start","config":{"record":"r","socket":"s"},"envBytes":400}`,
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("unix", sup.Socket)
			require.NoError(t, err)
			defer conn.Close()
			r := bufio.NewReader(conn)
			greeting, err := readMessage(r)
			require.NoError(t, err)
			require.True(t, greeting.OK)
			_, err = conn.Write([]byte(req + "\nA=1\x00"))
			require.NoError(t, err)
			if name == "shorter than it" {
				_ = conn.(*net.UnixConn).CloseWrite()
			}
			m, err := readMessage(r)
			require.NoError(t, err)
			assert.Contains(t, m.Error, "malformed start request")
			assert.Nil(t, m.Started)
		})
	}
}

// BenchmarkStartRequest writes and reads a start request whose TF_CONFIG names 4,000 endpoints: its
// environment in JSON (as before) against raw bytes after the request's line.
func BenchmarkStartRequest(b *testing.B) {
	cfg := Config{Record: "/dev/shm/r", Argv: []string{"python3", "train.py"}, Env: bigEnv("/logs/a", 4000),
		Stdout: "/logs/a/stdout.log", Stderr: "/logs/a/stderr.log", Socket: "/dev/shm/s/shim.sock"}
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			line, _ := json.Marshal(request{Op: "start", Config: &cfg})
			var req request
			if err := json.Unmarshal(line, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			c := cfg
			env, _ := envBlock(c.Env)
			c.Env = nil
			line, _ := json.Marshal(request{Op: "start", Config: &c, EnvBytes: len(env)})
			var req request
			if err := json.Unmarshal(line, &req); err != nil {
				b.Fatal(err)
			}
			if err := readEnvBlock(strings.NewReader(string(env)), &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
