package activities

import (
	"fmt"
	"path"
	"strings"
)

// DefaultWithheld names what a host worker keeps from its tasks unless an operator passes it: its Temporal
// connection (an API key, TLS keys, the address and namespace) and its own configuration. A spec's env may still
// set any of these for its tasks.
var DefaultWithheld = []string{"TEMPORAL_*", "CLUSTERRUN_WORKER_*", "CLUSTERRUN_CODEC_*"}

// EnvPolicy says which of the host worker's own environment variables its tasks inherit. Patterns are
// path.Match globs on the variable's name ("TEMPORAL_*", "AWS_SECRET_ACCESS_KEY").
type EnvPolicy struct {
	// Withhold is kept from tasks, on top of DefaultWithheld.
	Withhold []string
	// Pass is inherited even where a Withhold pattern (or a default one) matches.
	Pass []string
}

// CheckEnvPatterns says which pattern of a flag is malformed, if one is.
func CheckEnvPatterns(flag string, patterns []string) error {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil || p == "" || strings.ContainsAny(p, "=/") {
			return fmt.Errorf("%s %q: not a variable name or glob; use e.g. TEMPORAL_* or AWS_SECRET_ACCESS_KEY", flag, p)
		}
	}
	return nil
}

// Filter returns env (KEY=VALUE entries) without what the policy withholds.
func (p EnvPolicy) Filter(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if p.withholds(name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (p EnvPolicy) withholds(name string) bool {
	if matchAny(p.Pass, name) {
		return false
	}
	return matchAny(DefaultWithheld, name) || matchAny(p.Withhold, name)
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}
