// Package conn dials the Temporal server for the clusterrun CLI and host workers, reading the connection the
// same way the temporal CLI does (go.temporal.io/sdk/contrib/envconfig: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_PROFILE and the temporal.toml config file), and adapts zap to the
// SDK's logger.
package conn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/converter"

	"github.com/clusterrun/clusterrun/internal/codec"
	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// DialTimeout bounds the first contact with the server.
const DialTimeout = 10 * time.Second

// The payload codec: off unless a key file is named (CLUSTERRUN_CODEC_KEY_FILE, or --codec-key-file through
// SetCodecKeyFile before the first dial).
var dataConverter struct {
	sync.Mutex
	keyFile string
	loaded  bool
	dc      converter.DataConverter
	err     error
}

func init() { dataConverter.keyFile = os.Getenv(codec.EnvKeyFile) }

// SetCodecKeyFile names the codec key file (a flag wins over the environment).
func SetCodecKeyFile(path string) {
	dataConverter.Lock()
	defer dataConverter.Unlock()
	dataConverter.keyFile, dataConverter.loaded = path, false
}

// DataConverter is the converter every payload goes through: the SDK's default, encrypted by the codec when a
// key file is named. Whatever decodes payloads by hand (memos, heartbeats, history events) must use it too.
func DataConverter() (converter.DataConverter, error) {
	d := &dataConverter
	d.Lock()
	defer d.Unlock()
	if !d.loaded {
		d.loaded, d.dc, d.err = true, converter.GetDefaultDataConverter(), nil
		if d.keyFile != "" {
			c, err := codec.Load(d.keyFile)
			if err != nil {
				d.err = err
			} else {
				d.dc = c.DataConverter()
			}
		}
	}
	return d.dc, d.err
}

// Connection holds the temporal CLI's connection flags (--address, --namespace, --api-key, --tls-*, --profile,
// --config-file). Set fields win over the profile and the environment; empty ones leave them.
type Connection struct {
	Address, Namespace, APIKey string
	Profile, ConfigFile        string
	TLS                        bool
	TLSCertPath, TLSKeyPath    string
	TLSCAPath, TLSServerName   string
	TLSDisableHostVerification bool
}

var connection Connection

// SetConnection sets the flags given on the command line, before the first dial.
func SetConnection(c Connection) { connection = c }

// Options loads the client options as the temporal CLI does: the config file's profile, then TEMPORAL_*
// variables, then the connection flags.
func Options() (client.Options, error) {
	c := connection
	prof, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{ConfigFilePath: c.ConfigFile, ConfigFileProfile: c.Profile})
	if err != nil {
		return client.Options{}, fmt.Errorf("read Temporal connection settings (TEMPORAL_* variables, --profile, --config-file or temporal.toml): %w", err)
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&prof.Address, c.Address)
	set(&prof.Namespace, c.Namespace)
	set(&prof.APIKey, c.APIKey)
	if c.TLS || c.TLSCertPath != "" || c.TLSKeyPath != "" || c.TLSCAPath != "" || c.TLSServerName != "" || c.TLSDisableHostVerification {
		if prof.TLS == nil {
			prof.TLS = &envconfig.ClientConfigTLS{}
		}
		prof.TLS.Disabled = false
		set(&prof.TLS.ClientCertPath, c.TLSCertPath)
		set(&prof.TLS.ClientKeyPath, c.TLSKeyPath)
		set(&prof.TLS.ServerCACertPath, c.TLSCAPath)
		set(&prof.TLS.ServerName, c.TLSServerName)
		prof.TLS.DisableHostVerification = prof.TLS.DisableHostVerification || c.TLSDisableHostVerification
	}
	opts, err := prof.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return client.Options{}, fmt.Errorf("use the Temporal connection settings: %w", err)
	}
	if opts.DataConverter, err = DataConverter(); err != nil {
		return client.Options{}, err
	}
	if opts.ConnectionOptions.GrpcCompression, err = compression(); err != nil {
		return client.Options{}, err
	}
	if opts.HostPort == "" {
		opts.HostPort = client.DefaultHostPort
	}
	if opts.Namespace == "" {
		opts.Namespace = client.DefaultNamespace
	}
	return opts, nil
}

