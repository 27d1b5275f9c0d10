package activities

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// HostPolicy is what this host runs, whatever a spec asks: the programs (--allow-command), the working
// directories (--allow-dir) and the user tasks run as (--run-as). Anyone who can start a workflow in the
// namespace can write a spec; only the host's operator writes its policy.
type HostPolicy struct {
	// Commands are globs on the absolute path of a task's program: the path found on the task's PATH, or where
	// its symlinks lead. "*" matches within one folder; a trailing "/**" matches everything beneath. Empty: any.
	Commands []string
	// Dirs are the working directories tasks may use, each with everything beneath it (symlinks resolved).
	// Empty: any.
	Dirs []string
	// User is who tasks run as. Nil: the worker's own user.
	User *TaskUser
}

// TaskUser is a user tasks run as.
type TaskUser struct {
	Name     string
	UID, GID uint32
	Groups   []uint32
	Home     string
}

// Open says whether the policy lets anything run.
func (p HostPolicy) Open() bool { return len(p.Commands) == 0 && len(p.Dirs) == 0 }

// LookupTaskUser finds a user by name or uid, with its primary and supplementary groups.
func LookupTaskUser(name string) (*TaskUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u2, err2 := user.LookupId(name); err2 == nil {
			u, err = u2, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("--run-as %s: no such user on this host", name)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("--run-as %s: uid %s or gid %s is not a number", name, u.Uid, u.Gid)
	}
	tu := &TaskUser{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				tu.Groups = append(tu.Groups, uint32(g))
			}
		}
	}
	return tu, nil
}

// CheckPolicy says what is wrong with a policy's patterns and folders, if anything.
func CheckPolicy(p HostPolicy) error {
	for _, c := range p.Commands {
		if !filepath.IsAbs(c) {
			return fmt.Errorf("--allow-command %q: not an absolute path or glob; use e.g. /usr/bin/python3* or /opt/train/bin/**", c)
		}
		if _, err := filepath.Match(strings.TrimSuffix(c, "/**"), ""); err != nil {
			return fmt.Errorf("--allow-command %q: %v: a [ opens a set of characters that a ] must close; write \\[ for a [ itself", c, err)
		}
	}
	for _, d := range p.Dirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("--allow-dir %q: not an absolute path; use e.g. /srv/train", d)
		}
	}
	return nil
}

// MissingDirs are the policy's --allow-dir folders that this host does not have (a typo, or a mount not up
// yet): no task can start in one until it is there.
func (p HostPolicy) MissingDirs() []string {
	var missing []string
	for _, d := range p.Dirs {
		if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, d)
		}
	}
	return missing
}

// PolicyRefusal says why this host will not run a task: "host-b refuses /usr/bin/sh: not in --allow-command".
type PolicyRefusal struct {
	Host, What, Rule string
}

func (r *PolicyRefusal) Error() string {
	return fmt.Sprintf("%s refuses %s: %s", r.Host, r.What, r.Rule)
}

// Admitted is a task start the policy allows: the program to execute (what was checked) and the directory.
type Admitted struct {
	Exe, Dir string
}

// Admit resolves a task's program against its PATH and its working directory ("" for the worker's) and checks
// both against the policy.
func (p HostPolicy) Admit(host string, argv []string, taskPath, dir string) (Admitted, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return Admitted{}, fmt.Errorf("the worker's working directory: %w", err)
		}
		dir = wd
	}
	a := Admitted{Dir: dir}
	if len(argv) == 0 || argv[0] == "" {
		return a, &PolicyRefusal{Host: host, What: "an empty command", Rule: "no program to run"}
	}
	if len(p.Dirs) > 0 && !within(dir, p.Dirs) {
		return a, &PolicyRefusal{Host: host, What: "working directory " + dir, Rule: "not in --allow-dir"}
	}
	exe := argv[0]
	switch {
	case strings.Contains(exe, "/") && !filepath.IsAbs(exe):
		exe = filepath.Join(dir, exe)
	case !strings.Contains(exe, "/"):
		found, err := lookPathIn(exe, taskPath)
		if err != nil {
			if len(p.Commands) == 0 {
				return a, nil // the start reports it: command not found
			}
			return a, &PolicyRefusal{Host: host, What: exe, Rule: "no such program on the task's PATH"}
		}
		exe = found
	}
	exe = filepath.Clean(exe)
	real, err := filepath.EvalSymlinks(exe)
	if err != nil {
		if len(p.Commands) == 0 {
			return a, nil
		}
		return a, &PolicyRefusal{Host: host, What: exe, Rule: "no such program"}
	}
	a.Exe = exe
	if len(p.Commands) == 0 || matchCommand(p.Commands, exe) || matchCommand(p.Commands, real) {
		return a, nil
	}
	rule := "not in --allow-command"
	if real != exe {
		rule += " (it leads to " + real + ")"
	}
	return a, &PolicyRefusal{Host: host, What: exe, Rule: rule}
}

// matchCommand says whether path matches one of the globs ("/**" at the end: anything beneath).
func matchCommand(patterns []string, path string) bool {
	for _, p := range patterns {
		if base, ok := strings.CutSuffix(p, "/**"); ok {
			if strings.HasPrefix(path, filepath.Clean(base)+"/") {
				return true
			}
			continue
		}
		if ok, _ := filepath.Match(p, path); ok {
			return true
		}
	}
	return false
}

// within says whether dir, symlinks resolved, is one of dirs or beneath one.
func within(dir string, dirs []string) bool {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	for _, d := range dirs {
		base, err := filepath.EvalSymlinks(d)
		if err != nil {
			continue
		}
		if real == base || strings.HasPrefix(real, strings.TrimSuffix(base, "/")+"/") {
			return true
		}
	}
	return false
}

// lookPathIn finds an executable file named name on a PATH value.
func lookPathIn(name, pathValue string) (string, error) {
	for _, d := range filepath.SplitList(pathValue) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			if !filepath.IsAbs(p) {
				continue // a relative PATH entry would depend on the working directory
			}
			return p, nil
		}
	}
	return "", errors.New("not found")
}

// currentUserName is the worker's own user name (its uid when the name is unknown).
func currentUserName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// pathOf returns the PATH a task will have: its spec's, else the worker's.
func pathOf(specEnv map[string]string, workerEnv []string) string {
	if p, ok := specEnv["PATH"]; ok {
		return p
	}
	for _, kv := range workerEnv {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return v
		}
	}
	return ""
}
