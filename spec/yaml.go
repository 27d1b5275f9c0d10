package spec

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	yaml "go.yaml.in/yaml/v3"
)

// yamlToJSON reads a spec written in YAML (or JSON, which YAML 1.2 contains) as YAML 1.2 reads it: only true
// and false are booleans, so an env variable N or Y keeps its name (YAML 1.1 read them, and yes, no, on and
// off, as booleans, and a task got variables named true and false). A key given twice is an error, not the
// last one silently winning, and a date stays the text it was written as.
func yamlToJSON(data []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	asWritten(&doc)
	var v any
	if err := doc.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(jsonable(v))
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
