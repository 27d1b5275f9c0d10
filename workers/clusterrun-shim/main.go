//go:build linux

// Command clusterrun-shim is a clusterrun host worker's task supervisor: one per run and host, it starts that
// run's task processes, records how each ends, and outlives the worker that started it (see package
// activities/shim). Host workers start it; it is not meant to be run by hand.
//
// Usage: clusterrun-shim --ready-fd N [--idle D] [--log PATH] SOCKET
package main

import (
	"os"

	"github.com/clusterrun/clusterrun/activities/shim"
)

func main() { os.Exit(shim.Main(os.Args[1:])) }