// compression is the gRPC compression of requests to the server (CLUSTERRUN_GRPC_COMPRESSION): none by
// default, where the SDK's default is gzip. clusterrun's requests are small and frequent (polls, heartbeats,
// signals), and gzip made every one of them cost CPU on both ends (design.md, "Backends").
func compression() (client.GrpcCompression, error) {
	switch v := os.Getenv("CLUSTERRUN_GRPC_COMPRESSION"); v {
	case "", "none":
		return &client.GrpcCompressionNone{}, nil
	case "gzip":
		return &client.GrpcCompressionGzip{}, nil
	default:
		return nil, fmt.Errorf("CLUSTERRUN_GRPC_COMPRESSION=%q: want none (the default) or gzip", v)
	}
}

// Dial connects to the Temporal server and checks that it answers. metrics may be nil.
func Dial(ctx context.Context, identity string, logger log.Logger, metrics client.MetricsHandler) (client.Client, error) {
	opts, err := clientOptions(identity, logger, metrics)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, reachError(ctx, opts, err)
	}
	return c, nil
}

// NewLazyClient makes a client as Dial does, without contacting the server: Reach does that. Only a
// configuration problem fails it. refused (nil: nobody) hears of each update the server refuses for having too
// many in flight.
func NewLazyClient(identity string, logger log.Logger, metrics client.MetricsHandler, refused RefusedUpdates) (client.Client, error) {
	opts, err := clientOptions(identity, logger, metrics)
	if err != nil {
		return nil, err
	}
	if refused != nil {
		opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(refusedUpdatesInterceptor(refused)))
	}
	return client.NewLazyClient(opts)
}

// clientOptions are Options with who connects, and where its logs and metrics go (logger and metrics may be nil).
func clientOptions(identity string, logger log.Logger, metrics client.MetricsHandler) (client.Options, error) {
	opts, err := Options()
	if err != nil {
		return opts, err
	}
	opts.Identity = identity
	if logger != nil {
		opts.Logger = sdkLogger{logger}
	}
	if metrics != nil {
		opts.MetricsHandler = metrics
	}
	return opts, nil
}

// Reach checks, within DialTimeout, that the server answers c, and says what to do when it does not.
func Reach(ctx context.Context, c client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		opts, _ := Options()
		return reachError(ctx, opts, err)
	}
	return nil
}

// reachError is the ReachError of a dial with opts that failed with err, with what to change when it can tell:
// the address (addressHint), the TLS settings (tlsHint) or the credentials (authHint).
func reachError(ctx context.Context, opts client.Options, err error) *ReachError {
	hint := addressHint(ctx, opts.HostPort)
	if t := opts.ConnectionOptions.TLS; hint == "" {
		hint = tlsHint(err, t != nil, t != nil && (len(t.Certificates) > 0 || t.GetClientCertificate != nil))
	}
	if hint == "" {
		hint = authHint(err, opts.Credentials != nil)
	}
	if hint == "" {
		hint = silentHint(ctx, opts.HostPort, err)
	}
	return &ReachError{Address: opts.HostPort, Namespace: opts.Namespace, Err: err, Hint: hint}
}

// ReachError says the server did not answer, or refused.
type ReachError struct {
	Address, Namespace string
	Err                error
	Hint               string // what to change, when it can be told: the address, TLS or the credentials (reachError)
}

