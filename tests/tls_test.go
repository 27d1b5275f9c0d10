package tests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
)

// A server that takes mutual TLS only, as Temporal Cloud's mTLS namespaces do, is reached by the host workers
// and the CLI with the credentials operations.md gives them: TEMPORAL_TLS_* in the environment (a worker's
// worker.env), or a temporal.toml profile picked with TEMPORAL_PROFILE. A run starts, runs and reads its logs
// back through it. Each TLS mistake is refused, the CLI's and a worker's, naming the setting to change. The TLS ends
// at a proxy in front of the cluster's server, as an operator's load balancer would end it, which takes only
// certificates its own CA signed.
func TestE2E_MutualTLS(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	pki := newTestPKI(t)
	px := newProxyOn(t, tls.NewListener(listenLocal(t), pki.serverConfig()), c.address)
	c.workerVars = []string{"TEMPORAL_TLS_CLIENT_CERT_PATH=" + pki.clientCert, "TEMPORAL_TLS_CLIENT_KEY_PATH=" + pki.clientKey,
		"TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + pki.caCert}
	require.NoError(t, c.startWorkerVia("tls-host", px.addr()))
	viaEnv := append([]string{"TEMPORAL_ADDRESS=" + px.addr()}, c.workerVars...)

	id := runID(t)
	spec := writeSpec(t, `{name: mtls, command: [sh, -c, 'echo "hello from $CLUSTERRUN_TASK"'], tasks: {worker: {replicas: 2, hosts: [tls-host]}}}`)
	r := c.cliEnv(t, viaEnv, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "hello from worker-1")
	r = c.cliEnv(t, viaEnv, "logs", id, "--tasks", "worker-0")
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "hello from worker-0")

	profile := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(profile, []byte(fmt.Sprintf(`[profile.mtls]
address = %q
namespace = "default"

[profile.mtls.tls]
client_cert_path = %q
client_key_path = %q
server_ca_cert_path = %q
`, px.addr(), pki.clientCert, pki.clientKey, pki.caCert)), 0o600))
	r = c.cliEnv(t, []string{"-TEMPORAL_ADDRESS", "TEMPORAL_CONFIG_FILE=" + profile, "TEMPORAL_PROFILE=mtls"}, "status", id)
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "Succeeded")

	// Each TLS mistake is refused, saying which setting to change.
	other := newTestPKI(t)
	for _, m := range []struct {
		what string
		vars []string
		want string
	}{
		{"no client certificate", []string{"TEMPORAL_ADDRESS=" + px.addr(), "TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + pki.caCert},
			"the server asks for a client certificate (mutual TLS): give one with TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH"},
		{"no TLS", []string{"TEMPORAL_ADDRESS=" + px.addr()},
			"the server hung up before it said anything, as one that takes only TLS does: if it does (Temporal Cloud does), turn TLS on with TEMPORAL_TLS=true"},
		{"a certificate of another CA", []string{"TEMPORAL_ADDRESS=" + px.addr(), "TEMPORAL_TLS_CLIENT_CERT_PATH=" + other.clientCert,
			"TEMPORAL_TLS_CLIENT_KEY_PATH=" + other.clientKey, "TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + pki.caCert},
			// The server's alert, or its hang-up when the client's side of the handshake ended first (TLS 1.3).
			"certificate: give one signed by a CA the server (or its namespace) trusts"},
		{"the server's CA not named", []string{"TEMPORAL_ADDRESS=" + px.addr(), "TEMPORAL_TLS_CLIENT_CERT_PATH=" + pki.clientCert,
			"TEMPORAL_TLS_CLIENT_KEY_PATH=" + pki.clientKey},
			"the server's certificate is not signed by a CA this machine trusts: name the CA that signed it with TEMPORAL_TLS_SERVER_CA_CERT_PATH"},
		{"another server name", append(viaEnv, "TEMPORAL_TLS_SERVER_NAME=temporal.example.com"),
			"the server's certificate is for another name: set TEMPORAL_TLS_SERVER_NAME (--tls-server-name)"},
		{"TLS to a server without it", append([]string{"TEMPORAL_ADDRESS=" + c.address}, c.workerVars...),
			"the server does not speak TLS: turn TLS off"},
	} {
		r := c.cliEnv(t, m.vars, "status", id)
		assert.Equal(t, 1, r.code, m.what)
		assert.Contains(t, r.stderr, m.want, m.what)
	}
	// So is a host worker's, which then exits 2 (it has no task to keep).
	c.workerVars = []string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + pki.caCert}
	w, logPath, _, err := c.launchWorker("no-cert", px.addr())
	require.NoError(t, err)
	waitUntil(t, "the worker without a certificate to exit", time.Minute, w.exited)
	assert.Equal(t, 2, w.cmd.ProcessState.ExitCode())
	b, _ := os.ReadFile(logPath)
	assert.Contains(t, string(b), "the server asks for a client certificate (mutual TLS)")
}

