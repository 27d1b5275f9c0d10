//go:build linux

package main

import (
	"bufio"
	"bytes"
	"os"
	"os/user"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The worker settings an operator copies from deployments/ are ones this worker takes: each flag and variable
// of the systemd unit and its environment file, and of the Kubernetes DaemonSet. (A renamed or misspelt one
// would stop the worker, or, before variables were checked, be taken for its default.)

// setEnvFile sets each NAME=VALUE line of an environment file, comments and blank lines left out.
func setEnvFile(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		require.True(t, ok, "%s: %q is not NAME=VALUE", path, line)
		t.Setenv(name, value)
	}
}

// asThisUser makes parseFlags find the shim and run tasks as the user running the test, who need not be the
// deployment's.
func asThisUser(t *testing.T) {
	me, err := user.Current()
	require.NoError(t, err)
	t.Setenv("CLUSTERRUN_WORKER_SHIM", shimBeside(t))
	t.Setenv("CLUSTERRUN_WORKER_RUN_AS", me.Username)
}

func TestDeployments_SystemdUnitAndEnvironmentFile(t *testing.T) {
	setEnvFile(t, "../../deployments/systemd/worker.env.example")
	asThisUser(t)
	unit, err := os.ReadFile("../../deployments/systemd/clusterrun-worker.service")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^ExecStart=(\S+)(.*)$`).FindSubmatch(unit)
	require.NotNil(t, m, "no ExecStart in the unit")
	assert.Equal(t, "/usr/local/bin/clusterrun-worker", string(m[1]))
	c, err := parseFlags(strings.Fields(string(m[2])))
	require.NoError(t, err)
	assert.Equal(t, "gpu-a", c.host)
	assert.Equal(t, []string{"gpus"}, c.pools)
	assert.Equal(t, 8, c.slots)
	assert.Equal(t, "json", c.logFormat)
	assert.Equal(t, 30*24*time.Hour, c.logRetention)
}

func TestDeployments_KubernetesDaemonSet(t *testing.T) {
	data, err := os.ReadFile("../../deployments/kubernetes/worker-daemonset.yaml")
	require.NoError(t, err)
	var container struct {
		Args []string `yaml:"args"`
		Env  []struct {
			Name string `yaml:"name"`
		} `yaml:"env"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []yaml.Node `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		require.NoError(t, dec.Decode(&doc), "no DaemonSet in the file")
		if doc.Kind == "DaemonSet" {
			require.Len(t, doc.Spec.Template.Spec.Containers, 1)
			require.NoError(t, doc.Spec.Template.Spec.Containers[0].Decode(&container))
			break
		}
	}
	// The pod's node name and IP, as the DaemonSet's fieldRefs give them.
	values := map[string]string{"CLUSTERRUN_WORKER_HOST": "node-1", "CLUSTERRUN_WORKER_ADDR": "10.1.2.3"}
	for _, e := range container.Env {
		v, ok := values[e.Name]
		require.True(t, ok, "the test has no value for %s", e.Name)
		t.Setenv(e.Name, v)
	}
	asThisUser(t)
	args := container.Args
	for i := range args {
		if i > 0 && args[i-1] == "--run-as" {
			args[i] = os.Getenv("CLUSTERRUN_WORKER_RUN_AS") // the image's task user, here the test's
		}
	}
	c, err := parseFlags(args)
	require.NoError(t, err)
	assert.Equal(t, "node-1", c.host)
	assert.Equal(t, "10.1.2.3", c.addr)
	assert.True(t, c.stopTasksOnExit)
	assert.Equal(t, []string{"/usr/bin/python3*", "/opt/train/bin/**"}, c.policy.Commands)
}
