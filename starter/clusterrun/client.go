package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/client"
	"golang.org/x/sys/unix"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/internal/flagerr"
	"github.com/clusterrun/clusterrun/internal/lines"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/starter"
	"github.com/clusterrun/clusterrun/workflows"
)

// dial connects with the connection flags of the command (or the environment and config file).
func dial(ctx context.Context) (client.Client, error) {
	c := connection
	sc, err := starter.Dial(ctx, starter.Connection{Address: c.Address, Namespace: c.Namespace, APIKey: c.APIKey, Profile: c.Profile,
		ConfigFile: c.ConfigFile, TLS: c.TLS, TLSCertPath: c.TLSCertPath, TLSKeyPath: c.TLSKeyPath, TLSCAPath: c.TLSCAPath,
		TLSServerName: c.TLSServerName, TLSDisableHostVerification: c.TLSDisableHostVerification})
	if err != nil {
		return nil, err
	}
	return sc.Temporal(), nil
}

// runOf is the library's handle on run id, over the command's connection.
func runOf(c client.Client, id string) *starter.Run {
	return starterClient(c).Run(id)
}

// starterClient is the library's client over the command's connection, in its namespace.
func starterClient(c client.Client) *starter.Client {
	ns := client.DefaultNamespace
	if opts, err := conn.Options(); err == nil {
		ns = opts.Namespace
	}
	return starter.NewClient(c, ns)
}

// stdin is where a spec named "-" is read from.
var stdin io.Reader = os.Stdin

// loadSpec reads and validates a spec file, or standard input for "-"; every problem is listed, one per line.
func loadSpec(path string) (*spec.RunSpec, error) {
	data, err := readSpec(path)
	if err != nil {
		return nil, usageErrorf("read spec: %v%s", err, specFileHint(path, err))
	}
	path = specName(path)
	s, err := spec.Parse(data)
	var invalid *spec.InvalidSpecError
	var syntax *spec.SyntaxError
	switch {
	case errors.As(err, &syntax) && syntax.Line > 0:
		// file:line:column, as compilers write it, so that an editor can jump there
		return nil, usageErrorf("%s:%d:%d: run spec is not valid YAML or JSON: %s\n%s", path, syntax.Line, syntax.Column,
			syntax.Message, syntax.Excerpt)
	case errors.As(err, &invalid):
		lines := []string{fmt.Sprintf("%s is not a valid run spec (%d problem(s)):", path, len(invalid.Problems))}
		problems := slices.Clone(invalid.Problems)
		slices.SortStableFunc(problems, byPlace) // top to bottom, as the file reads
		for _, p := range problems {
			if p.Line > 0 { // file:line:column, as for a syntax error
				lines = append(lines, fmt.Sprintf("  %s:%d:%d: %s", path, p.Line, p.Column, p))
			} else {
				lines = append(lines, "  "+p.String())
			}
		}
		return nil, usageErrorf("%s", strings.Join(lines, "\n"))
	case err != nil:
		return nil, usageErrorf("%s: %v", path, err)
	}
	return s, nil
}

