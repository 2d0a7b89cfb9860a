package httpapi

import (
	"slices"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/console"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/identity"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/secondfactor"
	"github.com/vmgate/vmgate/internal/vmops"
)

// TestEveryRouteIsDocumented keeps the route table and api/openapi.yaml in step:
// every route is an operation of the document and every operation is a route.
func TestEveryRouteIsDocumented(t *testing.T) {
	doc, err := apitest.Document()
	if err != nil {
		t.Fatal(err)
	}
	// The route table only needs non-nil use cases to list every route.
	s := &Server{fleet: (*fleet.Service)(nil), vms: (*vmops.Service)(nil), ops: (*operations.Service)(nil),
		mappings: (*identity.Admin)(nil), notify: (*notify.Service)(nil),
		secondFactors: (*secondfactor.Service)(nil), consoles: (*console.Service)(nil)}
	var routes []string
	for _, rt := range s.routes() {
		routes = append(routes, rt.method+" "+rt.pattern)
	}
	var documented []string
	for _, op := range doc.Operations() {
		documented = append(documented, op.Key())
	}
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in api/openapi.yaml", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("api/openapi.yaml documents %s, which is no route", d)
		}
	}
	if len(routes) < 30 {
		t.Errorf("only %d routes: %s", len(routes), strings.Join(routes, ", "))
	}
}
