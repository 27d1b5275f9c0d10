package conn

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tlsHint says what to change when a dial failed over TLS, from gRPC's words for it, which name the failure
// but not the setting that fixes it; "" for any other failure. tlsOn says whether the dial used TLS, and
// clientCert whether it had a client certificate to give: a server that takes only TLS hangs up on a dial
// without it before saying anything, and one that refuses a client's certificate (or its lack) may hang up
// before its alert is read, since in TLS 1.3 the client has finished its side of the handshake by then.
func tlsHint(err error, tlsOn, clientCert bool) string {
	msg := err.Error()
	has := func(s string) bool { return strings.Contains(msg, s) }
	hungUp := has("broken pipe") || has("connection reset by peer")
	switch {
	case has("tls: certificate required"), tlsOn && !clientCert && hungUp:
		return "the server asks for a client certificate (mutual TLS): give one with TEMPORAL_TLS_CLIENT_CERT_PATH and " +
			"TEMPORAL_TLS_CLIENT_KEY_PATH (--tls-cert-path and --tls-key-path, or a temporal.toml profile)"
	case has("remote error: tls: unknown certificate authority"), has("remote error: tls: bad certificate"):
		return "the server refused this client's certificate: give one signed by a CA the server (or its namespace) trusts"
	case tlsOn && hungUp:
		return "the server hung up during the TLS handshake, as one does that refuses the client's certificate: give one " +
			"signed by a CA the server (or its namespace) trusts"
	case has("x509: certificate signed by unknown authority"):
		return "the server's certificate is not signed by a CA this machine trusts: name the CA that signed it with " +
			"TEMPORAL_TLS_SERVER_CA_CERT_PATH (--tls-ca-path)"
	case has("x509: certificate is valid for"):
		return "the server's certificate is for another name: set TEMPORAL_TLS_SERVER_NAME (--tls-server-name) to one it is " +
			"valid for, or dial the server by that name"
	case has("first record does not look like a TLS handshake"):
		return "the server does not speak TLS: turn TLS off (TEMPORAL_TLS=false, and no client certificate or API key)"
	case !tlsOn && has("error reading server preface") && (has("EOF") || hungUp):
		return "the server hung up before it said anything, as one that takes only TLS does: if it does (Temporal Cloud " +
			"does), turn TLS on with TEMPORAL_TLS=true (--tls), or give its client certificate or API key"
	}
	return ""
}

// authHint says what to change when the server refused a dial's credentials; "" for any other failure. keyOn
// says whether the dial gave an API key.
func authHint(err error, keyOn bool) string {
	msg := err.Error()
	switch code := status.Code(err); {
	case code == codes.Unauthenticated, code == codes.PermissionDenied:
	case strings.Contains(msg, "code = Unauthenticated"), strings.Contains(msg, "code = PermissionDenied"):
	default:
		return ""
	}
	if keyOn {
		return "the server refused the API key: check TEMPORAL_API_KEY (--api-key, or a profile's api_key), and that " +
			"the key is for this namespace and has not expired"
	}
	return "the server wants credentials: give an API key with TEMPORAL_API_KEY (--api-key, or a profile's api_key), " +
		"or a client certificate with TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH"
}
