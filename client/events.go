package client

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// StreamEnd says how an event stream ended.
type StreamEnd struct {
	// Done: the caller's callback said it has what it waited for.
	Done bool
	// Ended: the stream sent `event: end`, what it follows is over.
	Ended bool
	// Shutdown: vmgate is going away (`event: shutdown`); come back after Retry.
	Shutdown bool
	// Retry is when to come back: the shutdown's retryMs, or the stream's retry field.
	Retry time.Duration
}

// events reads the server-sent event stream at path until it ends, calling
// each with the data of every event named name. A stream that ends without
// `event: end` (nor each's done) returns io.ErrUnexpectedEOF with what it knows
// of the end; an answer other than 200 is an *APIError.
func (c *Client) events(ctx context.Context, path, name string, each func(data []byte) (bool, error)) (StreamEnd, error) {
	var end StreamEnd
	resp, err := c.openStream(ctx, path)
	if err != nil {
		return end, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	event, data := "", ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"): // a comment: keep-alive
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		case strings.HasPrefix(line, "retry:"):
			if ms, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "retry:"))); err == nil && ms >= 0 {
				end.Retry = time.Duration(ms) * time.Millisecond
			}
		case line == "":
			switch event {
			case name:
				done, err := each([]byte(data))
				if err != nil {
					return end, err
				}
				if done {
					end.Done = true
					return end, nil
				}
			case "end":
				end.Ended = true
				return end, nil
			case "shutdown":
				end.Shutdown = true
				var s struct {
					RetryMs int64 `json:"retryMs"`
				}
				if json.Unmarshal([]byte(data), &s) == nil && s.RetryMs > 0 {
					end.Retry = time.Duration(s.RetryMs) * time.Millisecond
				}
				return end, io.ErrUnexpectedEOF
			}
			event, data = "", ""
		}
	}
	if err := sc.Err(); err != nil {
		return end, err
	}
	return end, io.ErrUnexpectedEOF // the stream ended without its end
}

// openStream opens an event stream, repeating the request once with a renewed
// token after an answer 401; an answer other than 200 is an *APIError.
func (c *Client) openStream(ctx context.Context, path string) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/event-stream")
		c.authorize(req)
		stream := *c.http
		stream.Timeout = 0 // the stream lasts as long as what it follows
		resp, err := stream.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			return resp, nil
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		ae := apiError(resp.StatusCode, resp.Header, raw)
		if attempt == 0 && resp.StatusCode == http.StatusUnauthorized && c.renew != nil {
			if tok, ok := c.renew(ctx); ok {
				c.SetToken(tok)
				continue
			}
		}
		return nil, ae
	}
}
