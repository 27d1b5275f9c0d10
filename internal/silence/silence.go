// Package silence keeps the hosts that did not answer a read of a live task's log, and when to ask each again.
//
// A read asks every host it names at once and waits for the slowest (up to a live read's patience), so a dead
// host asked on every read holds every other host's output back. A silent host is asked again only after a
// wait: 10 s after its first unanswered read, then twice as long after each further one, up to a minute. A
// host that answers is forgotten; one whose worker shows signs of life (a task of it running again, or a
// reported exit) is asked again at the next read, keeping its wait. The CLI's follower and the Go package's
// Run.Logs both keep their silent hosts here.
package silence

import "time"

const (
	// FirstWait is the wait after a host's first unanswered read.
	FirstWait = 10 * time.Second
	// MaxWait is the longest wait: a host back after a long outage is asked again within it.
	MaxWait = time.Minute
)

// Hosts are the silent hosts, by name. The zero value (nil) has none and may be read, not hushed.
type Hosts map[string]*Host

// Host is one silent host: when to ask it again, and the wait that led there.
type Host struct {
	Until time.Time
	Wait  time.Duration
}

// Hush marks h silent after a read it did not answer, and reports whether it was not silent before. Another
// of its streams in the same read leaves the wait as it is; an unanswered read after the wait doubles it.
func (s Hosts) Hush(h string) bool {
	sl := s[h]
	switch {
	case sl == nil:
		sl = &Host{Wait: FirstWait}
		s[h] = sl
	case time.Now().Before(sl.Until):
		return false // another of its streams, in the same read
	default:
		sl.Wait = min(2*sl.Wait, MaxWait)
	}
	sl.Until = time.Now().Add(sl.Wait)
	return sl.Wait == FirstWait
}

// Resting reports whether h is silent and not yet to be asked again.
func (s Hosts) Resting(h string) bool {
	sl := s[h]
	return sl != nil && time.Now().Before(sl.Until)
}

// Wake has h asked again at the next read; its wait stays, for the case that it is still silent.
func (s Hosts) Wake(h string) {
	if sl := s[h]; sl != nil {
		sl.Until = time.Time{}
	}
}

// Answered forgets h's silence: it answered a read.
func (s Hosts) Answered(h string) { delete(s, h) }
