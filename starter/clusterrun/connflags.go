package main

import (
	"encoding/json"
	"flag"
	"io"
	"reflect"
	"strings"

	"github.com/clusterrun/clusterrun/internal/conn"
)

// talksToTemporal says whether a command dials the Temporal server (and so takes the connection flags).
func talksToTemporal(fs *flag.FlagSet) bool {
	return !strings.HasPrefix(fs.Name(), "task ") && fs.Name() != "validate" && !strings.HasPrefix(fs.Name(), "codec-")
}

// connection is the command's connection flags, which dial passes to the library.
var connection conn.Connection

// addConnectionFlags gives a command that dials the Temporal server the temporal CLI's connection flags.
func addConnectionFlags(fs *flag.FlagSet) {
	if talksToTemporal(fs) {
		conn.AddFlags(fs, &connection)
		conn.AddAPIKeyFlag(fs, &connection)
	}
}

// Output formats, as the temporal CLI's -o names them where it has them: a table (its "text"), indented JSON,
// or JSON lines (one object per line; a list's rows each on its own line).
const (
	outTable = "table"
	outJSON  = "json"
	outJSONL = "jsonl"
)

// addOutputFlag gives a command that prints state -o/--output table|json|jsonl; check validates it after
// parsing, and takes the temporal CLI's "text" for table.
func addOutputFlag(fs *flag.FlagSet) (format *string, check func() error) {
	format = new(string)
	fs.StringVar(format, "output", outTable, "table (or text), json or jsonl")
	fs.StringVar(format, "o", outTable, "short for --output")
	return format, func() error {
		*format = strings.ToLower(*format)
		if *format == "text" {
			*format = outTable
		}
		if *format != outTable && !isJSON(*format) {
			return usageErrorf("-o %q: use table (or text), json or jsonl", *format)
		}
		return nil
	}
}

// isJSON says whether an output format is JSON of either kind.
func isJSON(format string) bool { return format == outJSON || format == outJSONL }

// printJSON prints v as format says: indented JSON, or JSON lines, where a list's rows go one per line.
func printJSON(w io.Writer, format string, v any) error {
	enc := json.NewEncoder(w)
	if format != outJSONL {
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	rows := reflect.ValueOf(v)
	if rows.Kind() != reflect.Slice {
		return enc.Encode(v)
	}
	for i := range rows.Len() {
		if err := enc.Encode(rows.Index(i).Interface()); err != nil {
			return err
		}
	}
	return nil
}

// jsonTo is where a command prints its result as JSON, and in which format; nil prints no JSON.
type jsonTo struct {
	w      io.Writer
	format string
}

func (j *jsonTo) print(v any) error { return printJSON(j.w, j.format, v) }