// An API key in TEMPORAL_API_KEY, the way Temporal Cloud takes one, reaches the server from the host workers
// and the CLI, over TLS that the key turns on by itself: a run starts and runs. A wrong key, or none, is
// refused, the CLI's and a worker's, saying to check the key. The key is checked by a TLS-ending proxy in front of the cluster's server,
// which passes on only the calls that carry it, as Cloud's front end does; the tasks never see it.
func TestE2E_APIKey(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	pki := newTestPKI(t)
	const key = "test-key-4f1c"
	addr := newAPIKeyProxy(t, c.address, pki, key)
	c.workerVars = []string{"TEMPORAL_API_KEY=" + key, "TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + pki.caCert}
	require.NoError(t, c.startWorkerVia("key-host", addr))
	viaEnv := append([]string{"TEMPORAL_ADDRESS=" + addr}, c.workerVars...)

	id := runID(t)
	spec := writeSpec(t, `{name: apikey, command: [sh, -c, 'echo "key seen: [${TEMPORAL_API_KEY:-none}]"'], tasks: {worker: {replicas: 1, hosts: [key-host]}}}`)
	r := c.cliEnv(t, viaEnv, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "key seen: [none]", "a task sees no key of its worker's")

	for _, m := range []struct{ what, key, want string }{
		{"a wrong key", "wrong-key", "the server refused the API key: check TEMPORAL_API_KEY (--api-key, or a profile's api_key)"},
		{"no key", "", "the server wants credentials: give an API key with TEMPORAL_API_KEY"},
	} {
		r := c.cliEnv(t, []string{"TEMPORAL_ADDRESS=" + addr, "TEMPORAL_API_KEY=" + m.key, "TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + pki.caCert}, "status", id)
		assert.Equal(t, 1, r.code, m.what)
		assert.Contains(t, r.stderr, m.want, m.what)
		assert.NotContains(t, r.stderr, "make up", m.what)
	}
	good := c.workerVars
	c.workerVars = []string{"TEMPORAL_API_KEY=wrong-key-93a1", "TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + pki.caCert}
	w, logPath, _, err := c.launchWorker("bad-key-host", addr)
	require.NoError(t, err)
	waitUntil(t, "the worker with a wrong key to exit", time.Minute, w.exited)
	assert.Equal(t, 2, w.cmd.ProcessState.ExitCode(), "it has no task to keep")
	b, _ := os.ReadFile(logPath)
	assert.Contains(t, string(b), "the server refused the API key")
	assert.NotContains(t, string(b), "wrong-key-93a1", "the worker's log does not show the key")

	// A worker upgraded with a wrong key keeps the tasks it takes up, saying what to fix, until one with the
	// right key takes over: the run goes on as if nothing had happened.
	dir := t.TempDir()
	id = runID(t)
	spec = writeSpec(t, fmt.Sprintf(`{name: apikey-upgrade, command: [sh, -c, 'echo $$ > %s/pid; while [ ! -e %s/go ]; do sleep 0.1; done'],
  tasks: {worker: {replicas: 1, hosts: [key-host]}}}`, dir, dir))
	require.Equal(t, 0, c.cliEnv(t, viaEnv, "run", spec, "--id", id, "--detach").code)
	pid := int(readInt(t, filepath.Join(dir, "pid"), time.Minute))
	c.stopWorker("key-host", syscall.SIGTERM)
	w, logPath, _, err = c.launchWorker("key-host", addr)
	require.NoError(t, err)
	waitUntil(t, "the worker with a wrong key to keep its task and say why", time.Minute, func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "this worker keeps this host's tasks") && strings.Contains(string(b), "the server refused the API key") || w.exited()
	})
	require.False(t, w.exited(), "the worker gave its task up")
	assert.True(t, alive(pid), "the task died with its worker's wrong key")
	c.stopWorker("key-host", syscall.SIGTERM)
	c.workerVars = good
	require.NoError(t, c.startWorkerVia("key-host", addr))
	touch(t, filepath.Join(dir, "go"))
	r = c.cliEnv(t, viaEnv, "attach", id)
	assert.Equal(t, 0, r.code, r.String())
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Task("worker-0").Attempt, "the same attempt ran throughout")
}

// newAPIKeyProxy ends TLS with the PKI's server certificate and passes to target (a plaintext gRPC server) only
// the calls whose authorization header is "Bearer key"; the others are answered UNAUTHENTICATED, as Temporal
// Cloud answers them. It returns its address.
func newAPIKeyProxy(t *testing.T, target string, pki *testPKI, key string) string {
	t.Helper()
	forward := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(&url.URL{Scheme: "http", Host: target}) },
		FlushInterval: -1,                         // gRPC streams
		ErrorLog:      log.New(io.Discard, "", 0), // a long poll its client gave up on is no news
		Transport: &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}},
	}
	cfg := pki.serverConfig()
	cfg.ClientAuth = tls.NoClientCert
	srv := &http.Server{TLSConfig: cfg, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Grpc-Status", "16") // UNAUTHENTICATED
			w.Header().Set("Grpc-Message", "Request unauthorized.")
			w.WriteHeader(http.StatusOK)
			return
		}
		forward.ServeHTTP(w, r)
	})}
	ln := listenLocal(t)
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// testPKI is a certificate authority of the test's own, and the server and client certificates it signed, as
// PEM files.
type testPKI struct {
	caCert, serverCert, serverKey, clientCert, clientKey string
	ca                                                   *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "clusterrun test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p := &testPKI{ca: x509.NewCertPool()}
	p.ca.AddCert(ca)
	p.caCert = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (cert, key string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(k)
		require.NoError(t, err)
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+".key", "PRIVATE KEY", keyDER)
	}
	p.serverCert, p.serverKey = issue("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// serverConfig takes only clients with a certificate the CA signed, and speaks HTTP/2, as gRPC needs.
func (p *testPKI) serverConfig() *tls.Config {
	cert, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		panic(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.ca,
		NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
}

func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
	return path
}
