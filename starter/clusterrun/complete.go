package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/workflows"
)

// Shell completion. cobra's script calls `clusterrun __complete ARGS... WORD` at each TAB; completer answers
// from the command's own flag set (its flags, and the values of those that take one of a few) and, for the
// arguments that name something the server holds (a run, its tasks or types, a host), from the server over
// the connection the line gives so far. A server that does not answer within completionWait completes
// nothing: the shell must not hang.

// completionWait bounds a completion's calls to the server.
const completionWait = 2 * time.Second

// completionRuns is how many runs a RUN argument offers, newest first.
const completionRuns = 50

// runArgument lists the commands whose first argument is a run; live ones act only on a run still going, so
// they offer only those.
var runArgument = map[string]struct{ live bool }{
	"attach": {}, "status": {}, "logs": {}, "items": {},
	"stop": {live: true}, "cancel": {live: true}, "terminate-task": {live: true}, "start-task": {live: true},
}

// fileFlags take a file's path.
var fileFlags = []string{"codec-key-file", "config-file", "tls-cert-path", "tls-key-path", "tls-ca-path"}

const noFiles = cobra.ShellCompDirectiveNoFileComp

// completer completes one command's line.
func completer(c command) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		fs := flagSetOf(c)
		pos, pending := typedSoFar(fs, args)
		takeCodecKeyFile(fs)
		name, value, hasValue := strings.Cut(toComplete, "=")
		switch {
		case strings.HasPrefix(name, "-") && hasValue: // --output=js: the shell's script puts "--output=" back
			return flagValues(c.name, strings.TrimLeft(name, "-"), value)
		case pending != "":
			return flagValues(c.name, pending, toComplete)
		case strings.HasPrefix(toComplete, "-"):
			return flagNames(fs, toComplete), noFiles
		}
		return argValues(c.name, pos, toComplete)
	}
}

// typedSoFar sets the flags the line gives before the word being completed (so the connection flags reach
// dial) and returns its positional arguments, and the flag still waiting for its value, if any.
func typedSoFar(fs *flag.FlagSet, args []string) (pos []string, pending string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(pos, args[i+1:]...), ""
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		switch {
		case f == nil:
		case hasValue || isBoolFlag(f):
			_ = fs.Set(name, value) // a bad value completes as if unset
		case i+1 < len(args):
			_ = fs.Set(name, args[i+1])
			i++
		default:
			pending = name
		}
	}
	return pos, pending
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagNames are the command's long flags that begin with prefix, with their help's first line.
func flagNames(fs *flag.FlagSet, prefix string) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if name := "--" + f.Name; strings.HasPrefix(name, prefix) && len(f.Name) > 1 {
			names = append(names, name+"\t"+firstLine(f.Usage))
		}
	})
	sort.Strings(names)
	return names
}

// flagValues completes a flag of command's value: an output format, a run's state (a task's, for status and
// logs; an item's, for items), a file.
func flagValues(command, name, prefix string) ([]string, cobra.ShellCompDirective) {
	switch {
	case name == "o" || name == "output":
		return matching([]string{outTable, "text", outJSON, outJSONL}, prefix), noFiles
	case name == "state":
		var states []string
		switch command {
		case "status", "logs":
			states = slices.Clone(taskStateNames)
		case "items":
			states = slices.Clone(itemStateNames)
		default:
			for st := range listStates {
				states = append(states, st)
			}
			sort.Strings(states)
		}
		last := prefix[strings.LastIndex(prefix, ",")+1:] // --state Failed,Ti
		return withPrefix(prefix[:len(prefix)-len(last)], matching(states, last)), noFiles
	case slices.Contains(fileFlags, name):
		return nil, cobra.ShellCompDirectiveDefault
	}
	return nil, noFiles
}

// argValues completes a positional argument: spec files, task's subcommands, or what the server holds.
func argValues(command string, pos []string, prefix string) ([]string, cobra.ShellCompDirective) {
	switch {
	case command == "run" || command == "validate":
		return nil, cobra.ShellCompDirectiveDefault // the spec file
	case command == "task" && len(pos) == 0:
		return matching(taskSubcommands, prefix), noFiles
	case command == "drain" && len(pos) == 0:
		return fromServer(func(ctx context.Context, c client.Client) ([]string, error) { return hostNames(ctx, c) }, prefix)
	}
	arg, ok := runArgument[command]
	switch {
	case !ok:
		return nil, noFiles
	case len(pos) == 0:
		return fromServer(func(ctx context.Context, c client.Client) ([]string, error) { return runIDs(ctx, c, arg.live) }, prefix)
	case command == "terminate-task" && len(pos) == 1, command == "logs", command == "status":
		return fromServer(func(ctx context.Context, c client.Client) ([]string, error) {
			return taskCandidates(ctx, c, pos[0], pos[1:], command == "terminate-task")
		}, prefix)
	case command == "start-task" && len(pos) == 1:
		return fromServer(func(ctx context.Context, c client.Client) ([]string, error) { return taskTypes(ctx, c, pos[0]) }, prefix)
	}
	return nil, noFiles
}

