package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/starter"
)

// Reads of a run that nobody can answer for now, and what a command says of them.

// live is a run's status with the last heartbeat of each running task.
type live = starter.Status

// fetchStatus returns a run's status: live from the query while it runs, from its result once it has ended.
// done reports whether it has ended; outcome is the run's own error when it has.
func fetchStatus(ctx context.Context, c client.Client, runID string) (st live, done bool, outcome error, err error) {
	st, err = runOf(c, runID).Status(ctx)
	if err != nil {
		return st, false, nil, cliError(err)
	}
	return st, st.Ended, st.Outcome, nil
}

// followPatience is how long a command that follows a run (status --watch, logs --follow) keeps trying to read
// it before it has read it once: longer than a server restart, and an end for a command pointed at the wrong
// server. Once it has read the run, it follows it through an outage of any length, as the run goes on through
// one.
const followPatience = 5 * time.Minute

// followStatus is fetchStatus for commands that follow a run: a read the server or the workers cannot answer
// for now does not end the command (p's patience).
func followStatus(ctx context.Context, c client.Client, id string, p *patience) (st live, done bool, err error) {
	err = p.try(ctx, func() (err error) {
		st, done, _, err = fetchStatus(ctx, c, id)
		return err
	})
	return st, done, err
}

// patience keeps a command that follows a run going through a time nobody can answer for the run: an outage,
// or the ~10 s after the worker that held the run's state stopped, when its queries and log reads wait on
// that worker's queue. Such a read (starter.UnreadableError) is said once on notes and tried again each
// second: for up to followPatience until a read of the run has succeeded, with no limit after one has; the
// first read that succeeds again says so.
type patience struct {
	id    string
	notes io.Writer
	// health, when set, asks whether the Temporal server answers and can read the run (nil: it can): a read
	// that waits long is watched with it (watched). Its error is a *starter.UnreadableError that says which.
	health  func(context.Context) error
	read    bool      // a read of the run succeeded: the command follows it however long it cannot read it
	ended   bool      // the run has ended: what is left is reading its last output
	failing time.Time // when reads began to fail; zero while they succeed
}

// newPatience is the patience of a command that reads run id through c, and says so on notes.
func newPatience(id string, notes io.Writer, c client.Client) *patience {
	return &patience{id: id, notes: notes, health: func(ctx context.Context) error { return serverHealth(ctx, c, id) }}
}

// serverHealth says whether the server answers (its health check) and can read run id from its database (a
// describe of the run), each within watchEvery: nil, or the *starter.UnreadableError that says which failed.
// The health check alone says SERVING while the server's database is down, and a read that waits for the
// database then waited in silence (seen as a user: logs --follow through PostgreSQL's outage).
func serverHealth(ctx context.Context, c client.Client, id string) error {
	hctx, cancel := context.WithTimeout(ctx, watchEvery)
	defer cancel()
	if _, err := c.CheckHealth(hctx, &client.CheckHealthRequest{}); err != nil {
		if timedOut(err) && listening(ctx, serverAddress()) {
			return &starter.UnreadableError{ID: id, Msg: "its health check got no answer in time though it takes connections: " + err.Error(), ServerSlow: true}
		}
		return &starter.UnreadableError{ID: id, Msg: err.Error(), ServerSilent: true} // "health check error: …"
	}
	dctx, cancel := context.WithTimeout(ctx, watchEvery)
	defer cancel()
	_, err := c.DescribeWorkflowExecution(dctx, id, "")
	var unavailable *serviceerror.Unavailable
	if err != nil && (timedOut(err) || errors.As(err, &unavailable)) {
		return &starter.UnreadableError{ID: id, Msg: "a describe of the run got no answer in time: " + err.Error(), ServerSlow: true}
	}
	return nil
}

