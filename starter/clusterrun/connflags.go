package main

import (
	"encoding/json"
	"flag"
	"io"
	"strings"

	"github.com/clusterrun/clusterrun/starter"
)

// talksToTemporal says whether a command dials the Temporal server (and so takes the connection flags).
func talksToTemporal(fs *flag.FlagSet) bool {
	return !strings.HasPrefix(fs.Name(), "task ") && fs.Name() != "validate" && fs.Name() != "codec-key"
}

// connection is the command's connection flags, which dial passes to the library.
var connection starter.Connection

// addConnectionFlags gives a command the temporal CLI's connection flags. Each wins over its TEMPORAL_*
// variable and the config file's profile; unset, they leave them. dial passes them on.
func addConnectionFlags(fs *flag.FlagSet) {
	if !talksToTemporal(fs) {
		return
	}
	c := &connection
	fs.StringVar(&c.Address, "address", "", "Temporal server host:port [TEMPORAL_ADDRESS; default localhost:7233]")
	fs.StringVar(&c.Namespace, "namespace", "", "Temporal namespace [TEMPORAL_NAMESPACE; default default]")
	fs.StringVar(&c.Namespace, "n", "", "short for --namespace")
	fs.StringVar(&c.APIKey, "api-key", "", "API key for the Temporal server; turns TLS on [TEMPORAL_API_KEY]")
	fs.BoolVar(&c.TLS, "tls", false, "connect with TLS [TEMPORAL_TLS]")
	fs.StringVar(&c.TLSCertPath, "tls-cert-path", "", "client certificate for mTLS [TEMPORAL_TLS_CLIENT_CERT_PATH]")
	fs.StringVar(&c.TLSKeyPath, "tls-key-path", "", "client key for mTLS [TEMPORAL_TLS_CLIENT_KEY_PATH]")
	fs.StringVar(&c.TLSCAPath, "tls-ca-path", "", "CA certificate that signs the server's [TEMPORAL_TLS_SERVER_CA_CERT_PATH]")
	fs.StringVar(&c.TLSServerName, "tls-server-name", "", "server name the certificate must carry [TEMPORAL_TLS_SERVER_NAME]")
	fs.BoolVar(&c.TLSDisableHostVerification, "tls-disable-host-verification", false, "do not check the server's host name [TEMPORAL_TLS_DISABLE_HOST_VERIFICATION]")
	fs.StringVar(&c.Profile, "profile", "", "profile of the temporal CLI's config file [TEMPORAL_PROFILE; default default]")
	fs.StringVar(&c.ConfigFile, "config-file", "", "the temporal CLI's config file [TEMPORAL_CONFIG_FILE; default <config dir>/temporalio/temporal.toml]")
}

// addOutputFlag gives a command that prints state -o/--output table|json; check validates it after parsing.
func addOutputFlag(fs *flag.FlagSet) (format *string, check func() error) {
	format = new(string)
	fs.StringVar(format, "output", "table", "table or json")
	fs.StringVar(format, "o", "table", "short for --output")
	return format, func() error {
		*format = strings.ToLower(*format)
		if *format != "table" && *format != "json" {
			return usageErrorf("-o %q: use table or json", *format)
		}
		return nil
	}
}

// printJSON prints v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
