package main

import (
	"encoding/json"
	"flag"
	"io"
	"strings"

	"github.com/clusterrun/clusterrun/internal/conn"
)

// talksToTemporal says whether a command dials the Temporal server (and so takes the connection flags).
func talksToTemporal(fs *flag.FlagSet) bool {
	return !strings.HasPrefix(fs.Name(), "task ") && fs.Name() != "validate" && fs.Name() != "codec-key"
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

// addOutputFlag gives a command that prints state -o/--output table|json; check validates it after parsing.
func addOutputFlag(fs *flag.FlagSet) (format *string, check func() error) {
	format = new(string)
	fs.StringVar(format, "output", "table", "table or json")
	fs.StringVar(format, "o", "table", "short for --output")
	return format, func() error {
		*format = strings.ToLower(*format)
		if *format != "table" && *format != "json" {
			return usageErrorf("-o %q: use table or json", *format)
		}
		return nil
	}
}

// printJSON prints v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
