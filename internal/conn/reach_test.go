package conn

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A server that does not listen is unreachable (the worker waits for it); the error says where it looked.
func TestReach_NoServerListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	SetConnection(Connection{Address: addr})
	t.Cleanup(func() { SetConnection(Connection{}) })

	c, err := NewLazyClient("test", nil, nil, nil)
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

// An address the server could not be reached at is checked for the mistakes gRPC's words hide, each with the
// address to write; one that looks right gets no hint.
func TestAddressHint(t *testing.T) {
	defer func(f func(context.Context, string) ([]string, error)) { lookupHost = f }(lookupHost)
	lookupHost = func(_ context.Context, host string) ([]string, error) {
		if host == "temporal.example" {
			return []string{"10.0.0.1"}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	for address, want := range map[string]string{
		"localhost":                   "it has no port, so gRPC tried 443; a Temporal server listens on 7233 unless set otherwise: write localhost:7233",
		"http://localhost:7233":       "an address is host:port, with no scheme: write localhost:7233",
		"https://temporal.example/ns": "an address is host:port, with no scheme: write temporal.example:7233",
		"localhost:7233/":             "an address is host:port, with no path: write localhost:7233",
		"localhost:72333":             `"72333" is not a port: a port is a number from 1 to 65535`,
		"tempral.example:7233":        `the name "tempral.example" does not resolve (no such host): check its spelling, or give an IP address`,
		"temporal.example:7233":       "",
		"127.0.0.1:7233":              "",
		"[::1]:7233":                  "",
		"dns:///temporal:7233":        "",
	} {
		assert.Equal(t, want, addressHint(context.Background(), address), address)
	}
}

// The error of a dial to an address with no port says so, rather than only gRPC's refusal at port 443.
func TestReach_AnAddressWithNoPortSaysSo(t *testing.T) {
	SetConnection(Connection{Address: "127.0.0.1"})
	t.Cleanup(func() { SetConnection(Connection{}) })
	c, err := NewLazyClient("test", nil, nil, nil)
	require.NoError(t, err)
	defer c.Close()
	err = Reach(context.Background(), c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot reach the Temporal server at 127.0.0.1 (namespace default): it has no port, so gRPC tried 443")
	assert.Contains(t, err.Error(), "write 127.0.0.1:7233")
}

// gRPC's words for a failed TLS dial map to the setting that fixes it; a hang-up says the most it can, given
// whether the dial had TLS and a client certificate; any other failure gets no TLS hint.
func TestTLSHint(t *testing.T) {
	const preface = `connection error: desc = "error reading server preface: `
	for _, c := range []struct {
		err         string
		tlsOn, cert bool
		want        string
	}{
		{preface + `remote error: tls: certificate required"`, true, false, "the server asks for a client certificate"},
		{preface + `connection reset by peer"`, true, false, "the server asks for a client certificate"},
		{preface + `remote error: tls: unknown certificate authority"`, true, true, "the server refused this client's certificate"},
		{`write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe`, true, true, "the server hung up during the TLS handshake"},
		{`tls: failed to verify certificate: x509: certificate signed by unknown authority`, true, true, "TEMPORAL_TLS_SERVER_CA_CERT_PATH"},
		{`x509: certificate is valid for localhost, not temporal.example.com`, true, true, "TEMPORAL_TLS_SERVER_NAME"},
		{`tls: first record does not look like a TLS handshake`, true, false, "the server does not speak TLS"},
		{preface + `EOF"`, false, false, "turn TLS on with TEMPORAL_TLS=true"},
		{preface + `connection reset by peer"`, false, false, "turn TLS on with TEMPORAL_TLS=true"},
		{`dial tcp 127.0.0.1:7233: connect: connection refused`, false, false, ""},
		{`dial tcp 127.0.0.1:7233: connect: connection refused`, true, true, ""},
	} {
		got := tlsHint(errors.New(c.err), c.tlsOn, c.cert)
		if c.want == "" {
			assert.Empty(t, got, c.err)
		} else {
			assert.Contains(t, got, c.want, c.err)
		}
	}
}

// A server's refusal of a dial's credentials says to check the key given, or to give credentials when none
// were; any other failure gets no such hint.
func TestAuthHint(t *testing.T) {
	refused := errors.New("failed reaching server: rpc error: code = Unauthenticated desc = Request unauthorized.")
	assert.Contains(t, authHint(refused, true), "the server refused the API key: check TEMPORAL_API_KEY")
	assert.Contains(t, authHint(refused, false), "the server wants credentials")
	assert.Contains(t, authHint(status.Error(codes.PermissionDenied, "no"), true), "the server refused the API key")
	assert.Empty(t, authHint(errors.New("dial tcp 127.0.0.1:7233: connect: connection refused"), true))
}

// A dial to an address where something accepts connections and never answers (a server stopped with SIGSTOP,
// one whose database is down) says so, not "start one with make up".
func TestReach_SomethingListensButDoesNotAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() }) // the kernel takes connections into its backlog; nobody answers them
	SetConnection(Connection{Address: ln.Addr().String()})
	t.Cleanup(func() { SetConnection(Connection{}) })
	c, err := NewLazyClient("test", nil, nil, nil)
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = Reach(ctx, c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the server is up but did not answer in time: its database may be down or overloaded")
	assert.NotContains(t, err.Error(), "make up")
	assert.True(t, Unreachable(err), "a worker still waits for it: %v", err)
}
