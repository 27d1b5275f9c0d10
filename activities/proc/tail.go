package proc

import (
	"bytes"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/clusterrun/clusterrun/internal/lines"
)

// Tail returns at most maxBytes from the end of the file at path, starting at a line boundary when it can.
// A missing file reads as empty.
func Tail(path string, maxBytes int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-maxBytes, 0)
	buf := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(buf, off)
	buf = buf[:n]
	if off > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 && i < len(buf)-1 {
			buf = buf[i+1:]
		}
	}
	return strings.ToValidUTF8(string(buf), "?")
}

// LastLine returns the last non-empty line of the file as a terminal shows it (a progress bar redrawn with
// carriage returns: its latest drawing), as plain text (lines.Plain: no colours, no escape sequences that a
// terminal showing a status table, or the Web UI showing a failure, would act on or print as garbage), cut to
// maxRunes.
func LastLine(path string, maxRunes int) string {
	all := strings.Split(Tail(path, 4096), "\n")
	tail := ""
	for i := len(all) - 1; i >= 0 && tail == ""; i-- {
		tail = strings.TrimSpace(lines.Plain(lines.LastDrawing(all[i]))) // a colour reset alone is no line
	}
	if utf8.RuneCountInString(tail) > maxRunes {
		r := []rune(tail)
		tail = string(r[:maxRunes-1]) + "…"
	}
	return tail
}

// ReadBounded reads at most maxBytes of a file; truncated reports whether there was more.
// A missing file returns (nil, false, nil).
func ReadBounded(path string, maxBytes int64) (data []byte, truncated bool, err error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > maxBytes {
		return data[:maxBytes], true, nil
	}
	return data, false, nil
}
