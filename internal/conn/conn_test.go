package conn

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

// Requests go uncompressed unless CLUSTERRUN_GRPC_COMPRESSION=gzip; anything else is refused by name.
func TestOptions_GrpcCompression(t *testing.T) {
	t.Setenv("CLUSTERRUN_GRPC_COMPRESSION", "")
	opts, err := Options()
	require.NoError(t, err)
	assert.IsType(t, &client.GrpcCompressionNone{}, opts.ConnectionOptions.GrpcCompression)

	t.Setenv("CLUSTERRUN_GRPC_COMPRESSION", "gzip")
	opts, err = Options()
	require.NoError(t, err)
	assert.IsType(t, &client.GrpcCompressionGzip{}, opts.ConnectionOptions.GrpcCompression)

	t.Setenv("CLUSTERRUN_GRPC_COMPRESSION", "zstd")
	_, err = Options()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `CLUSTERRUN_GRPC_COMPRESSION="zstd": want none (the default) or gzip`)
}
