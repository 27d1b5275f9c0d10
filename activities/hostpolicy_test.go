package activities

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

func TestHostPolicy_Admit(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	prog := filepath.Join(bin, "train")
	require.NoError(t, os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755))
	link := filepath.Join(dir, "link-to-sh")
	require.NoError(t, os.Symlink("/bin/sh", link))
	venvPython := filepath.Join(bin, "python")
	require.NoError(t, os.Symlink("/bin/sh", venvPython))
	work := filepath.Join(dir, "work")
	require.NoError(t, os.MkdirAll(filepath.Join(work, "sub"), 0o755))
	realSh, err := filepath.EvalSymlinks("/bin/sh")
	require.NoError(t, err)

	p := HostPolicy{Commands: []string{bin + "/**", "/usr/bin/python3*"}, Dirs: []string{work}}
	for _, tc := range []struct {
		name       string
		argv       []string
		path, dir  string
		exe, error string
	}{
		{"on the task's PATH", []string{"train"}, bin, work, prog, ""},
		{"absolute", []string{prog, "--x"}, "", filepath.Join(work, "sub"), prog, ""},
		{"relative to the working directory", []string{"../bin/train"}, "", work, prog, ""},
		{"a symlink in an allowed folder is judged by its name", []string{"python"}, bin, work, venvPython, ""},
		{"not allowed", []string{"sh", "-c", "id"}, "/usr/bin:/bin", work, "", "host-b refuses /usr/bin/sh"},
		{"a symlink out of an allowed folder is judged where it leads", []string{link}, "", work, "", ": not in --allow-command (it leads to " + realSh + ")"},
		{"not on PATH", []string{"nope-nope"}, bin, work, "", "host-b refuses nope-nope: no such program on the task's PATH"},
		{"working directory outside", []string{"train"}, bin, dir, "", "host-b refuses working directory " + dir + ": not in --allow-dir"},
		{"working directory through ..", []string{"train"}, bin, work + "/../bin", "", "not in --allow-dir"},
		{"empty", []string{""}, bin, work, "", "host-b refuses an empty command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			adm, err := p.Admit("host-b", tc.argv, tc.path, tc.dir)
			if tc.error != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.error)
				var r *PolicyRefusal
				assert.ErrorAs(t, err, &r)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.exe, adm.Exe)
		})
	}

	open := HostPolicy{}
	adm, err := open.Admit("host-b", []string{"anything"}, "", "")
	require.NoError(t, err, "no policy: anything goes")
	wd, _ := os.Getwd()
	assert.Equal(t, wd, adm.Dir, "the default working directory is the worker's")
	assert.True(t, open.Open())
}

func TestHostPolicy_CheckPolicy(t *testing.T) {
	assert.ErrorContains(t, CheckPolicy(HostPolicy{Commands: []string{"python3"}}), `--allow-command "python3": not an absolute path`)
	assert.ErrorContains(t, CheckPolicy(HostPolicy{Commands: []string{"/usr/bin/[x"}}), `syntax error in pattern: a [ opens a set of characters that a ] must close; write \[ for`)
	assert.ErrorContains(t, CheckPolicy(HostPolicy{Dirs: []string{"srv"}}), `--allow-dir "srv": not an absolute path`)
	assert.NoError(t, CheckPolicy(HostPolicy{Commands: []string{"/opt/**", "/usr/bin/python3*"}, Dirs: []string{"/srv"}}))
}

func TestHostPolicy_MissingDirs(t *testing.T) {
	dir := t.TempDir()
	gone := filepath.Join(dir, "not-mounted")
	assert.Equal(t, []string{gone}, HostPolicy{Dirs: []string{dir, gone}}.MissingDirs())
	assert.Empty(t, HostPolicy{}.MissingDirs())
}

