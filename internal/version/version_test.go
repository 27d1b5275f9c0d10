package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

// A build with no version control stamp (go build -buildvcs=false, as GOFLAGS may say) names the commit the
// Makefile passed; one with a stamp names the stamp's.
func TestString_NamesTheCommitTheBuildWasGiven(t *testing.T) {
	defer func(v, c string) { Version, Commit = v, c }(Version, Commit)
	Version, Commit = "v1.2.3", "0123456789ab"
	got := String("clusterrun")
	stamped := false
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			stamped = stamped || s.Key == "vcs.revision"
		}
	}
	if !strings.HasPrefix(got, "clusterrun v1.2.3 (commit ") {
		t.Fatalf("got %q", got)
	}
	if !stamped && !strings.Contains(got, "(commit 0123456789ab, ") {
		t.Fatalf("got %q, want the commit the build was given", got)
	}
}
