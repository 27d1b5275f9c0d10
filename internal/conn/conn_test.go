package conn

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
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

// lines records what a logger was given, by level.
type lines struct{ debug, info []string }

func (l *lines) Debug(msg string, _ ...interface{}) { l.debug = append(l.debug, msg) }
func (l *lines) Info(msg string, _ ...interface{})  { l.info = append(l.info, msg) }
func (l *lines) Warn(string, ...interface{})        {}
func (l *lines) Error(string, ...interface{})       {}

// The SDK's note that an activity completed after its run ended is no news and goes to debug; its other
// failures stay at info, also through a logger the SDK tagged.
func TestSDKLogger_ACompletionAfterTheRunEndedIsDebug(t *testing.T) {
	got := &lines{}
	l := sdkLogger{got}.With("WorkerType", "ActivityWorker")
	l.Info(taskFailed, "Error", serviceerror.NewNotFound("workflow execution already completed"))
	l.Info(taskFailed, "Error", serviceerror.NewNotFound("activity task not found"))
	l.Info(taskFailed, "Error", errors.New("workflow execution already completed"))
	l.Info("Started Worker", "Namespace", "default")
	assert.Equal(t, []string{taskFailed}, got.debug)
	assert.Equal(t, []string{taskFailed, taskFailed, "Started Worker"}, got.info)
}
