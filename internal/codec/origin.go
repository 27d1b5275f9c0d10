package codec

import (
	"fmt"
	"net/url"
	"strings"
)

// Origin checks a --cors-origin value and returns it as a browser sends it in its Origin header
// (scheme://host[:port], lower case, no path), so a value pasted from the address bar with a trailing slash
// still matches. A wildcard is refused: it would let any web page the user visits encrypt and decrypt with
// the keys.
func Origin(s string) (string, error) {
	if s == "*" {
		return "", fmt.Errorf("--cors-origin *: any web page you visit could then decrypt payloads through this server; name the Web UI's origin, e.g. http://localhost:8233")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--cors-origin %q is not a browser origin: give the Web UI's scheme, host and port as its address bar shows them, e.g. http://localhost:8233", s)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("--cors-origin %q has more than scheme, host and port, which a browser never sends as its origin: use %s://%s", s, u.Scheme, u.Host)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}
