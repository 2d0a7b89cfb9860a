package cli

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"time"

	"github.com/vmgate/vmgate/client"
)

// SSOTimeout is how long `vmgate login --sso` waits for the browser to come back.
const SSOTimeout = 5 * time.Minute

// SSOLogin logs in with single sign-on as a native client (RFC 8252): it listens
// on a loopback port of its own, sends the browser to the server's
// /auth/oidc/login with that redirect, a PKCE challenge (S256) and a state, waits
// for the browser to come back with a one-time code, and exchanges the code and
// the verifier for a session (client.FinishSSO). The address to open is printed
// to out, and handed to a browser when openBrowser is set.
func SSOLogin(ctx context.Context, c *client.Client, out io.Writer, openBrowser bool) (client.LoginToken, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return client.LoginToken{}, fmt.Errorf("listen for the browser's return: %w", err)
	}
	defer l.Close()
	redirect := "http://" + l.Addr().String() + "/callback"
	start := c.StartSSO(redirect)
	type result struct {
		code string
		err  error
	}
	got := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(start.State)) != 1 {
			// Not our login's return (another page, a stale tab): keep waiting.
			http.Error(w, "This is not the login vmgate is waiting for.", http.StatusBadRequest)
			return
		}
		res := result{code: q.Get("code")}
		if res.code == "" {
			res.err = errors.New("the browser came back without a code")
		}
		select {
		case got <- res:
			io.WriteString(w, "vmgate: you are logged in; you may close this window.\n")
		default:
			http.Error(w, "vmgate already has its answer.", http.StatusConflict)
		}
	})}
	go srv.Serve(l)
	defer srv.Close()

	fmt.Fprintf(out, "Open this address in a browser to log in:\n%s\n", start.URL)
	if openBrowser {
		if err := browse(start.URL); err == nil {
			fmt.Fprintln(out, "(a browser was opened)")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, SSOTimeout)
	defer cancel()
	select {
	case res := <-got:
		if res.err != nil {
			return client.LoginToken{}, res.err
		}
		return c.FinishSSO(ctx, start, res.code)
	case <-ctx.Done():
		return client.LoginToken{}, fmt.Errorf("no login came back within %s", SSOTimeout)
	}
}

// browse opens url in the desktop's browser, if there is one.
func browse(url string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return nil
}
