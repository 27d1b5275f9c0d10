package starter_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain leaves the examples out of a plain `go test ./...`: they start runs on a real Temporal server with
// host workers, which a fresh clone does not have (each failed, "cannot reach the Temporal server"), and on a
// developer's own `make up` they would start runs there. tests/examples_test.go runs them on the end-to-end
// suite's server with -run '^Example'; any -run given is kept.
func TestMain(m *testing.M) {
	flag.Parse()
	if run := flag.Lookup("test.run"); run != nil && run.Value.String() == "" {
		_ = run.Value.Set("^(Test|Fuzz)")
	}
	os.Exit(m.Run())
}
