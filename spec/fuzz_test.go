package spec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Run with `make fuzz` (FUZZTIME per target); `go test` alone runs the seeds and the corpus in testdata/fuzz.

func fuzzSeeds(f *testing.F) {
	f.Add([]byte(demoYAML))
	for _, tc := range hostileSpecs {
		if len(tc.doc) <= 8<<10 { // large seeds make the fuzzer's minimisation crawl; the unit tests hold them
			f.Add([]byte(tc.doc))
		}
	}
	examples, _ := filepath.Glob("../examples/*.yaml")
	more, _ := filepath.Glob("../examples/*/*.yaml")
	for _, p := range append(examples, more...) {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
}

// FuzzParse: the CLI's path (YAML or JSON text, decoded, validated, planned). Nothing may panic, and a spec that
// passes must plan within the bounds.
func FuzzParse(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		checkPlan(t, s)
	})
}

// FuzzWorkflowInput: the workflow's path (the JSON input as the SDK decodes it, then planned inside workflow
// code on every host worker).
func FuzzWorkflowInput(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var s RunSpec
		if json.Unmarshal(data, &s) != nil {
			return // the SDK refuses the input before the workflow sees it
		}
		if problems := s.Validate(); len(problems) > 0 {
			if _, err := NewPlan(&s); err == nil {
				t.Fatalf("NewPlan accepted a spec Validate refuses: %v", problems)
			}
			checkRefusal(t, &InvalidSpecError{Problems: problems})
			return
		}
		checkPlan(t, &s)
	})
}

func checkRefusal(t *testing.T, err error) {
	if ie, ok := err.(*InvalidSpecError); ok {
		if len(ie.Problems) > MaxProblems+1 {
			t.Fatalf("%d problems reported; at most %d", len(ie.Problems), MaxProblems+1)
		}
		if n := len(ie.Error()); n > 128<<10 {
			t.Fatalf("the refusal is %d bytes long", n)
		}
	}
}

func checkPlan(t *testing.T, s *RunSpec) {
	p, err := NewPlan(s)
	if err != nil {
		t.Fatalf("a valid spec does not plan: %v", err)
	}
	if len(p.Tasks) == 0 || len(p.Tasks) > MaxTasks {
		t.Fatalf("plan has %d tasks", len(p.Tasks))
	}
	total := 0
	for _, task := range p.Tasks {
		n := len(task.WorkingDir)
		for _, a := range task.Command {
			n += len(a) + 1
		}
		for k, v := range task.Env {
			n += len(k) + len(v) + 2
		}
		if n > MaxTaskBytes {
			t.Fatalf("task %s carries %d bytes", task.Name, n)
		}
		total += n
	}
	if total > MaxPlanBytes {
		t.Fatalf("plan carries %d bytes", total)
	}
	if p.MaxRunTime < 0 || p.MaxRunTime+p.StopGracePeriod+p.HeartbeatTimeout+p.StartTimeout < p.MaxRunTime {
		t.Fatalf("durations overflow: %+v", p)
	}
}
