package shim

import (
	"log"
	"time"

	"github.com/clusterrun/clusterrun/activities/logfile"
)

// logSampler dates and caps a task's log files while it runs (package logfile).
type logSampler struct {
	watchers []*logfile.Watcher
	logger   *log.Logger
	stop     chan struct{}
	done     chan struct{}
}

// sampleLogs starts sampling the task's log files; a file that cannot be watched is logged and left alone.
func sampleLogs(cfg Config, logger *log.Logger) *logSampler {
	s := &logSampler{logger: logger, stop: make(chan struct{}), done: make(chan struct{})}
	for _, path := range []string{cfg.Stdout, cfg.Stderr} {
		w, err := logfile.NewWatcher(path, cfg.LogCap)
		if err != nil {
			logger.Printf("cannot date or cap %s: %v", path, err)
			continue
		}
		s.watchers = append(s.watchers, w)
	}
	go s.loop()
	return s
}

func (s *logSampler) loop() {
	defer close(s.done)
	tick := time.NewTicker(logfile.SampleEvery)
	defer tick.Stop()
	failed := map[int]bool{}
	for {
		select {
		case <-s.stop:
			for _, w := range s.watchers {
				if err := w.Close(time.Now()); err != nil {
					s.logger.Printf("%v", err)
				}
			}
			return
		case now := <-tick.C:
			for i, w := range s.watchers {
				// A failure is logged once per file, not four times a second.
				if err := w.Sample(now); err != nil && !failed[i] {
					failed[i] = true
					s.logger.Printf("%v", err)
				}
			}
		}
	}
}

// finish takes the last samples once the task has ended, so that its logs are fully dated before its exit is
// recorded.
func (s *logSampler) finish() {
	close(s.stop)
	<-s.done
}
