package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
)

// Format is how a read prints: a table for people, JSON for programs.
type Format int

// The output formats.
const (
	Table Format = iota
	JSON
)

// OutputHelp is the help of -o.
const OutputHelp = "Output: table or json (default: table on a terminal, json when piped)."

// ChooseFormat reads -o: "table", "json", or "" for table on a terminal and JSON
// otherwise, so that `vmgate vm list | jq` needs no flag.
func ChooseFormat(flag string, out *os.File) (Format, error) {
	switch flag {
	case "table":
		return Table, nil
	case "json":
		return JSON, nil
	case "", "auto":
		if IsTerminal(out) {
			return Table, nil
		}
		return JSON, nil
	}
	return Table, UsageErrorf("-o %q: want table or json", flag)
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }

// WriteJSON prints v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// TableOf is a table: a header and rows of cells, all strings.
type TableOf struct {
	Header []string
	Rows   [][]string
}

// Add appends a row.
func (t *TableOf) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// Write prints the table with columns aligned by two spaces; an empty cell prints
// as "-" so that columns stay countable for awk (the tables keep spaces out of
// their cells, but for the free text of a last column). Every cell is escaped
// (Escape): a tab or line break in a name stays in its cell as \t or \n, and no
// control character from PVE or a user reaches the terminal. An empty table
// prints its header and nothing else.
func (t TableOf) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.Header, "\t"))
	for _, r := range t.Rows {
		cells := make([]string, len(r))
		for i, c := range r {
			c = Escape(c)
			if c == "" {
				c = "-"
			}
			cells[i] = c
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// HumanBytes renders n with 1024-based units, one decimal, as PVE does.
func HumanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v := float64(n)
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// HumanDuration renders d for a person: 1h02m, 3m05s, 12.3s.
func HumanDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// Since renders a time as an age, "3m05s", "" for none.
func Since(t time.Time, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return HumanDuration(d)
}

// Stamp renders a time in local time, to the second, without a space, so that a
// table's columns stay one field each for awk and cut.
func Stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02T15:04:05")
}

// Size renders n like HumanBytes without the space, for a table's cell.
func Size(n int64) string { return strings.Replace(HumanBytes(n), " ", "", 1) }
