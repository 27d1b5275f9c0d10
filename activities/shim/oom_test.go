package shim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Records as /dev/kmsg gives them, from this machine's kernel (6.18) and the forms older kernels write.
func TestParseOOMKill_TheKernelsLines(t *testing.T) {
	for _, c := range []struct {
		record string
		want   OOMKill
	}{
		{"3,423,45072163424,-;Memory cgroup out of memory: Killed process 19754 (python3) total-vm:218756kB, anon-rss:50944kB, " +
			"file-rss:2736kB, shmem-rss:0kB, UID:0 pgtables:168kB oom_score_adj:0\n",
			OOMKill{PID: 19754, Name: "python3", RSS: (50944 + 2736) << 10, Cgroup: true}},
		{"3,9,1200,-;Out of memory: Killed process 4567 (pt_data_worker) total-vm:9000000kB, anon-rss:1048576kB, file-rss:4kB, " +
			"shmem-rss:8kB, UID:1000 pgtables:2048kB oom_score_adj:0\n SUBSYSTEM=memory\n",
			OOMKill{PID: 4567, Name: "pt_data_worker", RSS: (1048576 + 4 + 8) << 10}},
		{"3,1,2,-;Killed process 42 (java) total-vm:100kB, anon-rss:10kB, file-rss:0kB, shmem-rss:0kB\n",
			OOMKill{PID: 42, Name: "java", RSS: 10 << 10}},
		{"3,1,2,-;Killed process 7 (a.out)\n", OOMKill{PID: 7, Name: "a.out"}},
	} {
		got, ok := parseOOMKill(c.record)
		assert.True(t, ok, c.record)
		assert.Equal(t, c.want, got, c.record)
	}
	for _, other := range []string{
		"6,422,45072163391,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,task=python3,pid=19754,uid=0\n",
		"4,400,1,-;python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n",
		"6,1,2,-;a task said: Killed process 12 (x) in its own words\n",
		"12,5,6,-;Killed process 12 (x)\n", // written to /dev/kmsg by a program (facility user)
		"6,343,1439702,-;EXT4-fs (vda): mounted filesystem r/w without journal.\n",
	} {
		_, ok := parseOOMKill(other)
		assert.False(t, ok, other)
	}
}

// A kill is looked up by pid when the supervisor reaps its task. One read before the task started was of an
// earlier process that had the pid; a supervisor that cannot read the kernel's log has none.
func TestOOMWatch_OnlyAKillReadSinceTheProcessStarted(t *testing.T) {
	w := &oomWatch{fd: -1, killed: map[int]oomRecord{}}
	before := time.Now()
	w.keep(OOMKill{PID: 5, Name: "python3"}, 4)
	after := time.Now().Add(time.Millisecond)
	k, ok := w.killedBy(5, before, 0)
	assert.True(t, ok)
	assert.Equal(t, "python3", k.Name)
	_, ok = w.killedBy(5, after, 0)
	assert.False(t, ok, "a process that started after the kill was read")
	_, ok = w.killedBy(6, before, 0)
	assert.False(t, ok)
	var none *oomWatch
	_, ok = none.killedBy(5, before, time.Second)
	assert.False(t, ok)
	for pid := 100; pid < 100+oomKept; pid++ {
		w.keep(OOMKill{PID: pid}, 0)
	}
	_, ok = w.killedBy(5, before, 0)
	assert.False(t, ok, "the oldest kill is forgotten past oomKept")
	assert.Len(t, w.killed, oomKept)
}
