package conn

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deployments/cloud/temporal.toml.example loads, and each profile gives what docs/operations.md says: an API
// key (with TLS on), or a client certificate.
func TestCloudExampleProfiles(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	file := filepath.Join(filepath.Dir(here), "..", "..", "deployments", "cloud", "temporal.toml.example")
	for _, k := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_PROFILE", "TEMPORAL_TLS",
		"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_CONFIG_FILE"} {
		if v, ok := os.LookupEnv(k); ok {
			os.Unsetenv(k)
			t.Cleanup(func() { os.Setenv(k, v) })
		}
	}
	defer SetConnection(Connection{})

	SetConnection(Connection{ConfigFile: file, Profile: "cloud-apikey"})
	opts, err := Options()
	require.NoError(t, err)
	assert.Equal(t, "us-east-1.aws.api.temporal.io:7233", opts.HostPort)
	assert.Equal(t, "training.a1b2c", opts.Namespace)
	assert.NotNil(t, opts.Credentials, "the API key")
	assert.NotNil(t, opts.ConnectionOptions.TLS, "an API key turns TLS on")

	SetConnection(Connection{ConfigFile: file, Profile: "cloud-mtls"})
	_, err = Options()
	require.Error(t, err, "the example's certificate paths do not exist here")
	assert.Contains(t, err.Error(), "/etc/clusterrun/client.pem")
}
