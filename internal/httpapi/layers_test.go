package httpapi

import (
	"errors"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// adapterDirs are the front ends, relative to this package: each decodes, calls one
// use case and renders (docs/design.md §2, docs/decisions/0009), and the one
// declaration of the use cases both call (internal/frontend). A directory that does
// not exist yet is checked once it does.
var adapterDirs = []string{".", "../webui", "../frontend"}

// adapterMayNotImport are the packages below the use cases. A front end that
// imports them can read the store or call PVE around the rules.
var adapterMayNotImport = []string{
	"github.com/vmgate/vmgate/internal/store",
	"github.com/vmgate/vmgate/internal/pve",
}

// TestAdaptersImportNeitherStoreNorPVE: no non-test file of a front end imports
// internal/store or internal/pve (or a package below them), so every rule stays in
// the use-case packages.
func TestAdaptersImportNeitherStoreNorPVE(t *testing.T) {
	checked := 0
	for _, dir := range adapterDirs {
		err := eachImport(dir, func(path, p string) {
			checked++
			for _, banned := range adapterMayNotImport {
				if p == banned || strings.HasPrefix(p, banned+"/") {
					t.Errorf("%s imports %s: a front end calls the use cases (accounts, auth, fleet, vmops, operations, audit), never the store or PVE", path, p)
				}
			}
		})
		if errors.Is(err, fs.ErrNotExist) && dir != "." {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
	}
	if checked == 0 {
		t.Fatal("no file checked: the test looks in the wrong place")
	}
	if _, err := os.Stat("server.go"); err != nil {
		t.Fatalf("the test does not run in internal/httpapi: %v", err)
	}
}

// useCaseDirs are the use-case packages, relative to this package, and the
// packages each may not import besides the adapters: operations runs its items
// through vmops, so vmops may not import operations (docs/design.md §2).
var useCaseDirs = map[string][]string{
	"../accounts":   nil,
	"../auth":       nil,
	"../fleet":      nil,
	"../audit":      nil,
	"../vmops":      {"github.com/vmgate/vmgate/internal/operations"},
	"../operations": nil,
	"../identity":   nil,
}

// adapterPackages are the front ends, which the use cases never import.
var adapterPackages = []string{
	"github.com/vmgate/vmgate/internal/httpapi",
	"github.com/vmgate/vmgate/internal/webui",
	"github.com/vmgate/vmgate/internal/cli",
	"github.com/vmgate/vmgate/client",
	"github.com/vmgate/vmgate/cmd",
}

// TestUseCasesImportNoAdapter: no non-test file of a use-case package imports a
// front end (dependencies point inward), and vmops does not import operations.
func TestUseCasesImportNoAdapter(t *testing.T) {
	for dir, extra := range useCaseDirs {
		checked := 0
		err := eachImport(dir, func(path, p string) {
			checked++
			for _, banned := range append(slices.Clone(adapterPackages), extra...) {
				if p == banned || strings.HasPrefix(p, banned+"/") {
					t.Errorf("%s imports %s: a use case never depends on a front end, nor vmops on operations", path, p)
				}
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if checked == 0 {
			t.Errorf("%s: no import checked: the test looks in the wrong place", dir)
		}
	}
}

// eachImport calls fn with every import of the non-test Go files below dir.
func eachImport(dir string, fn func(path, imp string)) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// testdata and hidden directories hold no package code.
			if path != dir && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			fn(path, p)
		}
		return nil
	})
}

// layerRules are what the packages beside the front ends may not import, and why
// (docs/design.md §2).
var layerRules = []struct {
	dir    string
	mayNot []string
	why    string
}{
	// The keeper of Idempotency-Keys keeps answers as opaque bytes and asks its
	// Settle what a request came to (docs/decisions/0085).
	{"../idempotency", []string{"net/http", "github.com/vmgate/vmgate/internal/httpapi",
		"github.com/vmgate/vmgate/internal/vmops", "github.com/vmgate/vmgate/internal/operations",
		"github.com/vmgate/vmgate/internal/pve"},
		"the keeper knows neither HTTP nor the use cases"},
	// What a request under a key did is answered in domain terms; the keys are
	// the middleware's.
	{"../vmops", []string{"net/http", "github.com/vmgate/vmgate/internal/httpapi",
		"github.com/vmgate/vmgate/internal/idempotency"},
		"the use cases answer in domain terms and know no Idempotency-Key machinery"},
	{"../operations", []string{"net/http", "github.com/vmgate/vmgate/internal/httpapi",
		"github.com/vmgate/vmgate/internal/idempotency"},
		"the use cases answer in domain terms and know no Idempotency-Key machinery"},
}

// TestPackagesStayInTheirLayer: no non-test file of a package in layerRules
// imports what its rule forbids.
func TestPackagesStayInTheirLayer(t *testing.T) {
	for _, rule := range layerRules {
		files, err := filepath.Glob(filepath.Join(rule.dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v): the rule looks in the wrong place", rule.dir, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, banned := range rule.mayNot {
					if p == banned {
						t.Errorf("%s imports %s: %s", path, p, rule.why)
					}
				}
			}
		}
	}
}

// TestClientStandsAlone: the typed API client (client/) is for programs outside
// this module too, so it speaks the API's wire shapes and imports nothing of
// vmgate's internal packages (issue 18 (docs/history.md): one method per endpoint with
// the API's own types).
func TestClientStandsAlone(t *testing.T) {
	checked := 0
	err := eachImport("../../client", func(path, p string) {
		checked++
		if strings.HasPrefix(p, "github.com/vmgate/vmgate/") {
			t.Errorf("%s imports %s: the client knows only the API", path, p)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no import of client/ checked: the test looks in the wrong place")
	}
}
