package tests

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With a codec key file on the workers and the CLI, the server's history holds no plaintext of a spec's env, every
// clusterrun command still works (run with its barrier, status, list, logs), a client without the key is told
// why it cannot read the run, and the Web UI shows the run's input through `clusterrun codec-server`.
func TestE2E_EncryptedPayloads(t *testing.T) {
	chromium := ensureChromium(t)
	keys := filepath.Join(t.TempDir(), "codec.keys")
	gen := cli(t, "codec-key", "k1")
	require.Equal(t, 0, gen.code, gen.String())
	require.NoError(t, os.WriteFile(keys, []byte(gen.stdout), 0o600))

	codecPort, err := freeTCPPort()
	require.NoError(t, err)
	uiPort, err := freeTCPPort()
	require.NoError(t, err)
	uiOrigin := fmt.Sprintf("http://127.0.0.1:%d", uiPort)
	codecURL := fmt.Sprintf("http://127.0.0.1:%d", codecPort)
	server := exec.Command(filepath.Join(env.bin, "clusterrun"), "codec-server", "--listen", fmt.Sprintf("127.0.0.1:%d", codecPort),
		"--cors-origin", uiOrigin, "--codec-key-file", keys)
	serverOut := &strings.Builder{}
	server.Stdout, server.Stderr = serverOut, serverOut
	codecServer, err := startOwned(server)
	require.NoError(t, err)
	defer func() { _ = codecServer.cmd.Process.Kill(); <-codecServer.done }()

	c := isolatedWith(t, func(s *devServer) {
		s.uiPort = uiPort
		s.uiCodec = codecURL
	})
	require.NoError(t, c.startWorker("host-e", "--codec-key-file", keys))
	withKey := []string{"TEMPORAL_ADDRESS=" + c.address, "CLUSTERRUN_CODEC_KEY_FILE=" + keys}

	secret := "hush-" + randomHex(12)
	id := runID(t)
	spec := writeSpec(t, `{name: sealed, env: {SEALED_TOKEN: `+secret+`}, stopGracePeriod: 2s, tasks: {chief: {replicas: 1}, worker: {replicas: 1}},
 command: [sh, -c, 'clusterrun task barrier ready && test "$SEALED_TOKEN" = `+secret+` && echo "token ok on $CLUSTERRUN_TASK"; clusterrun task progress 1 1']}`)
	r := c.cliEnv(t, withKey, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "token ok on chief-0", "the barrier and the task's env work with encryption on")
	assert.Contains(t, r.stdout, "token ok on worker-0")

	st := c.cliEnv(t, withKey, "status", id)
	assert.Equal(t, 0, st.code, st.String())
	assert.Contains(t, st.stdout, "Succeeded")
	list := c.cliEnv(t, withKey, "list")
	assert.Equal(t, 0, list.code, list.String())
	assert.Contains(t, list.stdout, id)
	assert.Contains(t, list.stdout, "sealed", "the run's name, from its encrypted memo")
	logs := c.cliEnv(t, withKey, "logs", id)
	assert.Equal(t, 0, logs.code, logs.String())
	assert.Contains(t, logs.stdout, "token ok on worker-0")

	noKey := c.cliEnv(t, []string{"TEMPORAL_ADDRESS=" + c.address, "CLUSTERRUN_CODEC_KEY_FILE="}, "status", id)
	assert.NotEqual(t, 0, noKey.code, noKey.String())
	assert.Contains(t, noKey.stderr, "--codec-key-file", "a client without the key is told what it lacks")

	// Host workers without the key (the suite's own) cannot read a run this CLI encrypted: the run fails, saying why.
	mismatch := cliEnv(t, []string{"TEMPORAL_ADDRESS=" + env.address, "CLUSTERRUN_CODEC_KEY_FILE=" + keys}, "run", writeSpec(t, `{name: no-key, command: [sleep, "300"], tasks: {worker: {replicas: 1}}}`))
	assert.Equal(t, 1, mismatch.code, mismatch.String())
	assert.Contains(t, mismatch.stderr, "its host workers cannot read its encrypted input; start them with the key file this CLI uses")

	// The server's own record of the run: no plaintext, and no base64 of it either, at any alignment.
	raw, err := exec.Command(filepath.Join(env.root, "bin", "temporal"), "workflow", "show", "-o", "json", "--address", c.address,
		"--workflow-id", id).CombinedOutput()
	require.NoError(t, err, "%s", raw)
	history := string(raw)
	assert.Contains(t, history, base64.StdEncoding.EncodeToString([]byte("binary/encrypted")), "payloads are encrypted")
	assert.NotContains(t, history, secret)
	for k := 0; k < 3; k++ {
		enc := base64.StdEncoding.EncodeToString([]byte(secret)[k:])
		assert.NotContains(t, history, enc[:len(enc)-4])
	}

	// The Web UI shows the run's input decoded, through the codec server.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	desc, err := c.client.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	browser, closeBrowser := newBrowser(ctx, t, chromium)
	defer closeBrowser()
	page := fmt.Sprintf("%s/namespaces/default/workflows/%s/%s/history", uiOrigin, id, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId())
	_, err = chromedp.Run(browser, chromedp.Navigate(page))
	require.NoError(t, err, "open %s", page)
	_, err = chromedp.Run(browser, chromedp.Poll[bool](fmt.Sprintf(`document.body && document.body.innerText.includes(%q)`, secret),
		chromedp.WithPollingTimeout(60*time.Second)))
	if err != nil {
		text, _ := chromedp.Run(browser, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("the Web UI did not show the decoded input on %s: %v\ncodec server: %s\npage text:\n%s", page, err, serverOut, clipText(text, 3000))
	}
	shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	out := filepath.Join(env.root, "out")
	require.NoError(t, os.MkdirAll(out, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(out, "webui-decoded-input.png"), shot, 0o644))
}
