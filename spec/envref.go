package spec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/clusterrun/clusterrun/internal/flagerr"
)

// An env value may use the environment the task gets from its host, as Ray's env_vars do: ${NAME} is NAME's
// value there (empty when unset), and $$ is one $. So PATH: "/opt/tools/bin:${PATH}" extends the host's PATH
// rather than replace it with a path that ends in the text $PATH. A $ before a name without braces ($PATH) is
// refused: no shell reads the spec, and left as written it cuts the task off from every program the host's
// PATH finds. Any other $ is itself.

// ExpandEnv replaces the references in an env value with lookup's values, and $$ with $.
func ExpandEnv(value string, lookup func(name string) string) (string, error) {
	if !strings.Contains(value, "$") {
		return value, nil
	}
	var b strings.Builder
	err := scanEnv(value, func(text string) { b.WriteString(text) }, func(name string) { b.WriteString(lookup(name)) })
	if err != nil {
		return "", err
	}
	return b.String(), nil
}

// scanEnv reads an env value from the left, giving its text (with $$ as $) to text and each ${NAME}'s NAME to
// ref, in order; or says what is wrong with its first reference that cannot be read.
func scanEnv(value string, text func(string), ref func(name string)) error {
	from := 0 // the text not yet given
	for i := 0; i < len(value); i++ {
		if value[i] != '$' || i+1 == len(value) {
			continue
		}
		switch next := value[i+1]; {
		case next == '$':
			text(value[from : i+1])
			i++
			from = i + 1
		case next == '{':
			end := strings.IndexByte(value[i+2:], '}')
			if end < 0 {
				return fmt.Errorf("has ${ with no closing }: write ${NAME} for the host's value of NAME, or $$ for a $")
			}
			name := value[i+2 : i+2+end]
			if !envNameRE().MatchString(name) {
				return fmt.Errorf("has ${%s}, which names no variable: write ${NAME} for the host's value of NAME, or $$ for a $", shortKey(name))
			}
			text(value[from:i])
			ref(name)
			i += 2 + end
			from = i + 1
		case nameByte(next) && !('0' <= next && next <= '9'):
			n := i + 1
			for n < len(value) && nameByte(value[n]) {
				n++
			}
			name := shortKey(value[i+1 : n])
			return fmt.Errorf("has $%s, which no shell expands here: write ${%s} for the host's value, or $$%s for the text", name, name, name)
		}
	}
	text(value[from:])
	return nil
}

// nameByte says whether c may be in an environment variable's name.
func nameByte(c byte) bool {
	return c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}

// ContractEnv names the CLUSTERRUN_ variables clusterrun sets for a task (docs/spec.md, "The process
// contract"). A spec may neither set a CLUSTERRUN_ name nor refer to one outside this list.
var ContractEnv = []string{
	"CLUSTERRUN_RUN_ID", "CLUSTERRUN_TASK", "CLUSTERRUN_TASK_TYPE", "CLUSTERRUN_TASK_INDEX", "CLUSTERRUN_ATTEMPT",
	"CLUSTERRUN_RESTART_COUNT", "CLUSTERRUN_HOST", "CLUSTERRUN_SOCKET", "CLUSTERRUN_CLUSTER_FILE",
	"CLUSTERRUN_RESULT_FILE", "CLUSTERRUN_ERROR_FILE",
}

const contractPrefix = "CLUSTERRUN_"

// unsetContractReference says what is wrong with value's first ${CLUSTERRUN_...} that clusterrun does not set,
// or "" when each it has is one it sets. value must expand (ExpandEnv).
func unsetContractReference(value string) string {
	var unset string
	_, _ = ExpandEnv(value, func(name string) string {
		if unset == "" && strings.HasPrefix(name, contractPrefix) && !contains(ContractEnv, name) {
			unset = name
		}
		return ""
	})
	if unset == "" {
		return ""
	}
	ref := "${" + shortKey(unset) + "}"
	if meant := meantContractVar(unset); meant != "" {
		return fmt.Sprintf("has %s, which clusterrun does not set for a task: did you mean ${%s}?", ref, meant)
	}
	return fmt.Sprintf("has %s, which clusterrun does not set for a task: a task's CLUSTERRUN_ variables are %s",
		ref, strings.Join(ContractEnv, ", "))
}

// meantContractVar is the contract variable a CLUSTERRUN_ name not in it was likely meant as: the one whose
// name after the prefix is nearest to its own (${CLUSTERRUN_TASK_NAME}: CLUSTERRUN_TASK), or one of the
// variables set without the prefix (${CLUSTERRUN_RANK}: RANK).
func meantContractVar(name string) string {
	byWord := map[string]string{}
	words := make([]string, 0, len(ContractEnv)+len(ReservedEnv))
	for _, n := range ReservedEnv {
		byWord[n] = n
		words = append(words, n)
	}
	for _, n := range ContractEnv {
		w := strings.TrimPrefix(n, contractPrefix)
		byWord[w] = n
		words = append(words, w)
	}
	// Longer words first: Nearest keeps the first of equals, and a misspelt TASK_INDX is one edit from
	// TASK_INDEX but also starts with TASK, which counts as one too.
	slices.SortStableFunc(words, func(a, b string) int { return len(b) - len(a) })
	word := strings.TrimPrefix(name, contractPrefix)
	if len(word) > 64 {
		return "" // a name that long is no typo, and the distance would cost its length per word
	}
	return byWord[flagerr.Nearest(word, words)]
}
