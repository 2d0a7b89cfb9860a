package webui

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

//go:embed templates
var templateFS embed.FS

// parsePages parses every page template on the shared layout, once.
func (u *UI) parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(u.funcs()).ParseFS(templateFS, "templates/layout.html", "templates/parts.html",
		"templates/parts_secondfactor.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" || strings.HasPrefix(name, "parts") {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", n, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// view is what every page template gets: the page's own data in Data, and what the
// layout needs.
type view struct {
	Title   string
	Nav     string // the section the page belongs to, for the navigation
	User    *viewUser
	CSRF    string // the session's CSRF token, for the forms
	Notice  *notice
	Data    any
	Status  int
	Message string // the error page's message
	Live    string // the page's live stream (live.go); "" for a page that is not live
	Nonce   string // the page's style nonce (the console page: console.go); "" for the others
}

type viewUser struct {
	Email   string
	IsAdmin bool
}

// page fills the layout's part of a view for r.
func (u *UI) page(w http.ResponseWriter, r *http.Request, title, nav string, data any) view {
	v := view{Title: title, Nav: nav, Data: data, Notice: u.takeNotice(w, r)}
	if p := principal(r); p.UserID != 0 {
		v.User = &viewUser{Email: p.Email, IsAdmin: p.Role == "admin"}
		v.CSRF = u.csrfToken(p.SessionID)
		v.Live = u.liveURL(r)
	}
	return v
}

// render writes a page: executed into a buffer first, so a template failure is a
// clean 500 and not half a page. Pages are not compressed: they hold the CSRF token
// next to text a request can put there (BREACH).
func (u *UI) render(w http.ResponseWriter, r *http.Request, status int, name string, v view) {
	t, ok := u.pages[name]
	if !ok {
		panic("webui: no template " + name)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		u.log.ErrorContext(r.Context(), "render page", "page", name, "error", err.Error())
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func (u *UI) renderError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	v := u.page(w, r, http.StatusText(status), "", nil)
	v.Status, v.Message, v.Live = status, msg, ""
	u.render(w, r, status, "error", v)
}

// renderBounce answers a link from another site with a page that goes on to the
// same address from vmgate itself (a meta refresh: no script), so that the
// browser sends its SameSite=Strict cookie this time.
func (u *UI) renderBounce(w http.ResponseWriter, r *http.Request) {
	v := u.page(w, r, "Opening vmgate", "", safeNext(r.URL.RequestURI()))
	u.render(w, r, http.StatusOK, "bounce", v)
}

// redirect answers a form with 303 See Other to a page of the UI.
func redirect(w http.ResponseWriter, r *http.Request, to string) {
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// funcs are the template functions. Every value reaches the page through
// html/template's contextual escaping; none of these returns template.HTML.
func (u *UI) funcs() template.FuncMap {
	return template.FuncMap{
		"asset":    u.assetURL,
		"bytes":    humanBytes,
		"percent":  func(part, whole float64) float64 { return ratio(part, whole) * 100 },
		"pct":      func(f float64) string { return strconv.FormatFloat(f, 'f', 0, 64) + "%" },
		"barWidth": func(part, whole float64) string { return strconv.FormatFloat(ratio(part, whole)*100, 'f', 1, 64) },
		"uptime":   humanDuration,
		"when":     when,
		"iso":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"compactWhen": func(t time.Time) string {
			if t.IsZero() {
				return "–"
			}
			return t.UTC().Format("2006-01-02 15:04:05")
		},
		"vmURL":    vmURL,
		"guestURL": guestURL,
		"refURL":   refURL,
		"kindNoun": func(kind string) string { return vmops.GuestKind(kind).Noun() },
		"opBadge": func(op operations.View) struct{ Text, Class string } {
			t, c := opBadge(op)
			return struct{ Text, Class string }{t, c}
		},
		"taskURL":    taskURL,
		"nodeURL":    nodeURL,
		"rollingURL": rollingURL,
		"addBytes":   func(a, b int64) int64 { return a + b },
		"cpu":        func(f float64) string { return strconv.FormatFloat(f*100, 'f', 0, 64) + "%" },
		"cores":      func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
		"itoa":       func(n int64) string { return strconv.FormatInt(n, 10) },
		"join":       strings.Join,
		"add":        func(a, b int) int { return a + b },
		"query":      queryWith,
		"sortLink":   sortLink,
		"tokenList": func(list []accounts.Token, action, csrf string) listForms[accounts.Token] {
			return listForms[accounts.Token]{List: list, Action: action, CSRF: csrf}
		},
		"clipText": clip,
		"short":    func(s string) string { return s[:min(len(s), 6)] },
		"sessionList": func(list []accounts.Session, action, csrf string) listForms[accounts.Session] {
			return listForms[accounts.Session]{List: list, Action: action, CSRF: csrf}
		},
		"auditActions": func() []string { return auditActions },
		"sortMark":     sortMark,
		"list":         func(s ...string) []string { return s },
		"int64":        func(n int) int64 { return int64(n) },
		"float":        func(n int64) float64 { return float64(n) },
	}
}

// listForms is a list whose rows each have a form (the "sessions" and "tokens"
// templates): the rows, the address their forms post under, the CSRF token.
type listForms[T any] struct {
	List   []T
	Action string
	CSRF   string
}

func ratio(part, whole float64) float64 {
	if whole <= 0 || math.IsNaN(part) {
		return 0
	}
	return math.Max(0, math.Min(1, part/whole))
}

// vmURL is the UI page of a VM.
func vmURL(clusterID int64, node string, vmid int64) string {
	return "/vms/" + strconv.FormatInt(clusterID, 10) + "/" + url.PathEscape(node) + "/" + strconv.FormatInt(vmid, 10)
}

// taskURL is the UI page of a task.
func taskURL(upid string) string { return "/tasks/" + url.PathEscape(upid) }

// queryWith returns "?" and the query q with key set to value (removed when value
// is empty), for links that change one filter, the sort or the page.
func queryWith(q url.Values, key, value string) string {
	c := url.Values{}
	for k, vs := range q {
		c[k] = append([]string(nil), vs...)
	}
	if value == "" {
		c.Del(key)
	} else {
		c.Set(key, value)
	}
	if key != "page" {
		c.Del("page")
	}
	if len(c) == 0 {
		return "?"
	}
	return "?" + c.Encode()
}

// humanBytes writes a byte count in binary units (4.0 GiB).
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTPE"[exp]) + "iB"
}

// humanDuration writes seconds as the two largest units (3 d 4 h, 5 min 2 s).
func humanDuration(secs int64) string {
	if secs <= 0 {
		return "–"
	}
	d, h, m, s := secs/86400, secs%86400/3600, secs%3600/60, secs%60
	switch {
	case d > 0:
		return fmt.Sprintf("%d d %d h", d, h)
	case h > 0:
		return fmt.Sprintf("%d h %d min", h, m)
	case m > 0:
		return fmt.Sprintf("%d min %d s", m, s)
	default:
		return fmt.Sprintf("%d s", s)
	}
}

// when writes a time as the UI shows it: UTC, to the second.
func when(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
}

// ucfirst capitalises a message's first letter for a sentence on a page.
func ucfirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// clip cuts s to n bytes for a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
