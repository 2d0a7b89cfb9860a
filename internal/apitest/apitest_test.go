package apitest

import "testing"

func TestDocumentLoadsAndValidates(t *testing.T) {
	d, _, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	if d.Paths.Len() < 10 {
		t.Fatalf("only %d paths documented", d.Paths.Len())
	}
}