// byPlace orders problems by where they are written; those with no place ("name: required", "and 3 more
// problems") keep their order after the rest.
func byPlace(a, b spec.Problem) int {
	if placed := a.Line > 0; placed != (b.Line > 0) {
		if placed {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
}

// readSpec reads a spec file, or standard input for "-".
func readSpec(path string) ([]byte, error) {
	if path != "-" {
		return os.ReadFile(path)
	}
	data, err := io.ReadAll(stdin)
	if err == nil && len(bytes.TrimSpace(data)) == 0 {
		err = errors.New("standard input is empty; pipe a YAML or JSON spec in, as in: clusterrun run - < train.yaml")
	}
	return data, err
}

// specFileHint says which file was meant when a spec file cannot be read: a close name in the folder it names (a
// .yml for a .yaml), or the specs in a folder named instead of a file; "" when there is nothing to say.
func specFileHint(path string, err error) string {
	if path == "-" {
		return ""
	}
	if errors.Is(err, fs.ErrNotExist) {
		dir, base := filepath.Split(path)
		entries, _ := os.ReadDir(cmp.Or(dir, "."))
		var names []string
		for _, e := range entries {
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		near := flagerr.Closest(base, names)
		if near == "" { // a name given without its extension, or with another one: demo for demo.yaml
			stems := specStems(names)
			near = stems[flagerr.Closest(strings.TrimSuffix(base, filepath.Ext(base)), slices.Collect(maps.Keys(stems)))]
		}
		if near != "" {
			return fmt.Sprintf(" (did you mean %s?)", filepath.Join(dir, near))
		}
		return ""
	}
	entries, dirErr := os.ReadDir(path)
	if dirErr != nil {
		return ""
	}
	var specs []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
			specs = append(specs, filepath.Join(path, e.Name()))
		}
	}
	switch {
	case len(specs) == 0:
		return ": name a spec file, not a folder"
	case len(specs) > 3:
		specs = append(specs[:3], "...")
	}
	return ": name a spec file, not a folder, such as " + strings.Join(specs, ", ")
}

// specStems maps the name of each spec file (.yaml, .yml, .json) without its extension to the file's name.
func specStems(names []string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		if ext := filepath.Ext(n); ext == ".yaml" || ext == ".yml" || ext == ".json" {
			if _, ok := out[strings.TrimSuffix(n, ext)]; !ok {
				out[strings.TrimSuffix(n, ext)] = n
			}
		}
	}
	return out
}

// specName is how messages name a spec's source.
func specName(path string) string {
	if path == "-" {
		return "standard input"
	}
	return path
}

// result waits for a run's end and returns its status and outcome (nil on success).
func result(ctx context.Context, c client.Client, runID string) (workflows.RunStatus, error) {
	st, err := runOf(c, runID).Wait(ctx)
	var enc *starter.EncryptedError
	if errors.As(err, &enc) {
		return st, cliError(err)
	}
	return st, err
}

// cliError gives the library's errors that the user can act on an exit code and a message.
func cliError(err error) error {
	var noRun *starter.NoRunError
	var enc *starter.EncryptedError
	var taken *starter.RunIDTakenError
	switch {
	case errors.As(err, &noRun), errors.As(err, &enc):
		return &exitError{code: 1, msg: err.Error()}
	case errors.As(err, &taken):
		return usageErrorf("run ID %q is already taken by another run; choose another --id (or leave --id out)", taken.ID)
	}
	return err
}

// heartbeat holds what the status table shows from a pending task's last heartbeat.
type heartbeat = starter.Heartbeat

// exitCodeFor maps a run's outcome to the CLI's exit code: 0 on success; the chief's (or else the first failed
// task's) exit code on failure; 124 on timeout; 130 when canceled.
func exitCodeFor(st workflows.RunStatus) int {
	switch st.Status {
	case workflows.StatusSucceeded:
		return 0
	case workflows.StatusCanceled:
		return exitCanceled
	case workflows.StatusTimedOut:
		return exitTimedOut
	}
	pick := func(t workflows.TaskStatus) (int, bool) {
		if t.State == workflows.TaskFailed && t.ExitCode != nil && *t.ExitCode > 0 {
			return min(*t.ExitCode, 255), true
		}
		return 0, false
	}
	if c := st.Task("chief-0"); c != nil {
		if code, ok := pick(*c); ok {
			return code
		}
	}
	for _, t := range st.Tasks {
		if code, ok := pick(t); ok {
			return code
		}
	}
	return 1
}

// printTable prints one row per task. Its last column (a task's result, error or last output) is cut to fit
// the terminal when w is one, so that no row wraps; elsewhere to a fixed length.
func printTable(w io.Writer, st workflows.RunStatus, hb map[string]heartbeat) {
	if len(st.Tasks) == 0 {
		return // a run that rejected its spec: its status line says so, and a header alone says nothing
	}
	live := hb != nil
	rows := [][]string{{"TASK", "STATE", "HOST", "ATTEMPT", "EXIT", "RESULT / ERROR"}}
	noteMax := 100
	if live {
		rows[0] = []string{"TASK", "STATE", "HOST", "ATTEMPT", "PID", "PROGRESS", "HEARTBEAT", "EXIT", "LAST OUTPUT / ERROR"}
		noteMax = 70
	}
	for _, t := range st.Tasks {
		rows = append(rows, taskRow(t, hb))
	}
	writeTable(w, rows, noteMax)
}

