package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// yamlToJSON reads a spec written in YAML (or JSON, which YAML 1.2 contains) as YAML 1.2 reads it: only true
// and false are booleans, so an env variable N or Y keeps its name (YAML 1.1 read them, and yes, no, on and
// off, as booleans, and a task got variables named true and false). A key given twice is an error, not the
// last one silently winning, and a date stays the text it was written as.
func yamlToJSON(data []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if err := secondDocument(dec); err != nil {
		return nil, err
	}
	asWritten(&doc)
	var v any
	if err := doc.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(jsonable(v))
}

// secondDocument refuses a second YAML document after the first (specs put one after another in a file, after a
// "---"), which would otherwise be dropped without a word. An empty one, as a "---" that ends a file, is no
// document.
func secondDocument(dec *yaml.Decoder) error {
	var next yaml.Node
	err := dec.Decode(&next)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(next.Content) == 0 || next.Content[0].ShortTag() == "!!null" && next.Content[0].Value == "" {
		return secondDocument(dec)
	}
	return &SyntaxError{Line: next.Line, Column: next.Column,
		Message: "a second YAML document starts here: a spec is one document, so put each run in a file of its own"}
}

// asWritten makes every key, and every date or time written without quotes, the string it was written as: a
// key TRUE, ~ or 1.0 is "TRUE", "~" or "1.0", not true, null or 1. Aliases are not followed: their anchors are
// in the tree once, so the walk is linear in the document.
func asWritten(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!timestamp" {
		n.Tag = "!!str"
	}
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 && c.Kind == yaml.ScalarNode && c.ShortTag() != "!!merge" {
			c.Tag = "!!str"
		}
		asWritten(c)
	}
}

// jsonable turns what YAML decoded into what JSON can hold: keys that are not strings (a complex key) become
// their text, and infinities and NaN become text too, for the schema check to name.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = jsonable(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
	}
	return v
}

// placeProblems gives each problem the line and column of the field its path names, or of the nearest field
// around it that is written (a missing field: its mapping), read from the spec's text once more. Only an
// invalid spec pays for it.
func placeProblems(data []byte, problems []Problem) {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return
	}
	at := map[string]position{}
	fieldPositions(&doc, "", at)
	for i := range problems {
		for path := problems[i].Path; path != ""; path = parentPath(path) {
			if p, ok := at[path]; ok {
				problems[i].Line, problems[i].Column = p.line, p.column
				break
			}
		}
	}
}

// fieldPositions records where each field path of n is written, as problems name paths ("tasks.chief.replicas",
// "command[1]"): a mapping's entry at its key, a list's element at itself. Aliases are not followed, so the
// walk is linear in the document (asWritten), and a path written twice keeps its first place.
func fieldPositions(n *yaml.Node, path string, at map[string]position) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			fieldPositions(c, path, at)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, shortKey(k.Value))
			if _, ok := at[p]; !ok {
				at[p] = position{k.Line, k.Column}
			}
			fieldPositions(v, p, at)
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if _, ok := at[p]; !ok {
				at[p] = position{e.Line, e.Column}
			}
			fieldPositions(e, p, at)
		}
	}
}

// parentPath is the path of the field around path's: "tasks.chief" for "tasks.chief.replicas", "command" for
// "command[1]", "" at the top.
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}
