package tests

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ensureTorch makes Debian's python3-torch importable by /usr/bin/python3, installing it when it is missing.
func ensureTorch(t *testing.T) {
	t.Helper()
	there := func() bool { return exec.Command("/usr/bin/python3", "-c", "import torch").Run() == nil }
	if there() {
		return
	}
	aptInstall(t, "python3-torch", "the PyTorch example", there)
	out, err := exec.Command("/usr/bin/python3", "-c", "import torch").CombinedOutput()
	require.NoError(t, err, "torch still not importable: %s", out)
}

func TestE2E_PyTorchDDPExample(t *testing.T) {
	ensureTorch(t)
	id := runID(t)
	r := cli(t, "run", "examples/pytorch-ddp/ddp.yaml", "--id", id)
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, `barrier "before-init" released (4 tasks)`)
	assert.Contains(t, r.stdout, `barrier "after-training" released (4 tasks)`)
	st, err := outcome(t, id)
	require.NoError(t, err)
	var res struct {
		FinalLoss float64   `json:"final_loss"`
		Weights   []float64 `json:"weights"`
		WorldSize int       `json:"world_size"`
	}
	require.NoError(t, json.Unmarshal(st.Task("master-0").Result, &res), string(st.Task("master-0").Result))
	assert.Equal(t, 4, res.WorldSize)
	assert.Less(t, res.FinalLoss, 0.01, "the model learned")
	require.Len(t, res.Weights, 3)
	assert.InDelta(t, 2.0, res.Weights[0], 0.1)
	// DDP keeps every rank's weights equal; each rank prints them.
	for _, w := range []string{"worker-0", "worker-1", "worker-2"} {
		assert.Contains(t, r.stdout, "["+w+"]", w)
	}
}
