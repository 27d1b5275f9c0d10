// Command goitemsrestart is the chief of tests/items_test.go's restart test, in Go: it schedules ITEMS
// "square" items, writes its pid to MARK_DIR/joining and fetches them all. Its result: how many results it
// got, and the first wrong or failed ones. The workers and the flood task are items_restart.py.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/clusterrun/clusterrun/task"
)

func main() {
	ctx := context.Background()
	c, err := task.New()
	must(err)
	n, err := strconv.Atoi(os.Getenv("ITEMS"))
	must(err)
	var items []task.NewItem
	for i := range n {
		items = append(items, task.NewItem{Fn: "square", Args: json.RawMessage("[" + strconv.Itoa(i) + "]")})
	}
	ids, err := c.Schedule(ctx, items...)
	must(err)
	mark := os.Getenv("MARK_DIR")
	must(os.WriteFile(filepath.Join(mark, "joining.tmp"), []byte(strconv.Itoa(os.Getpid())), 0o644))
	must(os.Rename(filepath.Join(mark, "joining.tmp"), filepath.Join(mark, "joining")))
	results, err := c.Fetch(ctx, ids...)
	must(err)
	wrong := []string{}
	for i, r := range results {
		if string(r.Result) != strconv.Itoa(i*i) && len(wrong) < 5 {
			wrong = append(wrong, fmt.Sprintf("item %d: %s %s", i, r.Result, r.Error))
		}
	}
	out, err := json.Marshal(map[string]any{"results": len(results), "wrong": wrong})
	must(err)
	must(os.WriteFile(os.Getenv("CLUSTERRUN_RESULT_FILE"), out, 0o644))
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
