package webui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
)

//go:embed static
var staticFS embed.FS

// asset is one static file, served under a name that carries a hash of its
// content (app.3f2a9c1e.css), so that it can be cached for good: a new build
// with a changed file has a new name.
type asset struct {
	body  []byte
	gzip  []byte // nil when compressing does not pay
	etag  string
	ctype string
}

// assets are the static files by hashed name, and the hashed name of each file.
type assets struct {
	byHashed map[string]*asset
	hashed   map[string]string // app.css → app.3f2a9c1e.css
}

// loadAssets hashes and compresses the embedded static files once, at start.
func loadAssets() (*assets, error) {
	a := &assets{byHashed: map[string]*asset{}, hashed: map[string]string{}}
	err := fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		name := path.Base(p)
		sum := sha256.Sum256(body)
		h := hex.EncodeToString(sum[:])[:12]
		ext := path.Ext(name)
		hashedName := strings.TrimSuffix(name, ext) + "." + h + ext
		as := &asset{body: body, etag: `"` + h + `"`, ctype: mime.TypeByExtension(ext)}
		if as.ctype == "" {
			as.ctype = "application/octet-stream"
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(body)
		zw.Close()
		if buf.Len() < len(body)*9/10 {
			as.gzip = buf.Bytes()
		}
		a.byHashed[hashedName] = as
		a.hashed[name] = hashedName
		return nil
	})
	return a, err
}

// assetURL is the address of a static file for a page (the template function
// "asset"). An unknown name is a bug in a template, caught by the page tests.
func (u *UI) assetURL(name string) (string, error) {
	h, ok := u.assets.hashed[name]
	if !ok {
		return "", errs.E(errs.Internal, "no static file %q", name)
	}
	return "/static/" + h, nil
}

// static serves a static file by its hashed name: cached for a year as immutable,
// an ETag for revalidation anyway, gzip to clients that take it.
func (u *UI) static(w http.ResponseWriter, r *http.Request) error {
	as, ok := u.assets.byHashed[r.PathValue("file")]
	if !ok {
		return errs.E(errs.NotFound, "no such file")
	}
	h := w.Header()
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("ETag", as.etag)
	h.Set("Content-Type", as.ctype)
	h.Set("Vary", "Accept-Encoding")
	if etagMatch(r.Header.Get("If-None-Match"), as.etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	body := as.body
	if as.gzip != nil && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		body = as.gzip
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
	return nil
}

// etagMatch reads If-None-Match: a list of tags, weak or strong, or *.
func etagMatch(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// acceptsGzip reads Accept-Encoding: gzip with any q but 0.
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		params = strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		if q, ok := strings.CutPrefix(params, "q="); ok {
			if f, err := strconv.ParseFloat(q, 64); err == nil && f == 0 {
				return false
			}
		}
		return true
	}
	return false
}
