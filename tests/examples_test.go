package tests

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The Go package's examples (starter/example_test.go: start, wait, results, logs, follow, wait with a timeout
// then cancel, status) run against the suite's server and host workers, their output checked by go test.
func TestE2E_GoPackageExamples(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^Example", "-v", "./starter")
	cmd.Dir = env.root
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.address)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range []string{"Example", "ExampleRun_Follow", "ExampleRun_Wait", "ExampleRun_Status"} {
		require.Contains(t, string(out), "--- PASS: "+name+" ", "%s", out)
	}

	// A plain go test (a fresh clone, no server) passes and starts no run anywhere: the examples are left out.
	plain := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "./starter")
	plain.Dir = env.root
	plain.Env = append(os.Environ(), "TEMPORAL_ADDRESS=127.0.0.1:1")
	out, err = plain.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), "=== RUN   Example", "%s", out)
}
