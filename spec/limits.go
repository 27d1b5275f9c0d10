package spec

import (
	"fmt"
	"strings"
	"time"
)

// Bounds on everything a spec holds. A spec is untrusted input that every host worker's workflow code plans, so
// each number and size has a ceiling, checked without overflow, and a spec over one fails validation with the
// field named. The ceilings sit well above real runs and well below what would hurt a worker or the run's
// history (each task's command and env travel in its RunTask input, kept in the history for every attempt).
const (
	MaxTypes          = 100       // task types in a run
	MaxTypeNameLength = 40        // a task name is TYPE-INDEX, part of paths and socket names
	MaxHostNameLength = 253       // DNS's limit
	MaxCommandArgs    = 4096      // arguments in one command
	MaxEnvVars        = 1024      // variables in one env block
	MaxEnvNameLength  = 256       // bytes in a variable's name
	MaxPathLength     = 4096      // bytes in workingDir (Linux's PATH_MAX)
	MaxTaskBytes      = 256 << 10 // bytes of command, env and workingDir one task carries
	MaxPlanBytes      = 8 << 20   // the same, summed over every task of the run
	MaxProblems       = 100       // problems reported; the rest are counted
)

// runIDRE is what a run ID (the workflow ID) may be: it names a folder on every host that runs one of its tasks.
var runIDRE = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$`)

// CheckRunID says why a run ID cannot name a folder, if it cannot. Temporal takes any string as a workflow ID;
// host workers refuse tasks of a run whose ID fails this.
func CheckRunID(id string) error {
	if !runIDRE().MatchString(id) {
		return fmt.Errorf("run ID %s is not usable as a folder name: use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 200 characters", short(id))
	}
	return nil
}

// durationBounds are the largest values of the spec's durations: a year for the run, less for the rest. They
// keep every sum the workflow makes of them (activity timeouts, deadlines) far from overflow.
var durationBounds = map[string]time.Duration{
	"maxRunTime":          365 * 24 * time.Hour,
	"stopGracePeriod":     time.Hour,
	"heartbeatTimeout":    time.Hour,
	"startTimeout":        30 * 24 * time.Hour,
	"hostLossGrace":       7 * 24 * time.Hour,
	"stopAfterDisconnect": 7 * 24 * time.Hour,
	"hangTimeout":         7 * 24 * time.Hour,
	"backoff":             time.Hour,
	"before":              365 * 24 * time.Hour,
	"lease":               7 * 24 * time.Hour,
}

// maxDuration returns the bound of a duration field, named by the last part of its path.
func maxDuration(path string) time.Duration {
	name := path[strings.LastIndex(path, ".")+1:]
	if d, ok := durationBounds[name]; ok {
		return d
	}
	return 365 * 24 * time.Hour
}

// short quotes a value for a message, cut to a readable length: a hostile spec cannot make messages huge.
func short(s string) string {
	const max = 64
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:max], len(s))
}

// shortKey is a map key or field name as it appears in a problem's path.
func shortKey(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "…"
}

// sizes checks the lengths and bytes of a command, an env block and a working directory at path.
func (v *validator) sizes(path string, cmd []string, env map[string]string, dir string) {
	if len(cmd) > MaxCommandArgs {
		v.add(join(path, "command"), "%d arguments; at most %d", len(cmd), MaxCommandArgs)
	}
	for i, a := range cmd {
		if strings.IndexByte(a, 0) >= 0 {
			v.add(fmt.Sprintf("%s[%d]", join(path, "command"), i), "holds a NUL byte, which no program argument can")
			break
		}
	}
	if len(env) > MaxEnvVars {
		v.add(join(path, "env"), "%d variables; at most %d", len(env), MaxEnvVars)
	}
	for _, k := range sortedKeys(env) {
		if strings.IndexByte(env[k], 0) >= 0 {
			v.add(join(path, "env")+"."+shortKey(k), "holds a NUL byte, which no environment value can")
		}
	}
	if len(dir) > MaxPathLength {
		v.add(join(path, "workingDir"), "%d bytes; at most %d", len(dir), MaxPathLength)
	}
	if strings.IndexByte(dir, 0) >= 0 {
		v.add(join(path, "workingDir"), "holds a NUL byte, which no path can")
	}
}

// taskBytes is what one task of a type carries in its RunTask input: its command, its env (the run's merged
// with the type's, mergeEnv) and its working directory.
func taskBytes(s *RunSpec, t TaskSpec, env map[string]string) int {
	cmd := t.Command
	if len(cmd) == 0 {
		cmd = s.Command
	}
	n := len(or(t.WorkingDir, s.WorkingDir))
	for _, a := range cmd {
		n += len(a) + 1
	}
	//workflowcheck:ignore
	for k, val := range env { // a sum: the order cannot show
		n += len(k) + len(val) + 2
	}
	return n
}

// capped keeps the first MaxProblems problems and counts the rest.
func capped(problems []Problem) []Problem {
	if len(problems) <= MaxProblems {
		return problems
	}
	rest := len(problems) - MaxProblems
	return append(problems[:MaxProblems:MaxProblems], Problem{Path: "(spec)", Message: fmt.Sprintf("and %d more problems", rest)})
}

// human writes a duration without trailing zero units: 1h, 168h, 1h30m.
func human(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