// taskRow is one task's cells of the status table; with heartbeats (a live run's table), its pid, progress and
// last heartbeat too.
func taskRow(t workflows.TaskStatus, hb map[string]heartbeat) []string {
	exit := "-"
	if t.ExitCode != nil {
		exit = fmt.Sprint(*t.ExitCode)
		switch {
		case t.OutOfMemory:
			exit += " (OOM-killed)" // the kernel's OOM killer's SIGKILL
		case t.Signal != "":
			exit += " (" + t.Signal + ")"
		}
	}
	note := t.Error
	if t.GangWait > 0 {
		// The row is the attempt a gang restart ended; the task waits for the restart.
		note = strings.TrimSuffix(fmt.Sprintf("waits for gang restart %d; %s", t.GangWait, note), "; ")
	}
	if note == "" && t.Straggler {
		note = stragglerNote
	}
	if note == "" && len(t.Result) > 0 {
		note = string(t.Result)
	}
	if note == "" && t.ResultOmitted {
		note = "(result too large for the run's results; see result.json in the task's log folder on " + t.Host + ")"
	}
	if t.Logs != nil && t.Logs.Full && !strings.Contains(note, workflows.LogsFullNote(t.Host)) {
		note = strings.TrimSuffix(workflows.LogsFullNote(t.Host)+"; "+note, "; ")
	}
	host := t.Host
	if host == "" {
		host = "-"
	}
	if hb == nil {
		return []string{t.Name, t.State, host, fmt.Sprint(t.Attempt), exit, note}
	}
	pid, prog, beat := "-", "-", "-"
	if h, ok := hb[t.Name]; ok {
		if !h.At.IsZero() {
			beat = time.Since(h.At).Round(time.Second).String() + " ago"
		}
		if h.PID > 0 {
			pid = fmt.Sprint(h.PID)
		}
		if h.Progress != nil {
			prog = progressText(*h.Progress)
		}
		if note == "" {
			note = hostNote(t, hb)
		}
		if note == "" {
			note = h.Last
		}
	}
	return []string{t.Name, t.State, host, fmt.Sprint(t.Attempt), pid, prog, beat, exit, note}
}

// hostNote is what a task's host says of the attempt it holds and has not started, where the run has nothing
// to say of it: that it waits there for a free slot (the run placed it on a report of free slots that other
// tasks took since).
func hostNote(t workflows.TaskStatus, hb map[string]heartbeat) string {
	h, ok := hb[t.Name]
	if !ok || t.Error != "" || h.Attempt != t.Attempt || (t.State != workflows.TaskPlaced && t.State != workflows.TaskPending) {
		return ""
	}
	return h.Note
}

// withHostNotes is st with each task's hostNote as its error, for the follower's lines. Its tasks are copied
// once one changes.
func withHostNotes(st workflows.RunStatus, hb map[string]heartbeat) workflows.RunStatus {
	copied := false
	for i, t := range st.Tasks {
		note := hostNote(t, hb)
		if note == "" {
			continue
		}
		if !copied {
			st.Tasks, copied = slices.Clone(st.Tasks), true
		}
		st.Tasks[i].Error = note
	}
	return st
}