func TestCheckPathNames(t *testing.T) {
	for _, bad := range []string{"", "../etc", "a/b", ".hidden", "x\x00", string(make([]byte, 300))} {
		assert.Error(t, spec.CheckRunID(bad), "%q", bad)
	}
	assert.NoError(t, spec.CheckRunID("mnist-20261122-101500-a1b2c3"))
	assert.Error(t, checkPathNames("ok", "../../etc-1"))
	assert.Error(t, checkPathNames("ok", "worker"))
	assert.NoError(t, checkPathNames("ok", "worker-12"))
}

func TestCheckOwnDir(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "logs")
	require.NoError(t, checkOwnDir("--log-dir", good, 0o711))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(good, link))
	assert.ErrorContains(t, checkOwnDir("--log-dir", link, 0o711), "is a symlink")
	open := filepath.Join(dir, "open")
	require.NoError(t, os.Mkdir(open, 0o777))
	require.NoError(t, os.Chmod(open, 0o777))
	assert.ErrorContains(t, checkOwnDir("--socket-dir", open, 0o711), "can be written by other users")
	if os.Getuid() == 0 {
		other := filepath.Join(dir, "other")
		require.NoError(t, os.Mkdir(other, 0o755))
		require.NoError(t, os.Chown(other, 65534, 65534))
		assert.ErrorContains(t, checkOwnDir("--state-dir", other, 0o700), "belongs to uid 65534")
	}
}

func TestReadLogs_DoesNotFollowSymlinks(t *testing.T) {
	h := &Host{Name: "h", LogDir: t.TempDir()}
	dir := AttemptDir(h.LogDir, "run-1", 1, "worker-0")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("not for you\n"), 0o600))
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "stdout.log")))
	c := h.readChunk("run-1", workflows.ReadLogsRequest{Task: "worker-0", Attempt: 1, Stream: "stdout", Flush: true})
	assert.NotEmpty(t, c.Error)
	assert.Empty(t, c.Data)

	c = h.readChunk("../../etc", workflows.ReadLogsRequest{Task: "worker-0", Attempt: 1, Stream: "stdout"})
	assert.Contains(t, c.Error, "not usable as a folder name")
}

// The admission a task start pays: PATH lookup, symlink resolution, glob and folder checks.
func BenchmarkHostPolicy_Admit(b *testing.B) {
	p := HostPolicy{Commands: []string{"/usr/bin/*", "/opt/**"}, Dirs: []string{os.TempDir()}}
	for i := 0; i < b.N; i++ {
		if _, err := p.Admit("h", []string{"sleep", "1"}, "/usr/local/bin:/usr/bin:/bin", os.TempDir()); err != nil {
			b.Fatal(err)
		}
	}
}

// Sockets and cluster files go to a tmpfs when the machine has one: $XDG_RUNTIME_DIR first, then /run, then
// /dev/shm; a folder that is not a tmpfs is passed over, and with none the temp folder serves.
func TestRuntimeDir_PrefersATmpfs(t *testing.T) {
	own := fmt.Sprintf("clusterrun-%d", os.Getuid())
	got := RuntimeDir("")
	switch {
	case onTmpfs("/run") && writable("/run"):
		assert.Equal(t, filepath.Join("/run", own), got)
	case onTmpfs("/dev/shm") && writable("/dev/shm"):
		assert.Equal(t, filepath.Join("/dev/shm", own), got)
	default:
		assert.Equal(t, filepath.Join(os.TempDir(), own), got)
	}
	if !onTmpfs("/dev/shm") {
		t.Skip("no /dev/shm tmpfs to stand in for $XDG_RUNTIME_DIR")
	}
	xdg, err := os.MkdirTemp("/dev/shm", "xdg")
	require.NoError(t, err)
	defer os.RemoveAll(xdg)
	assert.Equal(t, filepath.Join(xdg, "clusterrun"), RuntimeDir(xdg))
	if disk := t.TempDir(); !onTmpfs(disk) {
		assert.Equal(t, got, RuntimeDir(disk), "an $XDG_RUNTIME_DIR on a disk is passed over")
	}
}
