package spec

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	yaml4 "go.yaml.in/yaml/v4"
)

// SyntaxError is a spec that YAML cannot read: where it went wrong, what, and the lines around it.
type SyntaxError struct {
	Line, Column int    // 1-based, as an editor counts; 0 when nothing says where
	Message      string // what is wrong, and how to fix it where the parser's own words say little
	Excerpt      string // the lines at fault, each with a caret under its column; "" without a position
}

func (e *SyntaxError) Error() string {
	if e.Line == 0 {
		return "run spec is not valid YAML or JSON: " + e.Message
	}
	return fmt.Sprintf("run spec is not valid YAML or JSON: line %d, column %d: %s", e.Line, e.Column, e.Message)
}

// syntaxError describes why yaml.v3 refused data. yaml.v3 decides (every spec has been read by it, and it stays
// the judge of what a spec means), but its parser names the line before the one where the enclosing block
// began, not the line at fault (a mis-indented key on line 40 of a mapping that starts on line 3 is reported at
// line 2). yaml v4, the same parser's successor, keeps both positions as fields: it is asked again only to say
// where. Where v4 reads the text without a complaint, v3's own words are kept.
func syntaxError(data []byte, v3err error) *SyntaxError {
	var doc yaml4.Node
	err := yaml4.Unmarshal(data, &doc)
	if err == nil {
		var v any
		err = doc.Decode(&v)
	}
	var le *yaml4.LoadError
	if !errors.As(err, &le) || le.Mark.Line == 0 {
		msg := strings.TrimPrefix(v3err.Error(), "yaml: ")
		if bytes.ContainsRune(data, '\t') && strings.Contains(msg, "cannot start any token") {
			msg += " (a tab? YAML indents with spaces only)"
		}
		return &SyntaxError{Message: msg}
	}
	at, msg := describe(data, le)
	e := &SyntaxError{Line: at.Line, Column: at.Column, Message: msg}
	if ctx := le.ContextMark; ctx.Line > 0 && ctx.Line < at.Line {
		e.Excerpt = excerpt(data, position{ctx.Line, ctx.Column}, position{at.Line, at.Column})
	} else {
		e.Excerpt = excerpt(data, position{}, position{at.Line, at.Column})
	}
	return e
}

// describe picks the position to report and says what is wrong there, in the spec author's terms for the mistakes
// people make most: an indentation that matches no block, a bracket or quote not closed, a second ": " on a line.
func describe(data []byte, le *yaml4.LoadError) (yaml4.Mark, string) {
	at, ctx := le.Mark, le.ContextMark
	switch {
	case le.Message == "did not find expected key" && le.ContextMsg == "while parsing a block mapping" &&
		strings.HasPrefix(strings.TrimLeft(lineAt(data, at.Line), " "), "- "):
		return at, fmt.Sprintf("a list item where the mapping that starts at line %d expects a key: write it as "+
			"key: value, or indent the list under the key it belongs to", ctx.Line)
	case le.Message == "did not find expected key" && le.ContextMsg == "while parsing a block mapping":
		return at, fmt.Sprintf("this line does not line up with the keys of the mapping that starts at line %d: "+
			"indent it as far as that mapping's keys, or further under one of them", ctx.Line)
	case le.Message == "did not find expected ',' or ']'" && ctx.Line > 0:
		return at, fmt.Sprintf("the list opened with [ at line %d, column %d is not closed: add the ] (or a comma "+
			"before this, if the list goes on)", ctx.Line, ctx.Column)
	case le.Message == "did not find expected ',' or '}'" && ctx.Line > 0:
		return at, fmt.Sprintf("the mapping opened with { at line %d, column %d is not closed: add the } (or a "+
			"comma before this, if the mapping goes on)", ctx.Line, ctx.Column)
	case le.Message == "found unexpected end of stream" && strings.HasPrefix(le.ContextMsg, "while scanning a quoted") && ctx.Line > 0:
		return ctx, "this quoted text is not closed: end it with the same quote it starts with"
	case le.Message == "mapping values are not allowed in this context":
		return at, "a second \": \" on one line: quote a value that holds \": \", or write a nested mapping on lines of its own"
	case le.Message == "found character that cannot start any token" && lineAt(data, at.Line) != "" &&
		strings.ContainsRune(lineAt(data, at.Line), '\t'):
		return at, le.Message + " (a tab? YAML indents with spaces only)"
	}
	if le.ContextMsg != "" && ctx.Line > 0 && ctx != at { // a context where the fault is says nothing more
		return at, fmt.Sprintf("%s (%s that starts at line %d, column %d)", le.Message, le.ContextMsg, ctx.Line, ctx.Column)
	}
	return at, le.Message
}

// position is a line and a column, both 1-based.
type position struct{ line, column int }

// excerpt shows the line of from (when it is set: where the block at fault began) and the line of at, each with a
// caret under its column, and "..." for the lines between.
func excerpt(data []byte, from, at position) string {
	var b strings.Builder
	width := len(fmt.Sprint(at.line))
	show := func(p position) {
		line, col := window(lineAt(data, p.line), p.column)
		fmt.Fprintf(&b, "  %*d | %s\n", width, p.line, line)
		fmt.Fprintf(&b, "  %*s | %s^\n", width, "", caretPad(line, col))
	}
	if from.line > 0 {
		show(from)
		if at.line > from.line+1 {
			fmt.Fprintf(&b, "  %*s | ...\n", width, "")
		}
	}
	show(at)
	return strings.TrimSuffix(b.String(), "\n")
}

// lineAt is the text of line n (1-based), "" past the end.
func lineAt(data []byte, n int) string {
	lines := strings.Split(string(data), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return strings.TrimSuffix(lines[n-1], "\r")
}

// window cuts a long line to the part around column col, and gives col's place in what is left.
func window(line string, col int) (string, int) {
	const before, width = 60, 120
	r := []rune(line)
	if len(r) <= width {
		return line, col
	}
	start := max(0, min(col-1-before, len(r)-width))
	cut := string(r[start:min(len(r), start+width)])
	if start > 0 {
		cut, col = "..."+cut, col-start+3
	}
	if start+width < len(r) {
		cut += "..."
	}
	return cut, col
}

// caretPad is the blank space that puts a caret under column col (1-based, in characters) of line: tabs are
// kept, so that the caret lines up however the terminal shows them.
func caretPad(line string, col int) string {
	var b strings.Builder
	for i, r := range []rune(line) {
		if i >= col-1 {
			break
		}
		if r == '\t' {
			b.WriteRune('\t')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}
