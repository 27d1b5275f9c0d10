// Command clusterrun starts, follows, inspects and cancels cluster runs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/internal/flagerr"
)

// Exit codes beside a task's own: usage or spec errors, a canceled run, a timed-out run, a follow that a
// hang-up ended (128 + SIGHUP, as a shell says it).
const (
	exitUsage    = 2
	exitCanceled = 130
	exitTimedOut = 124
	exitHangUp   = 129
)

// exitError ends the program with a code, after printing its message (if any) after the command's name.
type exitError struct {
	code    int
	msg     string
	command string
}

func (e *exitError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

const topUsage = `clusterrun runs distributed training and test clusters as OS processes across hosts, with Temporal as
the control plane.

Usage: clusterrun COMMAND [arguments] [flags]

Commands:
  run SPEC        start a run from a YAML or JSON spec and follow it
  attach RUN      follow a run that is already going, as run does, and exit with its code
  status RUN      show every task of a run
  logs RUN        print tasks' output from whichever host ran them
  list            list runs, newest first
  terminate-task RUN TASK        stop one task; it ends Terminated, not Failed
  start-task RUN TYPE [--index N] start a task that is not running (again, or a new index)
  stop RUN        ask a run to stop: tasks see should-stop, get their grace period, stragglers are killed
  cancel RUN      stop every task of a run at once and end it as canceled
  drain HOST      a host takes no new tasks (--now: and stops its tasks; --undo: takes tasks again)
  hosts           the host workers: pools, slots, tasks running, last seen
  items RUN       a run's work items: counts, and each item with its hand-outs
  validate SPEC   check a spec and list every problem
  task ...        from inside a task: barrier, progress, stop, clear-stop, should-stop, wait-for-stop, info,
                  and work items (schedule, fetch, join, done, serve)
  codec-server    serve the payload codec to the Web UI and the temporal CLI
  codec-key ID    print a new encryption key line for a codec key file
  completion SHELL  print a completion script for bash, zsh, fish or powershell, e.g.
                  source <(clusterrun completion bash)
  version         print the version (also --version)

Run 'clusterrun COMMAND --help' for a command's flags and an example. Exit codes: 0 success, 1 failure, 2 a
usage or spec error; clusterrun run exits with its tasks' code (docs/operations.md#exit-codes).
The Temporal connection comes from the same flags, variables and config file as the temporal CLI's: --address,
--namespace, --api-key, --tls-*, --profile, --config-file over TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_PROFILE and temporal.toml (default localhost:7233, namespace default).
With --codec-key-file FILE (or CLUSTERRUN_CODEC_KEY_FILE), every command encrypts and decrypts payloads with
the keys in FILE, as the host workers must (docs/security.md).
`

type command struct {
	name  string
	usage string
	run   func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", runUsage, cmdRun},
		{"attach", attachUsage, cmdAttach},
		{"status", statusUsage, cmdStatus},
		{"logs", logsUsage, cmdLogs},
		{"list", listUsage, cmdList},
		{"terminate-task", terminateTaskUsage, cmdTerminateTask},
		{"start-task", startTaskUsage, cmdStartTask},
		{"stop", stopUsage, cmdStop},
		{"cancel", cancelUsage, cmdCancel},
		{"drain", drainUsage, cmdDrain},
		{"hosts", hostsUsage, cmdHosts},
		{"items", itemsUsage, cmdItems},
		{"validate", validateUsage, cmdValidate},
		{"task", taskUsage, cmdTask},
		{"codec-server", codecServerUsage, cmdCodecServer},
		{"codec-key", codecKeyUsage, cmdCodecKey},
	}
}

func main() {
	os.Exit(mainWithCode(os.Args[1:], os.Stdout, os.Stderr))
}

// mainWithCode runs the command line and returns the exit code.
func mainWithCode(args []string, stdout, stderr io.Writer) int {
	root := rootCommand(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	var ee *exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintln(stderr, "clusterrun "+ee.command+": "+ee.msg)
		}
		return ee.code
	case strings.HasPrefix(err.Error(), "unknown command"):
		if meant, ok := peerCommands[args[0]]; ok {
			fmt.Fprintf(stderr, "clusterrun: unknown command %q; %s (see clusterrun --help)\n", args[0], meant)
			return exitUsage
		}
		if near := flagerr.Nearest(args[0], commandNames()); near != "" {
			fmt.Fprintf(stderr, "clusterrun: unknown command %q; did you mean %q? (see clusterrun --help)\n", args[0], near)
			return exitUsage
		}
		fmt.Fprintf(stderr, "clusterrun: unknown command %q; commands are %s (see clusterrun --help)\n", args[0], strings.Join(commandNames(), ", "))
		return exitUsage
	case strings.HasPrefix(err.Error(), "unknown flag") || strings.HasPrefix(err.Error(), "unknown shorthand flag"):
		// a flag where cobra looked for a command: clusterrun --bogus, or clusterrun --bogus list
		fmt.Fprintf(stderr, "clusterrun: %s (see clusterrun --help)\n", err)
		return exitUsage
	case conn.NamespaceMissing(err) != "":
		// The server's own words, and the step that met them ("read the host registry (is a clusterrun-worker
		// running?)"), would only send the user looking elsewhere: the namespace is all that is wrong.
		fmt.Fprintln(stderr, "clusterrun: "+conn.NamespaceMissing(err))
		return 1
	default:
		fmt.Fprintln(stderr, "clusterrun: "+err.Error()+unanswered(err))
		return 1
	}
}

