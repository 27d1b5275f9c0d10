package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sys/unix"

	"github.com/clusterrun/clusterrun/internal/codec"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/starter"
	"github.com/clusterrun/clusterrun/workflows"
)

const runUsage = `Start a run from a YAML or JSON spec and follow it.

Usage: clusterrun run SPEC [--id ID] [--env NAME=VALUE]... [--detach] [-o table|json|jsonl]

SPEC is a file, or - for standard input. Streams every task's output with a [task] prefix, prints the result
table (with -o json or jsonl: the tasks' output goes to stderr and the final status, as JSON, alone to stdout), and
exits with 0 on success, the chief's (or else the first failed task's) exit code on failure, 124 on
maxRunTime, 130 when canceled, and 2 for an invalid spec or usage error. Ctrl-C asks whether to cancel the run
or detach from it (without a terminal, Ctrl-C cancels); 'clusterrun attach RUN' follows a detached run again.
A hang-up (the terminal closed) detaches with 129. A reader of the output that leaves (| head) ends neither
the run nor this command, which follows the run to its end and exits with its code. --env NAME=VALUE sets a
variable over the spec's env, at the run's level and in every task type that sets it, as if the spec said so
(the run's input in the Web UI shows it).

Example:
  clusterrun run examples/demo.yaml
  clusterrun run train.yaml --id mnist-42 --detach
  clusterrun run train.yaml --env LR=0.01 --env EPOCHS=3
  render-spec | clusterrun run -
`