// writeTable writes rows as columns two spaces apart. Each row's last cell is cut to what is left of the
// terminal's width after the other columns, or, when w is no terminal, to noteMax. On a terminal too narrow to
// leave it minNote, it goes on a line of its own under its row, indented, so that no line wraps.
func writeTable(w io.Writer, rows [][]string, noteMax int) {
	for _, r := range rows {
		for i, c := range r {
			r[i] = cell(c) // a task's words: its last line, its progress message, its error
		}
	}
	widths := columnWidths(rows)
	lead := 0
	for _, n := range widths {
		lead += n + 2
	}
	limit, below := noteMax, false
	if width := terminalWidth(w); width > 0 {
		limit = width - 1 - lead
		if limit < minNote {
			limit, below = width-1-len(noteIndent), true
		}
	}
	var b strings.Builder
	for _, r := range rows {
		var line strings.Builder
		last := len(r) - 1
		for i, c := range r[:last] {
			line.WriteString(c + strings.Repeat(" ", widths[i]+2-utf8.RuneCountInString(c)))
		}
		note := clip(r[last], limit)
		if !below {
			line.WriteString(note)
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
		if below && note != "" {
			b.WriteString(noteIndent + note + "\n")
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// minNote is the narrowest the status table's last column gets beside the others: narrower says nothing.
const minNote = 16

// noteIndent starts the line of a row's last cell when it does not fit beside the others.
const noteIndent = "    "

// columnWidths is how wide each of the table's columns before the last comes out: as wide as its widest cell.
func columnWidths(rows [][]string) []int {
	var widths []int
	for _, r := range rows {
		for i, c := range r[:len(r)-1] {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	return widths
}

// terminalWidth is the width of the terminal w writes to, or 0 when it is no terminal.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 0
	}
	return int(ws.Col)
}

// progressText renders progress as "300/1000 (30%) epoch 3".
func progressText(p workflows.Progress) string {
	s := strconv.FormatFloat(p.Current, 'f', -1, 64)
	if p.Total > 0 {
		s += fmt.Sprintf("/%s (%.0f%%)", strconv.FormatFloat(p.Total, 'f', -1, 64), 100*p.Current/p.Total)
	}
	if p.Message != "" {
		s += " " + p.Message
	}
	return s
}

// printBarriers lists the barriers of the current generation.
func printBarriers(w io.Writer, st workflows.RunStatus) {
	if len(st.Barriers) == 0 {
		return
	}
	head := fmt.Sprintf("\nBARRIERS (generation %d", st.Barriers[0].Generation)
	if c := st.BarrierCounts; c != nil {
		head += fmt.Sprintf(": %d in all, %d released, %d broken", c.Total, c.Released, c.Broken)
		if c.Total > len(st.Barriers) {
			head += fmt.Sprintf("; the last %d", len(st.Barriers))
		}
	}
	fmt.Fprintln(w, head+")")
	for _, b := range st.Barriers {
		state := fmt.Sprintf("%d/%d arrived", b.ArrivedCount, b.Participants)
		switch {
		case b.Broken != "":
			state = "broken: " + b.Broken
		case b.Released:
			state = "released (" + state + ")"
		case len(b.Waiting) > 0:
			state += ", waiting for " + clip(strings.Join(b.Waiting, ", "), 80)
		}
		fmt.Fprintf(w, "  %s: %s\n", b.Name, state)
	}
}

func clip(s string, n int) string {
	s = cell(s)
	if len([]rune(s)) > n {
		return string([]rune(s)[:n-1]) + "…"
	}
	return s
}

// cell is s on one line as plain text (lines.Plain), to stand in a table: a task's escape sequences would
// colour it, or clear the screen or set the window title of whoever reads the status.
func cell(s string) string {
	return lines.Plain(strings.NewReplacer("\n", " ", "\r", " ").Replace(s))
}

// uiLink is the Web UI page of a run, when the UI's address is known: CLUSTERRUN_UI_URL, or the dev server's
// default UI when the server is the local default.
func uiLink(runID string) string {
	opts, err := conn.Options()
	if err != nil {
		return ""
	}
	base := os.Getenv("CLUSTERRUN_UI_URL")
	if base == "" && (opts.HostPort == client.DefaultHostPort || strings.HasPrefix(opts.HostPort, "localhost:7233") || strings.HasPrefix(opts.HostPort, "127.0.0.1:7233")) {
		base = "http://localhost:8233"
	}
	if base == "" {
		return ""
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(base, "/"), opts.Namespace, runID)
}

// printItemCounts prints a run's work-item counts, if it has work items.
func printItemCounts(w io.Writer, c *workflows.ItemCounts) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, "\nITEMS: %s\n", itemCountsLine(*c))
}