// fromServer completes from what read finds on the server, within completionWait; nothing when it fails.
func fromServer(read func(context.Context, client.Client) ([]string, error), prefix string) ([]string, cobra.ShellCompDirective) {
	ctx, cancel := context.WithTimeout(context.Background(), completionWait)
	defer cancel()
	c, err := dial(ctx)
	if err != nil {
		return nil, noFiles
	}
	defer c.Close()
	words, err := read(ctx, c)
	if err != nil {
		return nil, noFiles
	}
	return matching(words, prefix), noFiles | cobra.ShellCompDirectiveKeepOrder
}

// runIDs are the newest runs (only those still going, when live), each with its name, state and start.
func runIDs(ctx context.Context, c client.Client, live bool) ([]string, error) {
	query := fmt.Sprintf("WorkflowType = '%s'", workflows.WorkflowType)
	if live {
		query += " AND ExecutionStatus = 'Running'"
	}
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: completionRuns})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range resp.GetExecutions() {
		state := runState(e.GetStatus(), payloadString(e.GetSearchAttributes().GetIndexedFields()[workflows.SearchAttrState]))
		ids = append(ids, fmt.Sprintf("%s\t%s, started %s", e.GetExecution().GetWorkflowId(), state,
			e.GetStartTime().AsTime().Local().Format("2006-01-02 15:04:05")))
	}
	return ids, nil
}

// taskCandidates are a run's tasks not yet typed (only those not yet ended, when live), each with its state and
// host.
func taskCandidates(ctx context.Context, c client.Client, runID string, typed []string, live bool) ([]string, error) {
	st, err := runOf(c, runID).Status(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range st.Tasks {
		if live && !slices.Contains([]string{workflows.TaskPending, workflows.TaskPlaced, workflows.TaskRunning, workflows.TaskUnreachable}, t.State) {
			continue
		}
		if slices.Contains(typed, t.Name) {
			continue
		}
		where := ""
		if t.Host != "" {
			where = " on " + t.Host
		}
		names = append(names, t.Name+"\t"+t.State+where)
	}
	return names, nil
}

// taskTypes are a run's task types.
func taskTypes(ctx context.Context, c client.Client, runID string) ([]string, error) {
	st, err := runOf(c, runID).Status(ctx)
	if err != nil {
		return nil, err
	}
	var types []string
	for _, t := range st.Tasks {
		if !slices.Contains(types, t.Type) {
			types = append(types, t.Type)
		}
	}
	return types, nil
}

// hostNames are the hosts in the registry, each with its state.
func hostNames(ctx context.Context, c client.Client) ([]string, error) {
	hosts, err := readHosts(ctx, c)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, h := range hosts {
		names = append(names, h.Host+"\t"+hostState(h))
	}
	return names, nil
}

// matching keeps the words (each "word\tdescription" or a bare word) that begin with prefix.
func matching(words []string, prefix string) []string {
	var out []string
	for _, w := range words {
		if strings.HasPrefix(w, prefix) {
			out = append(out, w)
		}
	}
	return out
}

// withPrefix puts prefix before each word, for a value completed after a list's comma.
func withPrefix(prefix string, words []string) []string {
	for i := range words {
		words[i] = prefix + words[i]
	}
	return words
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// describe, when on, makes parse hand the command's flag set over instead of parsing: flagSetOf uses it.
var describe struct {
	on bool
	fs *flag.FlagSet
}

var errDescribed = errors.New("flags described")

// flagSetOf is a command's flag set, got by running the command up to its parse; an empty one for a command
// that parses no flags of its own (task, whose subcommands do).
func flagSetOf(c command) *flag.FlagSet {
	describe.on = true
	defer func() { describe.on, describe.fs = false, nil }()
	if err := c.run(nil, io.Discard, io.Discard); !errors.Is(err, errDescribed) {
		return flag.NewFlagSet(c.name, flag.ContinueOnError)
	}
	return describe.fs
}

// takeCodecKeyFile uses the codec key file the line names (or CLUSTERRUN_CODEC_KEY_FILE gives), so that what
// the server holds reads as the command itself would read it.
func takeCodecKeyFile(fs *flag.FlagSet) {
	if f := codecKeyFile(fs); f != "" {
		conn.SetCodecKeyFile(f)
	}
}
