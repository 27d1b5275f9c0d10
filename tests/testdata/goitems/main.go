// Command goitems exercises work items from Go (tests/items_test.go): the chief schedules 200 items and one
// that fails, joins, fetches; workers serve until they are stopped.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/clusterrun/clusterrun/task"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	c, err := task.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if os.Getenv("CLUSTERRUN_TASK_TYPE") == "worker" {
		err := c.Serve(ctx, map[string]task.Handler{
			"double": func(_ context.Context, args json.RawMessage) (any, error) {
				var xs []int
				if err := json.Unmarshal(args, &xs); err != nil {
					return nil, err
				}
				return 2 * xs[0], nil
			},
			"fail": func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("no such shard") },
		})
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	var items []task.NewItem
	for i := range 200 {
		items = append(items, task.NewItem{Fn: "double", Args: json.RawMessage("[" + strconv.Itoa(i) + "]")})
	}
	items = append(items, task.NewItem{Fn: "fail"})
	ids, err := c.Schedule(ctx, items...)
	must(err)
	joinErr := c.Join(ctx)
	again := c.Join(ctx)
	results, err := c.Fetch(ctx, ids...)
	must(err)
	wrong := 0
	for i, r := range results[:200] {
		if string(r.Result) != strconv.Itoa(2*i) {
			wrong++
		}
	}
	out, _ := json.Marshal(map[string]any{"scheduled": len(ids), "wrong": wrong, "join": fmt.Sprint(joinErr),
		"again": fmt.Sprint(again), "failed": results[200].Error})
	must(os.WriteFile(os.Getenv("CLUSTERRUN_RESULT_FILE"), out, 0o644))
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
