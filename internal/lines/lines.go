// Package lines reads task output the way a terminal shows it: a line that a progress bar (tqdm's, Keras',
// pip's) redraws with carriage returns shows only its last drawing.
package lines

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// LastDrawing is what a terminal shows of a line (without its newline) redrawn with carriage returns: the text
// after its last one, carriage returns at its end (a CRLF line end, a bar drawn as text then CR) left out. A
// line without one is returned as it is.
func LastDrawing(line string) string {
	body := strings.TrimRight(line, "\r")
	if i := strings.LastIndexByte(body, '\r'); i >= 0 {
		return body[i+1:]
	}
	return body
}

// drawingWindow is how far back from a line's end Drawing looks: a progress bar's drawing is far shorter, and a
// line still being written can be megabytes of them.
const drawingWindow = 4 << 10

// Drawing is the latest drawing of part, the end of a line with no newline yet, if the line is redrawn with
// carriage returns; otherwise "". It is plain text (no escape sequences, control characters or invalid UTF-8),
// cut to max bytes at a character's start.
func Drawing(part []byte, max int) string {
	if bytes.IndexByte(part[len(part)-min(len(part), drawingWindow):], '\r') < 0 {
		return ""
	}
	return Unfinished(part, max)
}

// Unfinished is what a line with no newline yet shows now, part being its end: its latest drawing when it is
// redrawn with carriage returns, else the text so far (of its last 4 KiB), as Drawing gives it; "" when that
// is blank.
func Unfinished(part []byte, max int) string {
	part = part[len(part)-min(len(part), drawingWindow):]
	d := strings.TrimRightFunc(Plain(LastDrawing(string(part))), func(r rune) bool { return r == ' ' })
	if strings.TrimSpace(d) == "" {
		return ""
	}
	if len(d) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(d[cut]) {
			cut--
		}
		d = d[:cut]
	}
	return d
}

// Plain is s as plain text, for a line a task wrote to stand in a table, a message or the Web UI: escape
// sequences (colours, cursor moves, a window title's OSC string) and other control characters are left out, a
// tab is a space, and invalid UTF-8 goes.
func Plain(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == 0x1b && i+1 < len(s) && s[i+1] == '[':
			// A control sequence: ESC [ parameters and intermediates, then one final byte in @ to ~.
			i += 2
			for i < len(s) && (s[i] < 0x40 || s[i] > 0x7e) {
				i++
			}
		case c == 0x1b && i+1 < len(s) && strings.IndexByte("]P^_X", s[i+1]) >= 0:
			// A string (OSC, DCS, PM, APC, SOS): up to BEL or ESC \.
			i += 2
			for i < len(s) && s[i] != 0x07 && !(s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\') {
				i++
			}
			if i < len(s) && s[i] == 0x1b {
				i++
			}
		case c == 0x1b:
			i++ // ESC and the one character it introduces
		case c == '\t':
			b.WriteByte(' ')
		case c < 0x20 || c == 0x7f:
		case c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] <= 0x9f:
			i++ // a C1 control character (U+0080 to U+009F), which some terminals act on
		default:
			b.WriteByte(c)
		}
	}
	return strings.ToValidUTF8(b.String(), "")
}
