package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// constAnswerEnv names the file the constant server reads its answer from.
const constAnswerEnv = "VMGATE_BENCH_ANSWER"

// constAnswer is one answer as the constant server repeats it: the status, the
// header fields a handler sets and the body. Date and Content-Length are left out:
// net/http writes both itself for a small body, for the constant server as for
// vmgate, so the bytes on the wire are the same.
type constAnswer struct {
	Status int         `json:"status"`
	Header http.Header `json:"header"`
	Body   []byte      `json:"body"`
}

// captureAnswer reads a finished task from vmgate as the reader does and keeps
// the answer the constant server will repeat.
func captureAnswer(ctx context.Context, t target) (constAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, t.method, t.url, nil)
	if err != nil {
		return constAnswer{}, err
	}
	for k, v := range t.header {
		req.Header[k] = v
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return constAnswer{}, err
	}
	defer resp.Body.Close()
	var a constAnswer
	a.Status = resp.StatusCode
	if a.Body, err = io.ReadAll(resp.Body); err != nil {
		return constAnswer{}, err
	}
	if a.Status != http.StatusOK {
		return constAnswer{}, fmt.Errorf("%s: %s: %.200s", t.url, resp.Status, a.Body)
	}
	a.Header = resp.Header.Clone()
	a.Header.Del("Date")
	a.Header.Del("Content-Length")
	return a, nil
}

// startConstServer writes the answer to the temporary directory and starts the
// constant server, the bench binary re-executed in its own process.
func (b *bench) startConstServer(ctx context.Context, a constAnswer) error {
	raw, err := json.Marshal(a)
	if err != nil {
		return err
	}
	path := filepath.Join(b.tmp, "constant-answer.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	b.constant, b.constURL, err = b.procs.start(ctx, "constant-server", exe, nil,
		[]string{roleEnv + "=constant", constAnswerEnv + "=" + path}, "")
	if err != nil {
		return err
	}
	b.toConst = newClient(nil, nil, true)
	got, err := captureAnswer(ctx, target{client: b.toConst, method: "GET", url: b.constURL + "/"})
	if err != nil {
		return fmt.Errorf("constant server: %w", err)
	}
	if string(got.Body) != string(a.Body) || len(got.Header) != len(a.Header) {
		return fmt.Errorf("constant server: answers %d bytes and %d header fields, not vmgate's %d and %d",
			len(got.Body), len(got.Header), len(a.Body), len(a.Header))
	}
	b.constSize = len(a.Body)
	return nil
}

// constServerMain is the floor a finished-task read is judged against (issue 19
// item 10): net/http serving a finished task's answer, the same status, header
// fields and body vmgate writes, with no logic at all — no routing, no
// authentication, no log line, no metrics, no encoding. What vmgate costs beyond
// it is what vmgate adds to net/http. Its first stdout line is its URL; it serves
// until SIGTERM or SIGINT.
func constServerMain() int {
	raw, err := os.ReadFile(os.Getenv(constAnswerEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "constant server:", err)
		return 2
	}
	var a constAnswer
	if err := json.Unmarshal(raw, &a); err != nil || a.Status == 0 {
		fmt.Fprintln(os.Stderr, "constant server: bad answer file", err)
		return 2
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		for k, v := range a.Header {
			h[k] = v
		}
		w.WriteHeader(a.Status)
		w.Write(a.Body)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "constant server:", err)
		return 1
	}
	fmt.Printf("http://%s\n", ln.Addr())
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	srv.Close()
	return 0
}

// childRole runs the bench binary as one of its reference servers when the bench
// re-executed itself with roleEnv set; ok is false for an ordinary run.
func childRole() (code int, ok bool) {
	switch os.Getenv(roleEnv) {
	case "bareproxy":
		return bareProxyMain(), true
	case "constant":
		return constServerMain(), true
	}
	return 0, false
}
