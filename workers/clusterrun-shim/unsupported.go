//go:build !linux

// Command clusterrun-shim, the task supervisor, runs on Linux only, beside clusterrun-worker.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "clusterrun-shim runs on Linux only, beside clusterrun-worker")
	os.Exit(2)
}
