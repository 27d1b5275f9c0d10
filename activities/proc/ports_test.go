package proc

import (
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A real listener of this process, on IPv4 and on IPv6, is found; a port outside the range asked is not.
func TestTCPPortsInUseFindsListeners(t *testing.T) {
	ln4, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln4.Close()
	p4 := ln4.Addr().(*net.TCPAddr).Port
	got := TCPPortsInUse(p4, p4)
	assert.Equal(t, map[int]bool{p4: true}, got)
	assert.Empty(t, TCPPortsInUse(p4+1, p4+1), "a free neighbour")

	ln6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 here: %v", err)
	}
	defer ln6.Close()
	p6 := ln6.Addr().(*net.TCPAddr).Port
	assert.True(t, TCPPortsInUse(p6, p6)[p6], "an IPv6 listener")
}

// The table's states: TIME_WAIT keeps no bind from succeeding, every other state does; malformed lines are
// skipped.
func TestAddPortsInUseReadsStates(t *testing.T) {
	table := strings.Join([]string{
		"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
		"   0: 0100007F:4E20 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1",     // 20000 listening
		"   1: 0100007F:4E21 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2",     // 20001 established
		"   2: 0100007F:4E22 0100007F:9C41 06 00000000:00000000 00:00000000 00000000     0        0 3",     // 20002 time-wait
		"   3: 00000000000000000000000001000000:4E23 00000000000000000000000000000000:0000 0A 0 0 0 0 0 4", // 20003 IPv6
		"   4: 0100007F:2710 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5",     // 10000: out of range
		"   5: garbage",
		"   6: 0100007F 00000000:0000 0A",
	}, "\n")
	out := map[int]bool{}
	addPortsInUse(strings.NewReader(table), 20000, 29999, out)
	assert.Equal(t, map[int]bool{20000: true, 20001: true, 20003: true}, out)
}
