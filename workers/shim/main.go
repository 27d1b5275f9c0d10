// Command clusterrun-shim supervises one task attempt for a clusterrun host worker: it starts the task's process
// tree, records how it ends, and outlives the worker that started it (see package activities/shim). Host
// workers start it; it is not meant to be run by hand.
//
// Usage: clusterrun-shim --ready-fd N RECORD-DIR
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/clusterrun/clusterrun/activities/shim"
)

func main() {
	fs := flag.NewFlagSet("clusterrun-shim", flag.ContinueOnError)
	readyFD := fs.Int("ready-fd", -1, "file descriptor to report the task's start on")
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: clusterrun-shim --ready-fd N RECORD-DIR (started by clusterrun-worker, not by hand)")
		os.Exit(2)
	}
	var ready io.WriteCloser
	if *readyFD >= 0 {
		ready = os.NewFile(uintptr(*readyFD), "ready")
	}
	if err := shim.Run(fs.Arg(0), ready); err != nil {
		fmt.Fprintln(os.Stderr, "clusterrun-shim:", err)
		os.Exit(1)
	}
}
