package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

const hostsUsage = `List the host workers: their pools, slots, the tasks they run, and when they last reported (every 10s).

Usage: clusterrun hosts [--all] [-o table|json|jsonl]

A host is live when it reported within the last 30s and is not shutting down; runs place their unpinned tasks
on the live hosts of each task's pool (see placement in docs/spec.md). UNPINNED counts the tasks that take one
of the host's SLOTS; RUNNING counts every task there, pinned ones too. LOG RETENTION is the host's
--log-retention: how long after their last write it keeps an ended run's logs (off: always; -: a worker too old
to say). A host whose --log-dir is nearly full (less than a tenth and less than 1 GiB free) is said after the
table, on stderr.

Example:
  clusterrun hosts
`

func cmdHosts(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hosts", flag.ContinueOnError)
	all := fs.Bool("all", false, "also hosts that are no longer live (silent for more than 30s, or stopped)")
	output, checkOutput := addOutputFlag(fs)
	if _, err := parse(fs, hostsUsage, args, 0, 0, stderr); err != nil {
		return err
	}
	if err := checkOutput(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	hosts, err := readHosts(ctx, c)
	if err != nil {
		return err
	}
	shown := hosts[:0]
	for _, h := range hosts {
		if h.Live || *all {
			shown = append(shown, h)
		}
	}
	if isJSON(*output) {
		return printJSON(stdout, *output, shown)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tSTATE\tPOOLS\tSLOTS\tUNPINNED\tRUNNING\tADDR\tLAST SEEN\tLOG RETENTION")
	for _, h := range shown {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s ago\t%s\n", h.Host, hostState(h), strings.Join(h.Pools, ","), h.Slots, h.Unpinned,
			h.Running, h.Addr, time.Since(h.LastSeen).Round(time.Second), logRetention(h))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(shown) == 0 {
		fmt.Fprintln(stderr, "no live host; see every host that ever reported with --all")
	}
	for _, note := range diskNotes(shown) {
		fmt.Fprintln(stderr, note)
	}
	return nil
}

// diskNotes warn of the hosts whose log folder's file system is nearly full: their tasks' output is lost once
// it is (a task that fails then says so, but only then).
func diskNotes(hosts []workflows.HostEntry) []string {
	var out []string
	for _, h := range hosts {
		if d := h.LogDisk; d != nil && d.Low() {
			out = append(out, fmt.Sprintf("%s: its --log-dir has %s free of %s; its tasks' output is lost once it is full: "+
				"free space there (old runs' log folders), or move --log-dir", h.Host, spec.FormatSize(d.Free), spec.FormatSize(d.Size)))
		}
	}
	return out
}

// errNoHosts is readHosts' answer when no host worker has ever reported.
var errNoHosts = &exitError{code: 1, msg: "no host worker has reported yet; start one with clusterrun-worker (or make up)"}

// readHosts reads the host registry: every host worker that has reported, live or not.
func readHosts(ctx context.Context, c client.Client) ([]workflows.HostEntry, error) {
	v, err := c.QueryWorkflow(ctx, workflows.HostRegistryID, "", workflows.QueryHosts)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil, errNoHosts
	}
	if err != nil {
		return nil, starterClient(c).QueryError(ctx, "read the host registry", workflows.HostRegistryID, err)
	}
	var hosts []workflows.HostEntry
	if err := v.Get(&hosts); err != nil {
		return nil, err
	}
	return hosts, nil
}

// logRetention is a host's LOG RETENTION cell: its --log-retention, "off" when it keeps every run's logs, "-"
// when its worker does not report it.
func logRetention(h workflows.HostEntry) string {
	switch h.LogRetention {
	case "":
		return "-"
	case "0":
		return "off"
	}
	return h.LogRetention
}

func hostState(h workflows.HostEntry) string {
	switch {
	case h.Stopping:
		return "stopped"
	case !h.Live:
		return "silent"
	case h.Drained:
		return "drained"
	}
	return "ready"
}