// peerCommands are names other tools (Slurm, Ray, kubectl, the temporal CLI) give to what a clusterrun command
// does, or the opposite of one, with the command meant.
var peerCommands = map[string]string{
	"undrain":   "`clusterrun drain HOST --undo` takes a drain back",
	"resume":    "`clusterrun drain HOST --undo` has a drained host take tasks again",
	"submit":    "`clusterrun run SPEC` starts a run (--detach returns once it has started)",
	"start":     "`clusterrun run SPEC` starts a run; `clusterrun start-task RUN TASK` starts one of its tasks again",
	"restart":   "`clusterrun start-task RUN TASK` starts an ended task again; a task's restart policy restarts it on its own",
	"kill":      "`clusterrun cancel RUN` stops every task at once; `clusterrun terminate-task RUN TASK` stops one",
	"scancel":   "`clusterrun cancel RUN` stops every task at once",
	"terminate": "`clusterrun cancel RUN` ends a run; `clusterrun terminate-task RUN TASK` stops one task",
	"ps":        "`clusterrun list` lists runs; `clusterrun status RUN` a run's tasks",
	"squeue":    "`clusterrun list` lists runs; `clusterrun status RUN` a run's tasks",
	"describe":  "`clusterrun status RUN` shows a run's tasks",
	"nodes":     "`clusterrun hosts` lists the host workers",
	"sinfo":     "`clusterrun hosts` lists the host workers",
	"follow":    "`clusterrun attach RUN` follows a run; `clusterrun logs RUN --follow` its output",
}

func commandNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return names
}

// parse parses flags that may come before, between or after the positional arguments, and checks the count
// of positionals.
func parse(fs *flag.FlagSet, usage string, args []string, minPos, maxPos int, stderr io.Writer) ([]string, error) {
	fs.SetOutput(stderr)
	addCodecKeyFileFlag(fs)
	addConnectionFlags(fs)
	if describe.on {
		describe.fs = fs
		return nil, errDescribed
	}
	defer func() {
		if f := codecKeyFile(fs); f != "" {
			conn.SetCodecKeyFile(f)
		}
	}()
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		some := false
		fs.VisitAll(func(*flag.Flag) { some = true })
		if some {
			fmt.Fprintln(fs.Output(), "\nFlags:")
			flagerr.PrintDefaults(fs)
		}
	}
	var pos []string
	for {
		fs.SetOutput(io.Discard) // the problem is said below, in one line
		err := fs.Parse(args)
		fs.SetOutput(stderr)
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return nil, err
			}
			hint := fmt.Sprintf(" (see clusterrun %s --help)", fs.Name())
			if _, near, unknown := flagerr.UnknownFlag(fs, err); unknown && near == "" {
				// no flag is meant: what the command takes says more (progress takes CUR and TOTAL, not --step)
				hint = "; usage: " + usageLine(usage) + hint
			}
			return nil, usageErrorf("%s", flagerr.Problem(fs, err, hint))
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) < minPos || len(pos) > maxPos {
		line := usageLine(usage)
		if len(pos) < minPos {
			return nil, usageErrorf("missing %s; usage: %s (see clusterrun %s --help)", missingArgument(line, len(pos)), line, fs.Name())
		}
		return nil, usageErrorf("unexpected argument %q; usage: %s (see clusterrun %s --help)", pos[maxPos], line, fs.Name())
	}
	return pos, nil
}

// missingArgument names the first positional argument a usage line wants past the given ones (its upper-case
// placeholder, RUN in "clusterrun status RUN [-o table|json|jsonl]"), with where to find one.
func missingArgument(line string, given int) string {
	var names []string
	for _, w := range strings.Fields(line) {
		w = strings.TrimSuffix(w, "...")
		if w != "" && strings.Trim(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZ-") == "" {
			names = append(names, w)
		}
	}
	if given >= len(names) {
		return "an argument"
	}
	where := map[string]string{
		"RUN":  " (a run's ID: clusterrun list shows the runs, newest first)",
		"TASK": " (a task's name, such as worker-0: clusterrun status RUN lists them)",
		"HOST": " (a host worker's --host: clusterrun hosts lists them)",
		"SPEC": " (a YAML or JSON spec file; docs/spec.md)",
		"TYPE": " (a task type of the run's spec, such as worker, or a task's name, such as worker-3)",
	}
	return names[given] + where[names[given]]
}

// usageLine picks the "Usage: ..." line out of a command's help text.
func usageLine(usage string) string {
	lines := strings.Split(usage, "\n")
	for i, l := range lines {
		if rest, ok := strings.CutPrefix(l, "Usage: "); ok {
			for _, more := range lines[i+1:] { // a usage too long for one line goes on, indented, on the next
				if !strings.HasPrefix(more, "       ") {
					break
				}
				more = strings.TrimSpace(more)
				if strings.HasPrefix(more, "clusterrun ") { // a second form of the command, not the first one's rest
					rest += " or " + more
				} else {
					rest += " " + more
				}
			}
			return rest
		}
	}
	return ""
}
