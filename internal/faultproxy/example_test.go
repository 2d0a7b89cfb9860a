package faultproxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/vmgate/vmgate/internal/faultproxy"
)

// A POST that reaches the server but whose answer never reaches the client.
func Example() {
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		io.WriteString(w, "done")
	}))
	defer srv.Close()

	p, err := faultproxy.New(strings.TrimPrefix(srv.URL, "http://"), faultproxy.Options{})
	if err != nil {
		panic(err)
	}
	defer p.Close()

	p.ResetAfterForwarding(1) // the next request only
	_, err = http.Post("http://"+p.Addr()+"/act", "text/plain", nil)
	fmt.Println("client error:", err != nil, "server got:", posts.Load())

	resp, err := http.Post("http://"+p.Addr()+"/act", "text/plain", nil)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body), posts.Load(), p.Stats().Resets)
	// Output:
	// client error: true server got: 1
	// done 2 1
}