func (e *ReachError) Error() string {
	if e.Hint != "" {
		return fmt.Sprintf("cannot reach the Temporal server at %s (namespace %s): %s (%v)", e.Address, e.Namespace, e.Hint, e.Err)
	}
	return fmt.Sprintf("cannot reach the Temporal server at %s (namespace %s): %v; start one with `make up`, or point --address "+
		"(or TEMPORAL_ADDRESS) at yours", e.Address, e.Namespace, e.Err)
}

func (e *ReachError) Unwrap() error { return e.Err }

// NamespaceMissing says, for an error that names a namespace the server does not have, which server was asked
// and how to name another (the server's own words, "Namespace x is not found.", say neither); "" for other
// errors.
func NamespaceMissing(err error) string {
	var nf *serviceerror.NamespaceNotFound
	if !errors.As(err, &nf) {
		return ""
	}
	opts, _ := Options()
	return fmt.Sprintf("the Temporal server at %s has no namespace %q: name the one your runs are in with --namespace "+
		"(or TEMPORAL_NAMESPACE, or a --profile that sets it); `temporal operator namespace list` lists them", opts.HostPort, nf.Namespace)
}

// Unreachable reports whether err says the server did not answer (down, or not listening yet), as opposed to
// answering with a refusal (credentials, namespace).
func Unreachable(err error) bool {
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	return errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.Is(err, context.DeadlineExceeded)
}

// sdkLogger is the logger Dial gives the SDK. One of the SDK's info lines is no news: an activity that
// completes after its run ended, which the server no longer takes ("workflow execution already completed"). A
// run whose every task reported its end does not wait for its stop's answers (docs/design.md, "Stopping: fast
// and confirmed"), so each host whose StopTasks was on its way logged one per run. Such lines go to debug.
type sdkLogger struct{ log.Logger }

// taskFailed is the SDK worker's line for a task whose outcome it could not report.
const taskFailed = "Task processing failed with error"

func (l sdkLogger) Info(msg string, kv ...interface{}) {
	if msg == taskFailed && runEnded(kv) {
		l.Logger.Debug(msg, kv...)
		return
	}
	l.Logger.Info(msg, kv...)
}

func (l sdkLogger) With(kv ...interface{}) log.Logger { return sdkLogger{log.With(l.Logger, kv...)} }

// runEnded says whether a line's error is the server's answer that the workflow execution had completed.
func runEnded(kv []interface{}) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		if err, ok := kv[i+1].(error); ok {
			var nf *serviceerror.NotFound
			return errors.As(err, &nf) && strings.Contains(nf.Error(), "workflow execution already completed")
		}
	}
	return false
}

// ZapLogger adapts a zap logger to the Temporal SDK's logger interface.
type ZapLogger struct{ S *zap.SugaredLogger }

// NewZapLogger wraps l.
func NewZapLogger(l *zap.Logger) *ZapLogger { return &ZapLogger{S: l.Sugar()} }

func (z *ZapLogger) Debug(msg string, kv ...interface{}) { z.S.Debugw(msg, kv...) }
func (z *ZapLogger) Info(msg string, kv ...interface{})  { z.S.Infow(msg, kv...) }
func (z *ZapLogger) Warn(msg string, kv ...interface{})  { z.S.Warnw(msg, kv...) }
func (z *ZapLogger) Error(msg string, kv ...interface{}) { z.S.Errorw(msg, kv...) }

// With returns a logger with extra fields, so the SDK can tag its lines.
func (z *ZapLogger) With(kv ...interface{}) log.Logger { return &ZapLogger{S: z.S.With(kv...)} }

// NewLogger builds a zap logger: format console or json, level debug|info|warn|error.
func NewLogger(format, level string) (*zap.Logger, error) {
	var cfg zap.Config
	switch format {
	case "console", "":
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
	case "json":
		cfg = zap.NewProductionConfig()
	default:
		return nil, fmt.Errorf("--log-format %q: use console or json", format)
	}
	lvl, err := zap.ParseAtomicLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	cfg.Level = lvl
	cfg.DisableCaller = true
	return cfg.Build()
}
