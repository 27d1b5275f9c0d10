package starter_test

// These examples run against a real Temporal server with host workers: tests/examples_test.go runs them
// (go test ./starter -run Example) on the end-to-end suite's server. A go test without -run leaves them out
// (main_test.go).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/starter"
)

// Start a run from a spec, wait for it, and read every task's result and one task's output.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The connection comes from the temporal CLI's config file and TEMPORAL_* variables, as for the CLI.
	c, err := starter.Dial(ctx, starter.Connection{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, err := spec.Parse([]byte(`
name: hello
command: [sh, -c, 'echo "hello from $CLUSTERRUN_TASK"; echo "{\"rank\": $RANK}" > "$CLUSTERRUN_RESULT_FILE"']
tasks: {worker: {replicas: 2}}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	run, err := c.Start(ctx, s, starter.StartOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := run.Wait(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(st.Status)
	results := starter.Results(st)
	fmt.Println(string(results["worker-0"]), string(results["worker-1"]))
	if err := run.Logs(ctx, starter.LogOptions{Tasks: []string{"worker-1"}}, os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// Succeeded
	// {"rank":0} {"rank":1}
	// hello from worker-1
}

// Follow a run's output as it goes: every line of stdout and stderr with its task's prefix, in the order
// written, then the final status.
func ExampleRun_Follow() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := starter.Dial(ctx, starter.Connection{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, _ := spec.Parse([]byte(`{name: steps, command: [sh, -c, 'echo "step 1"; sleep 1; echo "warning: loss went up" >&2; sleep 1; echo "step 2"'],
		tasks: {chief: {replicas: 1}}}`))
	run, err := c.Start(ctx, s, starter.StartOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := run.Follow(ctx, os.Stdout)
	fmt.Println(st.Status, err)
	// Output:
	// [chief-0] step 1
	// [chief-0] warning: loss went up
	// [chief-0] step 2
	// Succeeded <nil>
}

// Wait with a timeout, then cancel the run: every task is stopped, and the run ends Canceled.
func ExampleRun_Wait() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := starter.Dial(ctx, starter.Connection{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, _ := spec.Parse([]byte(`{name: long, stopGracePeriod: 1s, command: [sleep, "300"], tasks: {worker: {replicas: 2}}}`))
	run, err := c.Start(ctx, s, starter.StartOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	_, err = run.Wait(short)
	fmt.Println("timed out:", errors.Is(err, context.DeadlineExceeded))

	if err := run.Cancel(ctx); err != nil {
		fmt.Println(err)
		return
	}
	st, err := run.Wait(ctx)
	var failed *starter.RunError
	fmt.Println(st.Status, errors.As(err, &failed))

	var ended *starter.EndedError // nothing to cancel any more
	fmt.Println(errors.As(run.Cancel(ctx), &ended), ended.Status)
	// Output:
	// timed out: true
	// Canceled true
	// true Canceled
}

// Read a run's status while it runs (or after), by its ID.
func ExampleRun_Status() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := starter.Dial(ctx, starter.Connection{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	_, err = c.Run("no-such-run").Status(ctx)
	var none *starter.NoRunError
	fmt.Println(errors.As(err, &none), errors.As(c.Run("no-such-run").Stop(ctx, ""), &none))
	_, err = c.Run("").Status(ctx)
	fmt.Println(err)
	// Output:
	// true true
	// no run ID given: name a run (clusterrun list lists them)
}
