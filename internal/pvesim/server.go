package pvesim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ServeOptions say how a cluster is put on the network.
type ServeOptions struct {
	// TLS serves HTTPS with each node's self-signed certificate, as pveproxy
	// does on port 8006; false serves plain HTTP (for unit tests).
	TLS bool
	// Listen is the first node's address ("127.0.0.1:8006"; port 0 picks a
	// free one). Every other node listens on 127.0.0.(10+i) with the same port,
	// or on a free port when that is taken (see Server.Warnings). Empty puts
	// node i on 127.0.0.(10+i) with one free port shared by all.
	Listen string
	// KeepAliveRequests is how many requests a connection serves before the
	// answer to the last one says "Connection: close" (pveproxy:
	// PVEKeepAliveRequests). 0 keeps connections open for any number of
	// requests, which is the default so that a client's own connection
	// reuse can be measured without the server's limit in the way.
	KeepAliveRequests int
}

// PVEKeepAliveRequests is pveproxy's limit of requests per connection
// (pve-manager PVE/Service/pveproxy.pm keep_alive => 100, counted down per
// request in pve-http-server's AnyEvent.pm; the 100th answer carries
// "Connection: close").
const PVEKeepAliveRequests = 100

// Endpoint is one node's API address, as a client would configure it.
type Endpoint struct {
	Node        string
	URL         string // "https://127.0.0.11:8006"
	Fingerprint string // SHA-256 of the node's certificate, "AB:CD:..."
	CertPEM     []byte
}

// Server serves a cluster: one pveproxy endpoint per node, sharing one state.
type Server struct {
	c         *Cluster
	tls       bool
	keepAlive int
	accepted  atomic.Int64
	connMu    sync.Mutex
	open      int64 // connections open now (connMu)
	peak      int64 // most connections open at once (connMu)
	busy      int64 // requests being handled now (connMu)
	peakBusy  int64 // most requests handled at once (connMu)
	mu        sync.Mutex
	eps       map[string]*endpoint
	order     []string
	warnings  []string
	closed    bool
	stop      chan struct{}
}

type endpoint struct {
	node   string
	host   string
	port   int
	srv    *http.Server
	online bool
}

// Serve puts the cluster on the network until ctx ends or Close is called.
func (c *Cluster) Serve(ctx context.Context, opts ServeOptions) (*Server, error) {
	c.mu.RLock()
	type nodeInfo struct {
		name   string
		id     int
		online bool
	}
	var nodes []nodeInfo
	for _, n := range c.nodes {
		nodes = append(nodes, nodeInfo{n.name, n.id, n.online})
	}
	c.mu.RUnlock()
	if len(nodes) == 0 {
		return nil, errors.New("serve: the cluster has no nodes")
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].id < nodes[j].id })

	if opts.KeepAliveRequests < 0 {
		return nil, errors.New("serve: negative KeepAliveRequests")
	}
	s := &Server{c: c, tls: opts.TLS, keepAlive: opts.KeepAliveRequests, eps: map[string]*endpoint{}, stop: make(chan struct{})}
	lns, warnings, err := bindAll(opts.Listen, len(nodes), func(i int) int { return nodes[i].id })
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.warnings = warnings
	c.mu.Lock()
	for i, ni := range nodes {
		addr := lns[i].Addr().(*net.TCPAddr)
		host := addr.IP.String()
		if addr.IP.IsUnspecified() {
			host = "127.0.0.1"
		}
		c.nodes[ni.name].ip = host
		s.eps[ni.name] = &endpoint{node: ni.name, host: host, port: addr.Port}
		s.order = append(s.order, ni.name)
	}
	c.servers[s] = true
	c.mu.Unlock()
	for i, ni := range nodes {
		ep := s.eps[ni.name]
		if ni.online {
			s.start(ep, lns[i])
		} else {
			lns[i].Close()
		}
	}
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.stop:
		}
	}()
	return s, nil
}

// bindAll binds one listener per node as ServeOptions describe.
func bindAll(listen string, count int, id func(int) int) ([]net.Listener, []string, error) {
	var warnings []string
	closeAll := func(lns []net.Listener) {
		for _, l := range lns {
			if l != nil {
				l.Close()
			}
		}
	}
	for attempt := 0; attempt < 20; attempt++ {
		lns := make([]net.Listener, count)
		first := listen
		if first == "" {
			first = net.JoinHostPort(defaultNodeIP(id(0)), "0")
		}
		ln, err := net.Listen("tcp", first)
		if err != nil {
			return nil, nil, fmt.Errorf("listen on %s: %w", first, err)
		}
		lns[0] = ln
		port := ln.Addr().(*net.TCPAddr).Port
		ok := true
		for i := 1; i < count; i++ {
			addr := net.JoinHostPort(defaultNodeIP(id(i)), strconv.Itoa(port))
			l, err := net.Listen("tcp", addr)
			if err != nil && listen != "" {
				// The caller chose the port: keep it for the first node and
				// give this one a free port instead, saying so.
				l, err = net.Listen("tcp", net.JoinHostPort(defaultNodeIP(id(i)), "0"))
				if err == nil {
					warnings = append(warnings, fmt.Sprintf("%s is taken; node %d listens on %s instead", addr, id(i), l.Addr()))
				}
			}
			if err != nil {
				ok = false
				break
			}
			lns[i] = l
		}
		if ok {
			return lns, warnings, nil
		}
		closeAll(lns)
		warnings = nil
		if listen != "" && attempt > 0 {
			break
		}
	}
	return nil, nil, errors.New("could not bind one port on every node address")
}

