package proc

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// tcpTimeWait is the state /proc/net/tcp gives a closed connection's leftover: it keeps no bind from succeeding
// (Go's listeners set SO_REUSEADDR).
const tcpTimeWait = "06"

// TCPPortsInUse lists the local TCP ports from..to (both included) that some socket of this network namespace
// holds, listening or connected, as /proc/net/tcp and tcp6 show them: what another program would make a bind
// there fail. A socket that is bound but neither listens nor is connected is not listed there, and is missed.
// A table that cannot be read adds nothing.
func TCPPortsInUse(from, to int) map[int]bool {
	out := map[int]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		addPortsInUse(f, from, to, out)
		f.Close()
	}
	return out
}

// addPortsInUse reads one /proc/net/tcp table: a header line, then one socket per line, whose second field is
// the local address (hex IP, ':', hex port) and fourth its state.
func addPortsInUse(r io.Reader, from, to int, out map[int]bool) {
	sc := bufio.NewScanner(r)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] == tcpTimeWait {
			continue
		}
		i := strings.LastIndexByte(fields[1], ':')
		if i < 0 {
			continue
		}
		port, err := strconv.ParseUint(fields[1][i+1:], 16, 16)
		if err == nil && int(port) >= from && int(port) <= to {
			out[int(port)] = true
		}
	}
}