// listening says whether something takes TCP connections at addr (host:port) within a second. A server whose
// health check times out although it takes connections is up but slow: seen on a loaded machine with the
// server's PostgreSQL down, where a 2 s health check timed out and the follower said the server was gone.
// A SIGKILLed server's port refuses connections.
func listening(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// followingOn is what a command that has read its run says it does while it cannot read it.
const followingOn = "the run goes on, and this command follows it again once it can be read"

func (p *patience) try(ctx context.Context, read func() error) error {
	for {
		err := p.watched(ctx, p.meanwhile(), read)
		var unreadable *starter.UnreadableError
		switch {
		case err == nil:
			p.seen(nil, "")
			return nil
		case !errors.As(err, &unreadable) || ctx.Err() != nil:
			return err
		case p.failing.IsZero():
			p.seen(err, p.meanwhile())
		case !p.read && time.Since(p.failing) > followPatience:
			return fmt.Errorf("%w (tried for %s)", err, followPatience)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// meanwhile says what try does while it cannot read the run.
func (p *patience) meanwhile() string {
	if p.read && p.ended {
		return "the run has ended, and this command shows its last output once it can be read"
	}
	if p.read {
		return followingOn
	}
	return fmt.Sprintf("trying again for up to %s", followPatience)
}

// watchEvery is how long a read waits before the server is asked whether it answers, and then how often.
const watchEvery = 2 * time.Second

// watched runs read, and while it waits, asks every watchEvery whether the server answers (p.health): a
// server that does not is said at once (meanwhile: what the command does until it can read again), although
// the read itself may wait the outage out in one call (a log read waits up to a minute, and the SDK tries it
// again through the outage). Seen as a user: a 30 s outage that began during a log read left clusterrun run
// and logs --follow silent throughout.
func (p *patience) watched(ctx context.Context, meanwhile string, read func() error) error {
	if p.health == nil {
		return read()
	}
	done := make(chan error, 1)
	go func() { done <- read() }()
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if err := p.health(ctx); err != nil && ctx.Err() == nil {
				p.seen(err, meanwhile)
			}
		}
	}
}

// seen notes how a read went, without waiting: the first failure says so (what follows says what the command
// does meanwhile), and the first read that succeeds after failures says that.
func (p *patience) seen(err error, meanwhile string) {
	if err == nil {
		p.read = true
	}
	switch {
	case err == nil && !p.failing.IsZero():
		fmt.Fprintf(p.notes, "clusterrun: read run %s again after %s\n", p.id, time.Since(p.failing).Round(time.Second))
		p.failing = time.Time{}
	case err != nil && p.failing.IsZero():
		p.failing = time.Now()
		fmt.Fprintf(p.notes, "clusterrun: cannot read run %s for now (%s); %s\n", p.id, whyUnread(err), meanwhile)
	}
}

// whyUnread says why a read of a run failed: a server that does not answer is named as such, with its
// address, rather than by gRPC's "context deadline exceeded".
func whyUnread(err error) string {
	var unreadable *starter.UnreadableError
	if !errors.As(err, &unreadable) {
		return err.Error()
	}
	switch {
	case unreadable.ServerSilent:
		return fmt.Sprintf("the Temporal server at %s does not answer: %v", serverAddress(), err)
	case unreadable.ServerSlow:
		return fmt.Sprintf("the Temporal server at %s is up but did not answer in time, its database may be down or overloaded: %v", serverAddress(), err)
	}
	return err.Error()
}

// timedOut says err is a call that got no answer in time.
func timedOut(err error) bool {
	var deadline *serviceerror.DeadlineExceeded
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &deadline)
}

// serverAddress is the Temporal server the command talks to.
func serverAddress() string {
	if opts, err := conn.Options(); err == nil {
		return opts.HostPort
	}
	return connection.Address
}

// unanswered says, for a call only the server answers (a start, a signal, a list) that it did not answer in
// time, whether the server is up: gRPC's "context deadline exceeded" alone does not tell a server that is gone
// from one whose database is (seen as a user: every command said only that while the server's PostgreSQL was
// down, and the server's health check said SERVING). A read that also waits for a worker (a query, a log read:
// starter.UnreadableError) has its own words, and the server's part only when its describe found the server
// slow. It returns "" for other errors.
func unanswered(err error) string {
	var unreadable *starter.UnreadableError
	var unreached *conn.ReachError
	switch {
	case errors.As(err, &unreached):
		return "" // a dial says itself whether anything listens (conn.silentHint)
	case errors.As(err, &unreadable) && unreadable.ServerSlow:
		return fmt.Sprintf("\nclusterrun: the Temporal server at %s is up but did not answer in time: its database may be down or "+
			"overloaded (see the server's log)", serverAddress())
	case errors.As(err, &unreadable):
		return "" // a read that waits for a worker as well says so itself
	case !timedOut(err):
		return ""
	}
	addr := serverAddress()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, herr := dial(ctx)
	if herr == nil {
		defer c.Close()
		_, herr = c.CheckHealth(ctx, &client.CheckHealthRequest{})
	}
	if herr != nil && !(timedOut(herr) && listening(context.Background(), addr)) {
		return fmt.Sprintf("\nclusterrun: the Temporal server at %s does not answer: is it running, and reachable from here?", addr)
	}
	return fmt.Sprintf("\nclusterrun: the Temporal server at %s is up but did not answer in time: its database may be down or "+
		"overloaded (see the server's log)", addr)
}
