package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"
)

// Format is how a read prints: a table for people, JSON for programs.
type Format int

// The output formats.
const (
	Table Format = iota
	JSON
	Wide // a table with every column, no cell cut short
)

// OutputHelp is the help of -o.
const OutputHelp = "Output: table (fits 100 columns), wide (every column, whole values) or json (default: table on a terminal, json when piped)."

// ChooseFormat reads -o: "table", "wide", "json", or "" for table on a terminal
// and JSON otherwise, so that `vmgate vm list | jq` needs no flag.
func ChooseFormat(flag string, out *os.File) (Format, error) {
	switch flag {
	case "table":
		return Table, nil
	case "wide":
		return Wide, nil
	case "json":
		return JSON, nil
	case "", "auto":
		if IsTerminal(out) {
			return Table, nil
		}
		return JSON, nil
	}
	return Table, UsageErrorf("-o %q: want table, wide or json", flag)
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }

// WriteJSON prints v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// TableWidth is the most columns a table takes (but with -o wide): a terminal
// of 100 columns shows every table without wrapping (issue 19 item 7).
const TableWidth = 100

// TableOf is a table: a header and rows of cells, all strings. A table fits
// TableWidth columns: the columns named in WideOnly are left out and the cells
// of those named in Flex (names, e-mails, reasons: long values) are cut short
// with "…", the widest first, until it fits. Wide shows every column whole.
type TableOf struct {
	Header   []string
	Rows     [][]string
	Flex     []string // the columns that may be cut short
	WideOnly []string // the columns shown with -o wide only
	Wide     bool
}

// Add appends a row.
func (t *TableOf) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// Write prints the table with columns aligned by two spaces; an empty cell prints
// as "-" so that columns stay countable for awk (the tables keep spaces out of
// their cells, but for the free text of a last column). Every cell is escaped
// (Escape): a tab or line break in a name stays in its cell as \t or \n, and no
// control character from PVE or a user reaches the terminal. An empty table
// prints its header and nothing else. Unless Wide, it fits TableWidth columns
// when its Flex columns can be cut that far.
func (t TableOf) Write(w io.Writer) error {
	keep := make([]bool, len(t.Header))
	for i, h := range t.Header {
		keep[i] = t.Wide || !slices.Contains(t.WideOnly, h)
	}
	pick := func(r []string) []string {
		var out []string
		for i, c := range r {
			if i < len(keep) && keep[i] {
				out = append(out, c)
			}
		}
		return out
	}
	header := pick(t.Header)
	rows := make([][]string, 0, len(t.Rows))
	for _, r := range t.Rows {
		cells := pick(r)
		for i, c := range cells {
			c = Escape(c)
			if c == "" {
				c = "-"
			}
			cells[i] = c
		}
		rows = append(rows, cells)
	}
	if !t.Wide {
		fit(header, rows, t.Flex)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// fit cuts the cells of the flex columns short, the widest column first, until
// the table fits TableWidth (or the flex columns are as narrow as their headers
// and "…" allow).
func fit(header []string, rows [][]string, flex []string) {
	width := make([]int, len(header))
	for i, h := range header {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], utf8.RuneCountInString(c))
			}
		}
	}
	// The last column is not padded: its width counts, its trailing space not.
	total := 2 * (len(width) - 1)
	for _, n := range width {
		total += n
	}
	floor := func(i int) int { return max(utf8.RuneCountInString(header[i]), 4) }
	for total > TableWidth {
		widest := -1
		for i, h := range header {
			if slices.Contains(flex, h) && width[i] > floor(i) && (widest < 0 || width[i] > width[widest]) {
				widest = i
			}
		}
		if widest < 0 {
			break
		}
		width[widest]--
		total--
	}
	for _, r := range rows {
		for i, c := range r {
			if i < len(width) && utf8.RuneCountInString(c) > width[i] {
				r[i] = Truncate(c, width[i])
			}
		}
	}
}

// Truncate cuts s to n runes, its last one "…" when it was longer.
func Truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 1 {
		return "…"
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
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

// ShortStamp renders a time for a table that must stay narrow: month, day and
// the time in local time, without the year ("11-22T10:04:05"); -o wide shows
// Stamp's whole date.
func ShortStamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("01-02T15:04:05")
}

// Size renders n like HumanBytes without the space, for a table's cell.
func Size(n int64) string { return strings.Replace(HumanBytes(n), " ", "", 1) }
