package spec

import (
	"fmt"
	"strings"
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
	for i := 0; i < len(value); i++ {
		if value[i] != '$' || i+1 == len(value) {
			b.WriteByte(value[i])
			continue
		}
		switch next := value[i+1]; {
		case next == '$':
			b.WriteByte('$')
			i++
		case next == '{':
			end := strings.IndexByte(value[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("has ${ with no closing }: write ${NAME} for the host's value of NAME, or $$ for a $")
			}
			name := value[i+2 : i+2+end]
			if !envNameRE().MatchString(name) {
				return "", fmt.Errorf("has ${%s}, which names no variable: write ${NAME} for the host's value of NAME, or $$ for a $", shortKey(name))
			}
			b.WriteString(lookup(name))
			i += 2 + end
		case nameByte(next) && !('0' <= next && next <= '9'):
			n := i + 1
			for n < len(value) && nameByte(value[n]) {
				n++
			}
			name := shortKey(value[i+1 : n])
			return "", fmt.Errorf("has $%s, which no shell expands here: write ${%s} for the host's value, or $$%s for the text", name, name, name)
		default:
			b.WriteByte('$')
		}
	}
	return b.String(), nil
}

// nameByte says whether c may be in an environment variable's name.
func nameByte(c byte) bool {
	return c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}
