package activities

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// acquireInBackground waits for a slot of pool "" for rank, and returns what the wait gave.
func acquireInBackground(ctx context.Context, s *slots, rank slotRank) <-chan func() {
	got := make(chan func(), 1)
	go func() {
		release, ok := s.acquire(ctx, nil, "", rank, time.Time{}, nil)
		if !ok {
			release = nil
		}
		got <- release
	}()
	return got
}

// The slots that free go to the members of the run started first, whatever order they came in: every host
// then serves one queued gang whole before the next.
func TestSlots_FreedSlotsGoToTheRunStartedFirst(t *testing.T) {
	s := &slots{max: 1}
	t0 := time.Date(2026, 11, 27, 18, 0, 0, 0, time.UTC)
	older, younger := slotRank{queued: t0, run: "b"}, slotRank{queued: t0.Add(time.Second), run: "a"}
	release, ok := s.acquire(t.Context(), nil, "", younger, time.Time{}, nil)
	require.True(t, ok, "a free slot goes to whoever asks")

	const youngerMembers = 8 // woken in any order, one of them would take the slot 8 times in 9
	youngerGot := make(chan func(), youngerMembers)
	for range youngerMembers {
		got := acquireInBackground(t.Context(), s, younger)
		go func() { youngerGot <- <-got }()
	}
	waitFor(t, "the younger run's members to wait", func() bool { return s.waiting() == youngerMembers })
	olderGot := acquireInBackground(t.Context(), s, older)
	waitFor(t, "the older run's member to wait", func() bool { return s.waiting() == youngerMembers+1 })

	release()
	var releaseOlder func()
	select {
	case releaseOlder = <-olderGot:
		require.NotNil(t, releaseOlder)
	case <-youngerGot:
		t.Fatal("a member of the run started later took the slot before the one of the run started first")
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter took the freed slot")
	}
	assert.Equal(t, youngerMembers, s.waiting(), "the younger run's members still wait")
	releaseOlder()
	for range youngerMembers {
		select {
		case r := <-youngerGot:
			require.NotNil(t, r)
			r()
		case <-time.After(10 * time.Second):
			t.Fatal("the younger run's members did not take the slots freed next")
		}
	}
	assert.Equal(t, 0, s.inUse(""))
}

// A waiter that gives up lets the one after it go: a slot free while it waited is not held for it.
func TestSlots_AWaiterThatGivesUpLetsTheNextGo(t *testing.T) {
	s := &slots{max: 2}
	t0 := time.Date(2026, 11, 27, 18, 0, 0, 0, time.UTC)
	holder := slotRank{queued: t0, run: "h"}
	r1, _ := s.acquire(t.Context(), nil, "", holder, time.Time{}, nil)
	r2, _ := s.acquire(t.Context(), nil, "", holder, time.Time{}, nil)
	defer r2()

	ctx, cancel := context.WithCancel(t.Context())
	olderGot := acquireInBackground(ctx, s, slotRank{queued: t0.Add(time.Second), run: "o"})
	waitFor(t, "the older member to wait", func() bool { return s.waiting() == 1 })
	youngerGot := acquireInBackground(t.Context(), s, slotRank{queued: t0.Add(2 * time.Second), run: "y"})
	waitFor(t, "the younger member to wait", func() bool { return s.waiting() == 2 })
	r1()
	r := <-olderGot
	require.NotNil(t, r, "the older member takes the slot freed")
	cancel() // too late to matter: it has the slot
	r()      // it ends at once: the younger member takes the slot
	select {
	case r := <-youngerGot:
		require.NotNil(t, r)
		r()
	case <-time.After(10 * time.Second):
		t.Fatal("the younger member did not take the slot freed")
	}

	// An older member that gives up while a younger one waits behind it: the younger one goes on waiting for a
	// slot, and takes the next.
	ctx, cancel = context.WithCancel(t.Context())
	r1, _ = s.acquire(t.Context(), nil, "", holder, time.Time{}, nil)
	olderGot = acquireInBackground(ctx, s, slotRank{queued: t0.Add(time.Second), run: "o"})
	waitFor(t, "the older member to wait", func() bool { return s.waiting() == 1 })
	youngerGot = acquireInBackground(t.Context(), s, slotRank{queued: t0.Add(2 * time.Second), run: "y"})
	waitFor(t, "the younger member to wait", func() bool { return s.waiting() == 2 })
	cancel()
	assert.Nil(t, <-olderGot, "the older member gave up")
	assert.Equal(t, 1, s.waiting())
	r1()
	select {
	case r := <-youngerGot:
		require.NotNil(t, r)
		r()
	case <-time.After(10 * time.Second):
		t.Fatal("the younger member did not take the slot freed once the older one had given up")
	}
	assert.Equal(t, 1, s.inUse(""))
}