func cmdRun(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	id := fs.String("id", "", "run ID (the workflow ID); default NAME-TIMESTAMP-RANDOM")
	detach := fs.Bool("detach", false, "start the run and return at once")
	var envs envFlags
	fs.Var(&envs, "env", "set NAME=VALUE in every task's environment, over the spec's env (repeatable)")
	output, checkOutput := addOutputFlag(fs)
	pos, err := parse(fs, runUsage, args, 1, 1, stderr)
	if err != nil {
		return err
	}
	if err := checkOutput(); err != nil {
		return err
	}
	s, err := loadSpec(pos[0])
	if err != nil {
		return err
	}
	if err := applyEnv(s, envs); err != nil {
		return err
	}
	if *id != "" {
		if err := spec.CheckRunID(*id); err != nil {
			return usageErrorf("--id: %v", err)
		}
	}
	if *id == "" {
		*id = starter.NewRunID(s.Name)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// A Ctrl-C or SIGTERM from here on is the follower's to answer (it cancels the run this command started):
	// one that came during the start, or before the follower began, ended the command and left the run going.
	var sigs chan os.Signal
	if !*detach {
		sigs = make(chan os.Signal, 2)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		defer signal.Stop(sigs)
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()

	if err := startRun(ctx, c, *id, s); err != nil {
		return err
	}
	if n := countTasks(s); n == 1 {
		fmt.Fprintf(stderr, "run %s started (1 task)\n", *id)
	} else {
		fmt.Fprintf(stderr, "run %s started (%d tasks)\n", *id, n)
	}
	if link := uiLink(*id); link != "" {
		fmt.Fprintf(stderr, "Web UI: %s\n", link)
	}
	if *detach {
		fmt.Fprintf(stderr, "follow it with: clusterrun attach %s\n", *id)
	}
	if *detach && isJSON(*output) {
		return printJSON(stdout, *output, map[string]string{"runId": *id})
	}
	if *detach {
		fmt.Fprintf(stdout, "%s\n", *id)
		return nil
	}
	if isJSON(*output) {
		// The tasks' output goes to stderr; stdout gets the final status alone, for scripts.
		return followRun(ctx, c, *id, stderr, stderr, &jsonTo{stdout, *output}, following{owner: true, sigs: sigs})
	}
	return followRun(ctx, c, *id, stdout, stderr, nil, following{owner: true, sigs: sigs})
}

func countTasks(s *spec.RunSpec) int {
	n := 0
	for _, t := range s.Tasks {
		n += t.Replicas
	}
	return n
}

// startRun starts the run through the library; a namespace without clusterrun's search attributes gets a note.
func startRun(ctx context.Context, c client.Client, id string, s *spec.RunSpec) error {
	_, err := runOf(c, id).Client().Start(ctx, s, starter.StartOptions{ID: id, Notes: os.Stderr})
	var missing *starter.SearchAttributesMissingError
	if errors.As(err, &missing) {
		fmt.Fprintln(os.Stderr, "note: "+err.Error())
		return nil
	}
	return cliError(err)
}

// following says how followRun follows a run: the command that started it (owner), or one that attached to it
// later, showing the last tail lines each task had written by then (first: the run's status then).
type following struct {
	owner bool
	sigs  chan os.Signal // the signals the command caught before it followed, if it did (else followRun's own)
	tail  int
	since int64 // with first: each stream's earlier output is shown from then (unix nanoseconds), if set
	first *workflows.RunStatus
}

// readerGone is what a command that follows run id says once its output's reader is gone: it follows the run
// on to its end, or, attached to a run that had ended already (first), only says how it ended.
func readerGone(id string, first *workflows.RunStatus) string {
	if first != nil && runEnded(first.Status) {
		return fmt.Sprintf("clusterrun: the output's reader is gone; run %s had ended (%s), and this command exits with "+
			"its code. The output: clusterrun logs %s", id, first.Status, id)
	}
	return fmt.Sprintf("clusterrun: the output's reader is gone; run %s is followed to its end without it, and this "+
		"command exits with the run's code (Ctrl-C to cancel or detach). The output: clusterrun logs %s", id, id)
}

// runEnded says whether a run's status is one it ends with.
func runEnded(status string) bool {
	switch status {
	case workflows.StatusSucceeded, workflows.StatusFailed, workflows.StatusCanceled, workflows.StatusTimedOut:
		return true
	}
	return false
}

// followRun streams output until the run ends, handling Ctrl-C, then prints the result. Ctrl-C asks, on a
// terminal, whether to cancel the run or detach; without one, it cancels a run this command started (as srun
// does) and leaves one it attached to. A hang-up (SIGHUP: the terminal closed, an SSH session dropped)
// always detaches: the run is not the terminal's, and goes on.
func followRun(ctx context.Context, c client.Client, id string, stdout, stderr io.Writer, jsonOut *jsonTo, how following) error {
	sigs := how.sigs
	if sigs == nil {
		sigs = make(chan os.Signal, 2)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		defer signal.Stop(sigs)
	}
	// With SIGPIPE notified, a write to a closed pipe fails with EPIPE instead of ending the program: kept for
	// the rest of the command, so that its last words cannot end it either.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	var said sync.Once
	gone := func() {
		said.Do(func() { fmt.Fprintln(stderr, readerGone(id, how.first)) })
	}
	stdout = &closedOutput{w: stdout, gone: gone}
	if jsonOut != nil {
		jsonOut = &jsonTo{w: &closedOutput{w: jsonOut.w, gone: gone}, format: jsonOut.format}
	}

	type outcome struct {
		st  workflows.RunStatus
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		st, err := result(ctx, c, id)
		done <- outcome{st, err}
	}()

	f := newFollower(c, id, stdout)
	f.inOrder, f.redraws, f.patience = true, true, livePatience
	defer f.close()
	notes := stderr
	if isTerminal(os.Stdout) {
		// On a terminal, progress is a block of bars under the scrolling output; notes show above it too.
		f.block = newLiveBlock(stdout, int(os.Stdout.Fd()), "clusterrun status "+id+" shows each task's progress")
		f.out, f.notes = f.block, f.block
		notes = f.block.above(stderr)
		defer f.block.close()
	}
	if how.first != nil {
		f.tail, f.since = how.tail, how.since
		f.update(*how.first)
		f.tailDone()
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	canceling := false
	reads, logReads := newPatience(id, notes, c), newPatience(id, notes, c)
	// A cancel no worker takes up is said once (sayIfUntaken), while the loop may wait on a read of the run that
	// no worker answers either: notes take writes from any goroutine (a live block's are locked).
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	for {
		select {
		case o := <-done:
			// The run's end is a read of it too: a follow that said it could not read the run says it can again,
			// also when the run ended before its next look (a run that ends within half a second of a server
			// outage's end left the outage's note without its answer).
			reads.seen(nil, "")
			// Read what the tasks wrote last; the result names every task's host and final attempt.
			f.update(o.st)
			if err := drainOrInterrupt(ctx, f, logReads, sigs); err != nil {
				fmt.Fprintln(notes, "clusterrun: "+err.Error())
			}
			f.clearBlock()
			return report(o.st, o.err, id, stdout, jsonOut)
		case sig := <-sigs:
			f.clearBlock()
			if sig == syscall.SIGHUP {
				// Said to a terminal that may be gone: a write that fails is no news.
				fmt.Fprintf(stderr, "hung up: detached; run %s goes on. Follow it again with: clusterrun attach %s\n", id, id)
				return &exitError{code: exitHangUp}
			}
			if canceling {
				// Tasks that ignore SIGTERM hold the stop for their stopGracePeriod, up to an hour: a second
				// Ctrl-C leaves the stop to the run and gives the terminal back.
				if sig == syscall.SIGTERM {
					continue
				}
				fmt.Fprintf(stderr, "detached; run %s is still stopping its tasks (each gets SIGKILL after stopGracePeriod). "+
					"Follow it again with: clusterrun attach %s\n", id, id)
				return &exitError{code: 130}
			}
			asked := isTerminal(os.Stdin) && sig != syscall.SIGTERM
			if (!asked && how.owner) || (asked && askCancel(id, sigs, stderr)) {
				canceling = true
				fmt.Fprintf(stderr, "\ncanceling run %s: stopping every task (Ctrl-C again to detach; the stop goes on)...\n", id)
				if err := c.CancelWorkflow(ctx, id, ""); err != nil {
					return fmt.Errorf("cancel run %s: %w", id, err)
				}
				go sayIfUntaken(watchCtx, c, id, "run", notes)
				continue
			}
			fmt.Fprintf(stderr, "detached; run %s goes on. Follow it again with: clusterrun attach %s\n", id, id)
			if !asked {
				return &exitError{code: exitCanceled} // interrupted, as a command that a signal ends
			}
			return nil
		case <-tick.C:
			var st live
			var ended bool
			err := reads.watched(ctx, followingOn, func() (err error) {
				st, ended, _, err = fetchStatus(ctx, c, id)
				return err
			})
			// A server outage, say: the run goes on, and so does following it.
			reads.seen(err, followingOn)
			if err != nil || ended {
				continue
			}
			f.update(withHostNotes(st.RunStatus, st.Heartbeats))
			f.progress(st.Heartbeats)
			// Read on while output keeps coming, for up to a second, then look at the run again.
			const outputLater = "the tasks' output is shown again once it can be read"
			for start := time.Now(); time.Since(start) < time.Second; {
				var got bool
				err := logReads.watched(ctx, outputLater, func() (err error) {
					got, err = f.poll(ctx)
					return err
				})
				logReads.seen(err, outputLater)
				if !got || err != nil {
					break
				}
			}
		}
	}
}

// drainOrInterrupt reads the ended run's last output (f.drain, which rides out reads that fail for now with p)
// until a signal on sigs says to stop waiting for it: the run has ended, and only its output is left to show.
func drainOrInterrupt(ctx context.Context, f *follower, p *patience, sigs <-chan os.Signal) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	interrupted := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			close(interrupted)
			cancel()
		case <-ctx.Done():
		}
	}()
	err := f.drain(ctx, p)
	select {
	case <-interrupted:
		return fmt.Errorf("the rest of run %s's output was not read (interrupted); clusterrun logs %[1]s shows it", f.runID)
	default:
		return err
	}
}

