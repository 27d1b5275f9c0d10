package spec

import (
	"fmt"
	"strings"
)

// A task type's env is the run's env with the type's own values over it. With the SpecReferences rule, a
// value's ${NAME} of a variable the spec sets reads the spec's value, as a task will see it (the type's, or
// else the run's), and not the host's: BASE: /data/run1 and CKPT: "${BASE}/ckpt" give /data/run1/ckpt. A
// value that names itself extends what it replaces: the run's value, for a type's value the run sets too,
// and otherwise the host's, so PATH: "/opt/x/bin:${PATH}" keeps extending the host's PATH.
//
// The plan does this by writing the referred values into the referring ones, as text that the host expands
// as before: the references left name the host's and the contract's variables only, so hosts of any version
// read them alike.

// mergeEnv is a task type's env: the run's, with the type's values over it, each reference to a variable the
// spec sets written out when specRefs is on; or its problems, one per circle or value too large.
func mergeEnv(run, typ map[string]string, specRefs bool) (map[string]string, []*envProblem) {
	env := make(map[string]string, len(run)+len(typ))
	//workflowcheck:ignore
	for k, v := range run { // map-to-map copies: the order of iteration cannot show
		env[k] = v
	}
	//workflowcheck:ignore
	for k, v := range typ {
		env[k] = v
	}
	if !specRefs {
		return env, nil
	}
	r := &envResolver{run: run, typ: typ, done: map[envKey]resolved{}, bad: map[envKey]bool{}}
	var cycles []*envProblem
	for _, k := range sortedKeys(env) {
		v, err := r.resolve(envKey{name: k, typ: hasKey(typ, k)})
		switch {
		case err != nil && !err.known:
			cycles = append(cycles, err)
		case err == nil && v.changed:
			env[k] = v.text // else as written, byte for byte
		}
	}
	if cycles != nil {
		return nil, cycles
	}
	return env, nil
}

// envKey is one value of the spec's env: the run's or the task type's.
type envKey struct {
	name string
	typ  bool
}

func (k envKey) path(typ string) string {
	if k.typ {
		return "tasks." + typ + ".env." + shortKey(k.name)
	}
	return "env." + shortKey(k.name)
}

// resolved is a value with the spec's values it refers to written in, as text the host expands to what it
// means (a $ of its own text written $$, so that no text next to it can make it a reference); changed when it
// refers to any of the spec's values.
type resolved struct {
	text    string
	changed bool
}

// envProblem is a value that refers back to itself through others (chain: the values from it round to it),
// or one that grew too large with the values it refers to.
type envProblem struct {
	at    envKey
	chain []envKey
	large bool // no circle: with what it refers to, the value (or all the values built) grew too large
	known bool // a value that refers to one already reported
}

func (c *envProblem) message(typ, value string) string {
	if c.large {
		return fmt.Sprintf("%s, with the values it refers to, takes a task's env past %d KiB, more than a task may carry: pass large values in a file instead",
			short(value), MaxTaskBytes>>10)
	}
	chain := make([]string, len(c.chain))
	for i, k := range c.chain {
		chain[i] = k.path(typ)
	}
	return fmt.Sprintf("%s refers back to itself (%s): a value may use the spec's other values, but not in a circle; write one of them out",
		short(value), strings.Join(chain, " → "))
}

type envResolver struct {
	run, typ map[string]string
	done     map[envKey]resolved
	bad      map[envKey]bool // in a circle, or too large: reported once
	stack    []envKey
	// built counts the bytes of the values written out so far. A task type's env carries at most
	// MaxTaskBytes, and the values it does not carry (a run's value a type's replaces) at most as much again:
	// past that, a hostile spec (a chain of a thousand values that each hold the one before) is stopped
	// before it costs a host worker memory.
	built int
}

// resolve writes the spec's values that k's value refers to into it.
func (r *envResolver) resolve(k envKey) (resolved, *envProblem) {
	if v, ok := r.done[k]; ok {
		return v, nil
	}
	if r.bad[k] {
		return resolved{}, &envProblem{at: k, known: true}
	}
	for i, open := range r.stack {
		if open == k {
			for _, s := range r.stack[i:] {
				r.bad[s] = true
			}
			return resolved{}, &envProblem{at: k, chain: append(append([]envKey(nil), r.stack[i:]...), k)}
		}
	}
	raw := r.run[k.name]
	if k.typ {
		raw = r.typ[k.name]
	}
	r.stack = append(r.stack, k)
	defer func() { r.stack = r.stack[:len(r.stack)-1] }()
	var b strings.Builder
	var failed *envProblem
	changed := false
	if scanEnv(raw, func(text string) { b.WriteString(strings.ReplaceAll(text, "$", "$$")) }, func(name string) {
		to, ok := r.target(k, name)
		if !ok || failed != nil {
			b.WriteString("${" + name + "}")
			return
		}
		v, err := r.resolve(to)
		if err == nil && (b.Len()+len(v.text) > MaxTaskBytes || r.built+b.Len()+len(v.text) > 2*MaxTaskBytes) {
			err = &envProblem{at: k, large: true}
			r.bad[k] = true
		}
		if err != nil {
			failed = err
			return
		}
		b.WriteString(v.text)
		changed = true
	}) != nil {
		// Refused by EnvReferences, which comes with SpecReferences: as written.
		return resolved{text: raw}, nil
	}
	if failed != nil {
		r.bad[k] = true // its error goes up once, to be reported where it is (at); later looks find it known
		return resolved{}, failed
	}
	v := resolved{text: b.String(), changed: changed}
	if changed {
		r.built += len(v.text)
	}
	r.done[k] = v
	return v, nil
}

// target is the spec's value that a ${name} in k's value reads, if the spec has one: the task type's, or else
// the run's; for k's own name, the value k replaces (the run's, for a type's value), or none: the host's.
func (r *envResolver) target(k envKey, name string) (envKey, bool) {
	switch {
	case name == k.name:
		return envKey{name: name}, k.typ && hasKey(r.run, name)
	case hasKey(r.typ, name):
		return envKey{name: name, typ: true}, true
	case hasKey(r.run, name):
		return envKey{name: name}, true
	}
	return envKey{}, false
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}
