package conn

import "flag"

// AddFlags gives a program the temporal CLI's connection flags, kept in c, but --api-key (AddAPIKeyFlag). Each
// wins over its TEMPORAL_* variable and the config file's profile; unset, they leave them (SetConnection passes
// them on).
func AddFlags(fs *flag.FlagSet, c *Connection) {
	fs.StringVar(&c.Address, "address", "", "Temporal server host:port [TEMPORAL_ADDRESS; default localhost:7233]")
	fs.StringVar(&c.Namespace, "namespace", "", "Temporal namespace [TEMPORAL_NAMESPACE; default default]")
	fs.StringVar(&c.Namespace, "n", "", "short for --namespace")
	fs.BoolVar(&c.TLS, "tls", false, "connect with TLS [TEMPORAL_TLS]")
	fs.StringVar(&c.TLSCertPath, "tls-cert-path", "", "client certificate for mTLS [TEMPORAL_TLS_CLIENT_CERT_PATH]")
	fs.StringVar(&c.TLSKeyPath, "tls-key-path", "", "client key for mTLS [TEMPORAL_TLS_CLIENT_KEY_PATH]")
	fs.StringVar(&c.TLSCAPath, "tls-ca-path", "", "CA certificate that signs the server's [TEMPORAL_TLS_SERVER_CA_CERT_PATH]")
	fs.StringVar(&c.TLSServerName, "tls-server-name", "", "server name the certificate must carry [TEMPORAL_TLS_SERVER_NAME]")
	fs.BoolVar(&c.TLSDisableHostVerification, "tls-disable-host-verification", false, "do not check the server's host name [TEMPORAL_TLS_DISABLE_HOST_VERIFICATION]")
	fs.StringVar(&c.Profile, "profile", "", "profile of the temporal CLI's config file [TEMPORAL_PROFILE; default default]")
	fs.StringVar(&c.ConfigFile, "config-file", "", "the temporal CLI's config file [TEMPORAL_CONFIG_FILE; default <config dir>/temporalio/temporal.toml]")
}

// AddAPIKeyFlag gives a short-lived command --api-key. A long-lived one (the host worker) takes the key only
// from TEMPORAL_API_KEY or the config file: a flag is in /proc/PID/cmdline, where every process of the host,
// tasks included, can read it.
func AddAPIKeyFlag(fs *flag.FlagSet, c *Connection) {
	fs.StringVar(&c.APIKey, "api-key", "", "API key for the Temporal server; turns TLS on [TEMPORAL_API_KEY]")
}
