// Package starter drives clusterrun runs from Go programs, as MultiProcessRunner does from Python: start a run
// from a spec, follow its output, wait for it with a timeout, and read its status, every task's result and
// its logs. The clusterrun CLI (starter/clusterrun) is built on it.
//
// A Client connects as the temporal CLI does (the config file's profile, TEMPORAL_* variables, then the
// Connection fields); Start returns a Run, and Client.Run names one started elsewhere:
//
//	c, err := starter.Dial(ctx, starter.Connection{})
//	run, err := c.Start(ctx, spec, starter.StartOptions{})
//	st, err := run.Wait(ctx) // the final status; err is a *RunError unless the run succeeded
//	results := st.Results()
//
// Host workers (clusterrun-worker) must be running for the run's tasks to start.
package starter

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/clusterrun/clusterrun/internal/conn"
)

// Connection says where the Temporal server is, with the temporal CLI's flags' meanings. Empty fields leave
// what the temporal CLI's config file (Profile, ConfigFile) and TEMPORAL_* variables say; the default is
// localhost:7233, namespace default. CodecKeyFile encrypts payloads as the host workers do (docs/security.md).
type Connection struct {
	Address, Namespace, APIKey string
	Profile, ConfigFile        string
	TLS                        bool
	TLSCertPath, TLSKeyPath    string
	TLSCAPath, TLSServerName   string
	TLSDisableHostVerification bool
	CodecKeyFile               string
}

// Client starts and inspects runs. It is safe for concurrent use.
type Client struct {
	c         client.Client
	namespace string
	own       bool
}

// Dial connects to the Temporal server. Close the client when done.
func Dial(ctx context.Context, cn Connection) (*Client, error) {
	conn.SetConnection(conn.Connection{Address: cn.Address, Namespace: cn.Namespace, APIKey: cn.APIKey, Profile: cn.Profile,
		ConfigFile: cn.ConfigFile, TLS: cn.TLS, TLSCertPath: cn.TLSCertPath, TLSKeyPath: cn.TLSKeyPath, TLSCAPath: cn.TLSCAPath,
		TLSServerName: cn.TLSServerName, TLSDisableHostVerification: cn.TLSDisableHostVerification})
	if cn.CodecKeyFile != "" {
		conn.SetCodecKeyFile(cn.CodecKeyFile)
	}
	opts, err := conn.Options()
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	// The SDK's own log lines would interleave with the program's output; errors come back as values.
	quiet := log.NewStructuredLogger(slog.New(slog.DiscardHandler))
	c, err := conn.Dial(ctx, fmt.Sprintf("clusterrun@%s(pid %d)", host, os.Getpid()), quiet, nil)
	if err != nil {
		return nil, err
	}
	return &Client{c: c, namespace: opts.Namespace, own: true}, nil
}

// NewClient uses a Temporal client the program already has. Its data converter must be the one the host
// workers use (the SDK's default, or the clusterrun codec's).
func NewClient(c client.Client, namespace string) *Client {
	if namespace == "" {
		namespace = client.DefaultNamespace
	}
	return &Client{c: c, namespace: namespace}
}

// Temporal is the underlying Temporal client.
func (c *Client) Temporal() client.Client { return c.c }

// Namespace is the Temporal namespace runs are started in.
func (c *Client) Namespace() string { return c.namespace }

// Close closes the connection Dial opened (a client from NewClient stays open).
func (c *Client) Close() {
	if c.own {
		c.c.Close()
	}
}
