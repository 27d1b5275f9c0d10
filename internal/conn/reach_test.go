package conn

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A server that does not listen is unreachable (the worker waits for it); the error says where it looked.
func TestReach_NoServerListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	SetConnection(Connection{Address: addr})
	t.Cleanup(func() { SetConnection(Connection{}) })

	c, err := NewLazyClient("test", nil, nil)
	require.NoError(t, err, "a lazy client makes no contact")
	defer c.Close()
	err = Reach(context.Background(), c)
	require.Error(t, err)
	var re *ReachError
	require.True(t, errors.As(err, &re))
	assert.Contains(t, err.Error(), "cannot reach the Temporal server at "+addr)
	assert.True(t, Unreachable(err), "%v", err)
	t.Log(err)
}

func TestUnreachable_NotForARefusal(t *testing.T) {
	assert.False(t, Unreachable(errors.New("namespace default not found")))
}
