//go:build !linux

// Command clusterrun-worker runs tasks on Linux hosts only: it relies on process groups, Pdeathsig, cgroups v2
// and /proc. Submit and follow runs from other systems with the clusterrun CLI.
package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	fmt.Fprintf(os.Stderr, "clusterrun-worker runs on Linux only (it relies on Linux process groups, Pdeathsig, cgroups v2 and /proc); "+
		"this is %s. Run host workers on Linux machines; the clusterrun CLI submits and follows runs from %s.\n", runtime.GOOS, runtime.GOOS)
	os.Exit(2)
}
