package activities

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sends records each gathering a batcher sends.
type sends struct {
	mu   sync.Mutex
	sent [][]int
}

func (s *sends) send(_ context.Context, _, _ string, items []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, items)
	return nil
}

func (s *sends) all() [][]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]int(nil), s.sent...)
}

// addEvery adds n items to one run's gathering, one every gap, and waits until each was sent.
func addEvery(t *testing.T, b *batcher[int], n int, gap time.Duration) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, b.add(context.Background(), "run", "r1", i))
		}()
		time.Sleep(gap)
	}
	wg.Wait()
}

// Items that keep coming closer together than the window go out in one signal, however long they take, up to
// the longest window.
func TestBatcher_OneSignalWhileItemsKeepComing(t *testing.T) {
	var s sends
	b := &batcher[int]{send: s.send, window: 100 * time.Millisecond, maxWindow: 10 * time.Second}
	addEvery(t, b, 20, 10*time.Millisecond) // 190 ms of items, none 100 ms after the one before
	sent := s.all()
	require.Len(t, sent, 1, "one quiet gathering, one signal: %v", sent)
	assert.Len(t, sent[0], 20)
}

// A stream that never goes quiet still goes out every maxWindow, and nothing is lost or sent twice.
func TestBatcher_AStreamGoesOutAtTheLongestWindow(t *testing.T) {
	var s sends
	b := &batcher[int]{send: s.send, window: 100 * time.Millisecond, maxWindow: 150 * time.Millisecond}
	addEvery(t, b, 40, 20*time.Millisecond) // 800 ms of items, never 100 ms apart
	sent := s.all()
	assert.GreaterOrEqual(t, len(sent), 3, "a gathering waits at most maxWindow: %v", sent)
	var got []int
	for _, g := range sent {
		got = append(got, g...)
	}
	want := make([]int, 40)
	for i := range want {
		want[i] = i
	}
	assert.ElementsMatch(t, want, got)
}

// Items far apart go out one by one, each after the window.
func TestBatcher_ItemsFarApartGoOutAlone(t *testing.T) {
	var s sends
	b := &batcher[int]{send: s.send, window: 5 * time.Millisecond, maxWindow: 50 * time.Millisecond}
	for i := range 3 {
		require.NoError(t, b.add(context.Background(), "run", "r1", i))
	}
	assert.Equal(t, [][]int{{0}, {1}, {2}}, s.all())
}

// An item put with now sends the gathering at once, with the items gathered before it, however long the quiet
// window.
func TestBatcher_NowSendsTheGatheringAtOnce(t *testing.T) {
	var s sends
	b := &batcher[int]{send: s.send, window: time.Hour, maxWindow: time.Hour}
	first := make(chan error, 1)
	go func() { first <- b.add(context.Background(), "run", "r1", 1) }()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.runs["run\x00r1"] != nil && len(b.runs["run\x00r1"].items) == 1
	}, 10*time.Second, time.Millisecond, "the first item is gathered")
	done := make(chan error, 1)
	go func() { done <- b.put(context.Background(), "run", "r1", 2, now) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("an item put with now waited for the quiet window")
	}
	require.NoError(t, <-first)
	assert.Equal(t, [][]int{{1, 2}}, s.all(), "one signal with both items")
}

// after returns once what is gathered for the run went out, sending it at once; it waits for a gathering on its
// way out too, and returns at once when nothing is gathered.
func TestBatcher_AfterSendsWhatIsGatheredFirst(t *testing.T) {
	var s sends
	release := make(chan struct{})
	slow := func(ctx context.Context, w, r string, items []int) error { <-release; return s.send(ctx, w, r, items) }
	b := &batcher[int]{send: slow, window: time.Hour, maxWindow: time.Hour}
	require.NoError(t, b.after(context.Background(), "run", "r1"), "nothing gathered")
	go func() { _ = b.add(context.Background(), "run", "r1", 1) }()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.runs["run\x00r1"] != nil && len(b.runs["run\x00r1"].items) == 1
	}, 10*time.Second, time.Millisecond, "the item is gathered")
	done := make(chan error, 1)
	go func() { done <- b.after(context.Background(), "run", "r1") }()
	select {
	case <-done:
		t.Fatal("after returned before the gathering went out")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("after waited for the quiet window")
	}
	assert.Equal(t, [][]int{{1}}, s.all())
}

// drop takes items out of a gathering before it goes out: their callers return nil at once, and the rest go out
// as one signal.
func TestBatcher_DroppedItemsAreNotSent(t *testing.T) {
	var s sends
	b := &batcher[int]{send: s.send, window: time.Hour, maxWindow: time.Hour}
	added := make([]chan error, 4)
	for i := range added {
		added[i] = make(chan error, 1)
		go func() { added[i] <- b.add(context.Background(), "run", "r1", i) }()
		require.Eventually(t, func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.runs["run\x00r1"] != nil && len(b.runs["run\x00r1"].items) == i+1
		}, 10*time.Second, time.Millisecond)
	}
	b.drop("run", "r1", func(i int) bool { return i%2 == 1 })
	b.drop("other", "r1", func(int) bool { return true }) // nothing gathered there
	for _, i := range []int{1, 3} {
		select {
		case err := <-added[i]:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("the caller of dropped item %d still waits", i)
		}
	}
	assert.Empty(t, s.all(), "nothing sent yet")
	require.NoError(t, b.after(context.Background(), "run", "r1"))
	require.NoError(t, <-added[0])
	require.NoError(t, <-added[2])
	assert.Equal(t, [][]int{{0, 2}}, s.all())
}

// Items that come with later wait for the later windows, or go with the first item that comes sooner.
func TestBatcher_LaterItemsWaitOrGoWithASoonerOne(t *testing.T) {
	var s sends
	b := &batcher[int]{send: s.send, window: 5 * time.Millisecond, maxWindow: 50 * time.Millisecond, laterWindow: time.Hour, laterMaxWindow: time.Hour}
	first := make(chan error, 1)
	go func() { first <- b.put(context.Background(), "run", "r1", 1, later) }()
	select {
	case <-first:
		t.Fatal("an item that came with later went out before the later windows")
	case <-time.After(200 * time.Millisecond):
	}
	assert.Empty(t, s.all())
	require.NoError(t, b.put(context.Background(), "run", "r1", 2, soon))
	require.NoError(t, <-first)
	assert.Equal(t, [][]int{{1, 2}}, s.all(), "one signal with both, at the sooner one's pace")

	var q sends
	quiet := &batcher[int]{send: q.send, window: 5 * time.Millisecond, maxWindow: 50 * time.Millisecond,
		laterWindow: 100 * time.Millisecond, laterMaxWindow: time.Hour}
	began := time.Now()
	require.NoError(t, quiet.put(context.Background(), "run", "r1", 1, later))
	assert.GreaterOrEqual(t, time.Since(began), 100*time.Millisecond, "it waited for the later window's quiet")
	assert.Equal(t, [][]int{{1}}, q.all())
}
