package cli

import (
	"strings"
	"testing"
)

// TestReadLineTakesOneLine: each call takes its own line from a shared input and
// nothing more, so that several commands of a script can read one stdin in turn.
func TestReadLineTakesOneLine(t *testing.T) {
	in := strings.NewReader("first pass phrase\r\nsecond\n\nlast without an ending")
	for _, want := range []string{"first pass phrase", "second", "", "last without an ending"} {
		got, err := ReadLine(in)
		if err != nil || got != want {
			t.Fatalf("ReadLine = %q, %v; want %q", got, err, want)
		}
	}
	if got, err := ReadLine(in); err == nil {
		t.Fatalf("ReadLine at the end = %q, want an error", got)
	}
	if _, err := ReadLine(strings.NewReader(strings.Repeat("x", maxLine+1) + "\n")); err == nil {
		t.Fatal("a line longer than the bound was taken")
	}
	if got, err := ReadLine(strings.NewReader(strings.Repeat("x", maxLine) + "\n")); err != nil || len(got) != maxLine {
		t.Fatalf("a line of the bound: %d bytes, %v", len(got), err)
	}
}
