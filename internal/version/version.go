// Package version says which build of clusterrun is running: the module version `go install ...@v` recorded,
// else the commit it was built from.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version may be set at build time: -ldflags "-X github.com/clusterrun/clusterrun/internal/version.Version=v1.2.3".
var Version = ""

// Commit may be set at build time too (the Makefile does), for builds that carry no version control stamp
// (go build -buildvcs=false, or GOFLAGS saying so); the stamp wins where there is one.
var Commit = ""

// String is "PROGRAM VERSION (commit C, GOOS/GOARCH, go1.x)".
func String(program string) string {
	v, commit, dirty := Version, "unknown", false
	if Commit != "" {
		commit = Commit
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				commit = s.Value[:12]
			case s.Key == "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	if dirty {
		commit += "+changes"
	}
	return fmt.Sprintf("%s %s (commit %s, %s/%s, %s)", program, v, commit, runtime.GOOS, runtime.GOARCH, runtime.Version())
}
