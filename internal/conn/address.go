package conn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// addressHint says what is wrong with an address the server could not be reached at, for the mistakes that
// gRPC's own words hide ("no children to pick from" for a name that does not resolve, a dial to port 443 for an
// address with no port): a scheme or a path, no port, a port that is none, a host name that does not resolve.
// "" when the address looks right. Only a failed dial asks: gRPC takes targets such as dns:///host:port too.
func addressHint(ctx context.Context, address string) string {
	bare := address
	if scheme, rest, ok := strings.Cut(address, "://"); ok {
		switch strings.ToLower(scheme) {
		case "http", "https", "grpc", "grpcs", "tcp":
			bare, _, _ = strings.Cut(rest, "/")
			return fmt.Sprintf("an address is host:port, with no scheme: write %s", withPort(bare))
		}
		return ""
	}
	if host, _, ok := strings.Cut(address, "/"); ok {
		return fmt.Sprintf("an address is host:port, with no path: write %s", withPort(host))
	}
	host, port, err := net.SplitHostPort(bare)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return fmt.Sprintf("it has no port, so gRPC tried 443; a Temporal server listens on 7233 unless set otherwise: "+
				"write %s", withPort(bare))
		}
		return fmt.Sprintf("it is not host:port (%v)", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("%q is not a port: a port is a number from 1 to 65535", port)
	}
	if host == "" || net.ParseIP(host) != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var dnsErr *net.DNSError
	if _, err := lookupHost(ctx, host); errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return fmt.Sprintf("the name %q does not resolve (no such host): check its spelling, or give an IP address", host)
	}
	return ""
}

// lookupHost resolves a host name; tests stand in for the resolver.
var lookupHost = net.DefaultResolver.LookupHost

// withPort is host with Temporal's usual port when it has none.
func withPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "7233")
}

// silentHint says, of a dial that got no answer in time from an address that accepts connections, that
// something listens there but does not answer (in the CLI's words for a call the server did not answer, as the
// server most often is what listens): "start one with make up" would be wrong. "" otherwise.
func silentHint(ctx context.Context, address string, err error) string {
	var deadline *serviceerror.DeadlineExceeded
	if !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &deadline) && status.Code(err) != codes.DeadlineExceeded {
		return ""
	}
	probe, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second) // the dial's own time is up
	defer cancel()
	c, derr := (&net.Dialer{}).DialContext(probe, "tcp", address)
	if derr != nil {
		return ""
	}
	_ = c.Close()
	return "the server is up but did not answer in time: its database may be down or overloaded, or the server " +
		"stopped or still starting (see its log); or another program holds that port"
}
