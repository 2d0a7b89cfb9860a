package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsPrintOnlyEscaped (docs/security.md item 35): no code of the binary writes to
// standard output or standard error but through show and say (escaped), a table
// (cli.TableOf.Write escapes its cells), a progress view (internal/cli escapes what
// it shows) or JSON. A print added later — fmt.Printf of a VM's name, an
// io.WriteString(os.Stderr, …) of a server's message — fails here, naming where.
func TestCommandsPrintOnlyEscaped(t *testing.T) {
	t.Parallel()
	// What may write to the standard streams directly, and why.
	allowed := map[string]string{
		"printLine":         "show and say themselves",
		"completionCmd.Run": "a completion script of vmgate's own, many lines",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			where := funcName(fn)
			if _, ok := allowed[where]; ok {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				checked++
				pkg, fun := selector(call.Fun)
				switch {
				case pkg == "fmt" && strings.HasPrefix(fun, "Print"):
					t.Errorf("%s (%s): fmt.%s writes to standard output unescaped: use show", fset.Position(call.Pos()), where, fun)
				case (pkg == "fmt" && strings.HasPrefix(fun, "Fprint") || pkg == "io" && fun == "WriteString") &&
					len(call.Args) > 0 && isStdStream(call.Args[0]):
					t.Errorf("%s (%s): %s.%s to a standard stream unescaped: use show or say", fset.Position(call.Pos()), where, pkg, fun)
				}
				return true
			})
		}
	}
	if checked < 500 {
		t.Fatalf("only %d calls looked at: is the walk broken?", checked)
	}
}

// funcName is "Recv.Name" for a method, "Name" for a function.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// selector splits pkg.Fun.
func selector(e ast.Expr) (pkg, fun string) {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", ""
	}
	id, ok := s.X.(*ast.Ident)
	if !ok {
		return "", ""
	}
	return id.Name, s.Sel.Name
}

// isStdStream reports whether e is os.Stdout or os.Stderr.
func isStdStream(e ast.Expr) bool {
	pkg, name := selector(e)
	return pkg == "os" && (name == "Stdout" || name == "Stderr")
}
