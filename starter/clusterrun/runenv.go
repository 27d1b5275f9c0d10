package main

import (
	"errors"
	"strings"

	"github.com/clusterrun/clusterrun/spec"
)

// envFlags are run's --env NAME=VALUE settings, in the order given (a name given twice: the last wins).
type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, " ") }

func (e *envFlags) Set(v string) error {
	name, _, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return errors.New("want NAME=VALUE, e.g. --env LR=0.01")
	}
	*e = append(*e, v)
	return nil
}

// applyEnv sets each --env over the spec's env: at the run's level, and in every task type whose own env sets
// the name (which would otherwise win over the run's value), so that the value given is the one every task
// gets. The spec is checked again with them, as a spec that set them itself would be.
func applyEnv(s *spec.RunSpec, sets envFlags) error {
	if len(sets) == 0 {
		return nil
	}
	if s.Env == nil {
		s.Env = map[string]string{}
	}
	for _, kv := range sets {
		name, value, _ := strings.Cut(kv, "=")
		s.Env[name] = value
		for typ, t := range s.Tasks {
			if _, ok := t.Env[name]; ok {
				t.Env[name] = value
				s.Tasks[typ] = t
			}
		}
	}
	if _, err := spec.NewPlan(s); err != nil {
		var invalid *spec.InvalidSpecError
		if !errors.As(err, &invalid) {
			return usageErrorf("--env: %v", err)
		}
		lines := []string{"the spec with --env is not valid:"}
		for _, p := range invalid.Problems {
			lines = append(lines, "  "+p.String())
		}
		return usageErrorf("%s", strings.Join(lines, "\n"))
	}
	return nil
}