// connRequests counts the requests of one connection (ConnContext).
type connRequests struct{}

func (s *Server) start(ep *endpoint, ln net.Listener) {
	h := s.c.handler(ep.node)
	if s.keepAlive > 0 {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n, ok := r.Context().Value(connRequests{}).(*atomic.Int64); ok && n.Add(1) >= int64(s.keepAlive) {
				w.Header().Set("Connection", "close")
			}
			inner.ServeHTTP(w, r)
		})
	}
	counted := h
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.connMu.Lock()
		s.busy++
		s.peakBusy = max(s.peakBusy, s.busy)
		s.connMu.Unlock()
		defer func() {
			s.connMu.Lock()
			s.busy--
			s.connMu.Unlock()
		}()
		counted.ServeHTTP(w, r)
	})
	srv := &http.Server{
		Handler: h,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, connRequests{}, new(atomic.Int64))
		},
		ConnState: func(_ net.Conn, st http.ConnState) {
			s.connMu.Lock()
			defer s.connMu.Unlock()
			switch st {
			case http.StateNew:
				s.accepted.Add(1)
				s.open++
				s.peak = max(s.peak, s.open)
			case http.StateClosed, http.StateHijacked:
				s.open--
			}
		},
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
		// pveproxy speaks HTTP/1.1 only; an empty map keeps HTTP/2 off.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	if s.tls {
		s.c.mu.RLock()
		cert := s.c.nodes[ep.node].cert.tls
		s.c.mu.RUnlock()
		srv.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{cert},
			NextProtos:   []string{"http/1.1"},
			MinVersion:   tls.VersionTLS12,
		}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	ep.srv = srv
	ep.online = true
	go srv.Serve(ln)
}

// nodeOnline follows Cluster.SetNodeOnline: an offline node's endpoint
// closes its listener and every connection; back online it listens again.
func (s *Server) nodeOnline(name string, online bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep, ok := s.eps[name]
	if !ok || s.closed || ep.online == online {
		return
	}
	if !online {
		ep.online = false
		if ep.srv != nil {
			ep.srv.Close()
			ep.srv = nil
		}
		go s.c.dropConsoles(name) // hijacked console connections too
		return
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ep.host, strconv.Itoa(ep.port)))
	if err != nil {
		s.warnings = append(s.warnings, fmt.Sprintf("node %s back online but cannot listen again: %v", name, err))
		return
	}
	s.start(ep, ln)
}

// Endpoints lists every node's endpoint, first node first.
func (s *Server) Endpoints() []Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	scheme := "http"
	if s.tls {
		scheme = "https"
	}
	res := make([]Endpoint, 0, len(s.order))
	s.c.mu.RLock()
	defer s.c.mu.RUnlock()
	for _, name := range s.order {
		ep := s.eps[name]
		cert := s.c.nodes[name].cert
		res = append(res, Endpoint{
			Node:        name,
			URL:         scheme + "://" + net.JoinHostPort(ep.host, strconv.Itoa(ep.port)),
			Fingerprint: cert.fingerprint,
			CertPEM:     append([]byte(nil), cert.pem...),
		})
	}
	return res
}

// Connections counts the connections the endpoints have accepted since
// Serve (TLS handshakes included, whether they succeeded or not).
func (s *Server) Connections() int64 { return s.accepted.Load() }

// PeakConnections is the most connections the endpoints had open at once
// since Serve (all endpoints together; an error answer's hijacked
// connection counts as closed when hijacked).
func (s *Server) PeakConnections() int64 {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	return s.peak
}

// PeakRequests is the most requests the endpoints were handling at once
// since Serve (all endpoints together). A connection carries one request at a
// time and a small answer leaves only after its handler returned, so this is
// also the most connections a client used at once, which PeakConnections is
// not: a connection the client closed stays open here until the server reads
// the end of it, and the client may already have dialled its replacement.
func (s *Server) PeakRequests() int64 {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	return s.peakBusy
}

// Warnings says where the addresses differ from the requested ones.
func (s *Server) Warnings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.warnings...)
}

// Close stops every endpoint and drops open connections.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	for _, ep := range s.eps {
		if ep.srv != nil {
			ep.srv.Close()
			ep.srv = nil
		}
	}
	s.mu.Unlock()
	s.c.mu.Lock()
	delete(s.c.servers, s)
	s.c.mu.Unlock()
	s.c.dropConsoles("") // hijacked console connections too
	return nil
}
