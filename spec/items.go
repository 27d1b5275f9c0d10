package spec

import "time"

// ItemsSpec turns on work items for a run: ClusterCoordinator's schedule, fetch, join and done, with the run's
// tasks as the workers that serve them.
type ItemsSpec struct {
	// Queue is how many items may wait for a worker at once; schedule blocks while it is full.
	// Optional: default 1024.
	Queue int `json:"queue,omitempty"`
	// Lease is how long a worker holds an item without renewing it (its client renews while the handler runs)
	// before the item is given to another worker. Optional: default 1m.
	Lease Duration `json:"lease,omitempty"`
	// MaxAttempts is how many times an item is handed out before it fails: an item whose worker keeps dying
	// or losing its lease does not go round forever. Optional: default 5.
	MaxAttempts int `json:"maxAttempts,omitempty"`
}

// Items is a run's resolved work-item settings.
type Items struct {
	Queue       int           `json:"queue"`
	Lease       time.Duration `json:"lease"`
	MaxAttempts int           `json:"maxAttempts"`
}

// Work-item defaults and bounds.
const (
	DefaultItemQueue       = 1024
	MaxItemQueue           = 100_000
	DefaultItemLease       = time.Minute
	MinItemLease           = time.Second
	DefaultItemMaxAttempts = 5
	MaxItemMaxAttempts     = 100
)

func (v *validator) items(path string, s *ItemsSpec) {
	if s == nil {
		return
	}
	if s.Queue < 0 || s.Queue > MaxItemQueue {
		v.add(path+".queue", "%d is outside 1..%d; leave it out for %d", s.Queue, MaxItemQueue, DefaultItemQueue)
	}
	if d, ok := v.duration(path+".lease", s.Lease); ok && s.Lease != "" && d < MinItemLease {
		v.add(path+".lease", "%s is less than the %s minimum", d, MinItemLease)
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > MaxItemMaxAttempts {
		v.add(path+".maxAttempts", "%d is outside 1..%d; leave it out for %d", s.MaxAttempts, MaxItemMaxAttempts, DefaultItemMaxAttempts)
	}
}

// planItems resolves a valid ItemsSpec; nil stays nil (the run has no work items).
func planItems(s *ItemsSpec) *Items {
	if s == nil {
		return nil
	}
	it := &Items{Queue: s.Queue, Lease: mustDuration(s.Lease, DefaultItemLease), MaxAttempts: s.MaxAttempts}
	if it.Queue == 0 {
		it.Queue = DefaultItemQueue
	}
	if it.MaxAttempts == 0 {
		it.MaxAttempts = DefaultItemMaxAttempts
	}
	return it
}
