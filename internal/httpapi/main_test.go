package httpapi

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/vmgate/vmgate/internal/apitest"
)

// TestMain runs the package's tests and then checks that they exercised every
// operation of api/openapi.yaml with a successful answer that apitest validated
// (issue 12, docs/history.md): every handler test goes through apitest, so an operation no test saw
// succeed has a success schema nobody checked. Only a run of the whole package can
// tell; a run narrowed with -run or -skip does not check.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code == 0 && wholeRun() {
		if testing.Verbose() {
			fmt.Print("answers checked against api/openapi.yaml, by operation and status:\n", apitest.CoverageReport())
		}
		if err := apitest.CheckCoverage(); err != nil {
			fmt.Println("--- FAIL: OpenAPI coverage")
			fmt.Println(err)
			fmt.Println("FAIL")
			code = 1
		}
	}
	os.Exit(code)
}

// wholeRun reports whether every test of the package ran: no -run, -skip or
// -test.short narrowed the run.
func wholeRun() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	return !testing.Short()
}
