package webui

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/console"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The console page (issue 21 item 4): noVNC for a VM's screen, xterm.js for a
// container's terminal, both vendored at pinned versions with their licences
// (scripts/vendor-console.sh) and served from here, no CDN and no build step.

//go:embed vendor
var vendorFS embed.FS

// Consoles is the console broker as the UI uses it; *console.Service is one.
type Consoles interface {
	Open(ctx context.Context, a vmops.Actor, req console.Request) (console.Ticket, error)
}

// consoleRoutes are the console's pages and the vendored libraries.
func (u *UI) consoleRoutes() []route {
	if u.consoles == nil {
		return nil
	}
	rs := []route{{"GET", "/vendor/{file...}", public, u.vendored}}
	for _, k := range guestKinds {
		rs = append(rs, route{"GET", k.route() + "/console", authed, u.consolePage(k)})
	}
	return rs
}

// consoleView is the console page's data.
type consoleView struct {
	VM   vmops.GuestRef
	Kind guestKind
	Noun string
	Type string // console.TypeVNC or console.TypeTerm
	URL  string // the WebSocket's path with its ticket
}

// consolePage issues a console ticket for the guest (the use case checks the
// operator grant, the guest's state and the caps) and renders the page whose
// script connects with it. The ticket is good for 30 s and once: a reload
// issues another.
func (u *UI) consolePage(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		vm, err := pathGuest(r, k.kind)
		if err != nil {
			return err
		}
		typ := r.URL.Query().Get("type")
		if typ != "" && typ != console.TypeVNC && typ != console.TypeTerm {
			return errs.E(errs.Invalid, "type must be vnc or term")
		}
		t, err := u.consoles.Open(r.Context(), vmActor(r), console.Request{Guest: vm, Type: typ,
			SessionID: principal(r).SessionID})
		if err != nil {
			return err
		}
		// xterm.js writes its measurements and colours into <style> elements it
		// makes: they carry this page's nonce (console.js sets it), and nothing
		// inline is allowed otherwise.
		nonce := make([]byte, 18)
		_, _ = rand.Read(nonce)
		n := base64.StdEncoding.EncodeToString(nonce)
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'nonce-"+n+"'; "+
			"img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		w.Header().Set("Cache-Control", "no-store")
		data := consoleView{VM: vm, Kind: k, Noun: noun(vm), Type: t.Type, URL: t.URL}
		v := u.page(w, r, noun(vm)+" "+strconv.FormatInt(vm.VMID, 10)+" console", "vms", data)
		v.Nonce = n
		u.render(w, r, http.StatusOK, "console", v)
		return nil
	}
}

// vendored serves a file of the vendored libraries by its path: their modules
// import each other by relative paths, which the hashed names of /static/ would
// break. The paths carry the versions, so a file never changes under its name.
func (u *UI) vendored(w http.ResponseWriter, r *http.Request) error {
	p := r.PathValue("file")
	if p == "" || strings.Contains(p, "..") || !fs.ValidPath(p) {
		return errs.E(errs.NotFound, "no such file")
	}
	ext := path.Ext(p)
	ctype := map[string]string{".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
		".css": "text/css; charset=utf-8"}[ext]
	if ctype == "" {
		if ctype = mime.TypeByExtension(ext); ctype == "" || strings.HasSuffix(p, "LICENSE") {
			ctype = "text/plain; charset=utf-8"
		}
	}
	b, err := vendorFS.ReadFile("vendor/" + p)
	if err != nil {
		return errs.E(errs.NotFound, "no such file")
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Cache-Control", "public, max-age=86400")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
	return nil
}
