package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/spec"
)

// --env wins over the spec's env everywhere: at the run's level, and in a task type that sets the name itself.
func TestApplyEnv_WinsOverTheSpecsEnv(t *testing.T) {
	s, err := spec.Parse([]byte(`{name: envs, command: [x], env: {LR: "0.1", DATA: /d}, tasks: {chief: {replicas: 1}, worker: {replicas: 1, env: {LR: "0.5", OWN: "1"}}}}`))
	require.NoError(t, err)
	require.NoError(t, applyEnv(s, envFlags{"LR=0.01", "EPOCHS=3", "EPOCHS=4"}))
	assert.Equal(t, map[string]string{"LR": "0.01", "DATA": "/d", "EPOCHS": "4"}, s.Env, "the last of a name given twice wins")
	assert.Equal(t, map[string]string{"LR": "0.01", "OWN": "1"}, s.Tasks["worker"].Env)
	assert.Nil(t, s.Tasks["chief"].Env)

	err = applyEnv(s, envFlags{"RANK=3"})
	assert.ErrorContains(t, err, "the spec with --env is not valid:\n  env.RANK: RANK is set by clusterrun")
}

func TestRunEnvFlag_WantsNameEqualsValue(t *testing.T) {
	for _, bad := range []string{"LR", "=3"} {
		var out, errb bytes.Buffer
		assert.Equal(t, exitUsage, mainWithCode([]string{"run", "spec.yaml", "--env", bad}, &out, &errb), bad)
		assert.Contains(t, errb.String(), "want NAME=VALUE, e.g. --env LR=0.01", bad)
	}
}

// validate's --env prints, and takes no value: one given as run's --env takes it is named, with run's.
func TestValidateEnv_AValueIsPointedToRun(t *testing.T) {
	for _, args := range [][]string{{"validate", "s.yaml", "--env", "LR=0.1"}, {"validate", "s.yaml", "--env=LR=0.1"}} {
		var out, errb bytes.Buffer
		assert.Equal(t, exitUsage, mainWithCode(args, &out, &errb), args)
		assert.Contains(t, errb.String(), `validate's --env takes no value (it prints each task type's env), so "LR=0.1" cannot be set here; clusterrun run SPEC --env LR=0.1 sets it`, args)
	}
}