// askCancel asks on the terminal whether to cancel the run (true) or detach (false). A second Ctrl-C cancels.
func askCancel(id string, sigs <-chan os.Signal, stderr io.Writer) bool {
	fmt.Fprintf(stderr, "\nCancel run %s? [y] cancel it and stop every task, [n] detach and leave it running: ", id)
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		answer <- strings.ToLower(strings.TrimSpace(line))
	}()
	select {
	case a := <-answer:
		return a == "y" || a == "yes"
	case <-sigs:
		return true
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlReadTermios)
	return err == nil
}

// report prints the end of a run and returns the CLI's exit code as an error.
func report(st workflows.RunStatus, err error, id string, stdout io.Writer, jsonOut *jsonTo) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == workflows.ErrInvalidSpec {
		return usageErrorf("run %s rejected its spec: %s", id, appErr.Message())
	}
	if st.Status == "" {
		if err != nil && strings.Contains(err.Error(), "encoding "+codec.Encoding+": "+converter.ErrEncodingIsNotSupported.Error()) {
			return fmt.Errorf("run %s failed: its host workers cannot read its encrypted input; start them with the key file this CLI "+
				"uses (--codec-key-file or %s)", id, codec.EnvKeyFile)
		}
		if err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		return fmt.Errorf("run %s ended without a result", id)
	}
	if jsonOut != nil {
		if err := jsonOut.print(st); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout)
		printEnd(stdout, id, st)
		printItemCounts(stdout, st.Items)
		fmt.Fprintf(stdout, "\nrun %s %s: %s\n", id, st.Status, st.Reason)
	}
	if code := exitCodeFor(st); code != 0 {
		return &exitError{code: code}
	}
	return nil
}
