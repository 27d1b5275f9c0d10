package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/clusterrun/clusterrun/internal/codec"
)

const codecServerUsage = `Serve the payload codec to the Temporal Web UI and the temporal CLI, so they show (and send) clusterrun's
encrypted payloads in the clear. It holds the keys; run it where its users run their browsers or CLI, not on
the Temporal server.

Usage: clusterrun codec-server [--listen ADDR] [--cors-origin URL]... --codec-key-file FILE

The key file comes from --codec-key-file or CLUSTERRUN_CODEC_KEY_FILE. Point the Web UI at the server under
Settings > Codec Server (or start the dev server with --ui-codec-endpoint URL), and the temporal CLI with
--codec-endpoint URL.

Example:
  clusterrun codec-server --listen 127.0.0.1:8081 --cors-origin http://localhost:8233
`

const codecKeyUsage = `Print a new AES-256 key as a key file line. The first line of a key file encrypts; every line decrypts, so
rotating a key is putting a new line first on every worker and CLI machine.

Usage: clusterrun codec-key ID

Example:
  clusterrun codec-key k2026-11 >> ~/.config/clusterrun/codec.keys && chmod 600 ~/.config/clusterrun/codec.keys
`

type listValue []string

func (l *listValue) String() string     { return fmt.Sprint(*l) }
func (l *listValue) Set(v string) error { *l = append(*l, v); return nil }

func cmdCodecServer(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("codec-server", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8081", "address to serve on")
	var origins listValue
	fs.Var(&origins, "cors-origin", "a browser origin allowed to call the server (repeatable; default the dev server's Web UI, http://localhost:8233 and http://127.0.0.1:8233)")
	if _, err := parse(fs, codecServerUsage, args, 0, 0, stderr); err != nil {
		return err
	}
	keyFile := codecKeyFile(fs)
	if keyFile == "" {
		return usageErrorf("no key file: pass --codec-key-file FILE or set %s (make a key with: clusterrun codec-key ID)", codec.EnvKeyFile)
	}
	c, err := codec.Load(keyFile)
	if err != nil {
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	if len(origins) == 0 {
		origins = listValue{"http://localhost:8233", "http://127.0.0.1:8233"}
	}
	for i, o := range origins {
		if origins[i], err = codec.Origin(o); err != nil {
			return usageErrorf("%v", err)
		}
	}
	ln, err := listenOn(*listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: codec.Handler(c, origins), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	fmt.Fprintf(stdout, "codec server on http://%s (encrypting with key %s), for origins %v\n", ln.Addr(), c.KeyID(), []string(origins))
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listenOn listens on the --listen address; an address that is not HOST:PORT is a usage error.
func listenOn(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return nil, usageErrorf("--listen %q is not HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:8081", addr)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w (pick a free port or stop what holds it)", addr, err)
	}
	return ln, nil
}

func cmdCodecKey(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("codec-key", flag.ContinueOnError)
	pos, err := parse(fs, codecKeyUsage, args, 1, 1, stderr)
	if err != nil {
		return err
	}
	line, err := codec.NewKeyLine(pos[0])
	if err != nil {
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	fmt.Fprintln(stdout, line)
	return nil
}

// addCodecKeyFileFlag gives a command that reads or writes payloads (one that dials the server, and the codec
// server) the --codec-key-file flag (default CLUSTERRUN_CODEC_KEY_FILE); codecKeyFile reads it after parsing.
func addCodecKeyFileFlag(fs *flag.FlagSet) {
	if !talksToTemporal(fs) && fs.Name() != "codec-server" {
		return
	}
	if fs.Lookup("codec-key-file") == nil {
		fs.String("codec-key-file", os.Getenv(codec.EnvKeyFile), "encrypt and decrypt payloads with the keys in this file (AES-256-GCM) ["+codec.EnvKeyFile+"]")
	}
}

func codecKeyFile(fs *flag.FlagSet) string {
	if f := fs.Lookup("codec-key-file"); f != nil {
		return f.Value.String()
	}
	return ""
}
