package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// respWriter keeps net/http from adding Date or Content-Type to a
// forwarded response that had none: allowed traffic passes unchanged.
type respWriter struct {
	http.ResponseWriter
	wrote    bool
	hijacked net.Conn // the connection taken over, closed when the request is done
}

func (w *respWriter) WriteHeader(code int) {
	if !w.wrote {
		h := w.Header()
		if _, ok := h["Date"]; !ok {
			h["Date"] = nil
		}
		if _, ok := h["Content-Type"]; !ok {
			h["Content-Type"] = nil
		}
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *respWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom copies a forwarded body as it arrives: each piece read from the
// origin is written and flushed at once, so that a slow or stalling
// origin's bytes (and the headers before them) are not held back in
// net/http's buffer. The buffer is pooled, not allocated per response.
func (w *respWriter) ReadFrom(r io.Reader) (int64, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	length := int64(-1)
	if cl := w.Header().Get("Content-Length"); cl != "" {
		length, _ = strconv.ParseInt(cl, 10, 64)
	}
	var n int64
	for {
		nr, rerr := r.Read(buf)
		if nr > 0 {
			nw, werr := w.ResponseWriter.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			// More to come (a streamed body, or part of a sized one): send
			// what is here now. A complete body is sent when the handler
			// ends, in one write with its headers.
			if length < 0 || n < length {
				w.Flush()
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// copyBufs are the buffers of respWriter.ReadFrom.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (w *respWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *respWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijack not supported")
	}
	c, rw, err := h.Hijack()
	if err != nil {
		return c, rw, err
	}
	w.hijacked = c
	if rw != nil && rw.Reader.Buffered() > 0 {
		// The client sent its first bytes with the request (a CONNECT
		// followed at once by what goes through the tunnel): goproxy
		// drops the reader they are buffered in, so they come with the
		// connection.
		return &hijackedConn{Conn: c, r: rw.Reader}, rw, nil
	}
	return c, rw, nil
}

// hijackedConn is a connection taken over from net/http's server, read
// through the reader that holds what the server had already read of it.
type hijackedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *hijackedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// trackedOf returns the listener's tracked connection under c, or nil.
func trackedOf(c net.Conn) *trackedConn {
	switch c := c.(type) {
	case *trackedConn:
		return c
	case *hijackedConn:
		return trackedOf(c.Conn)
	}
	return nil
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// respond returns the proxy's own answer for a decision, or nil to forward,
// written in the block style of p ([responses] block_style).
func (s *Server) respond(p *Policy, r *http.Request, d *Decision) *http.Response {
	resp := s.plainAnswer(r, d)
	if resp != nil && p.cfg.Responses.BlockStyle == BlockStyleBrowser {
		resp = s.browserAnswer(r, d, resp)
	}
	return resp
}

// plainAnswer is the proxy's own answer for a decision in plain text, or
// nil to forward.
func (s *Server) plainAnswer(r *http.Request, d *Decision) *http.Response {
	switch d.Action {
	case ActionAllowed, ActionWouldBlock:
		return nil
	case ActionDisallowed:
		resp := s.answer(r, http.StatusForbidden, d.Action, blockBody(r, d))
		if rule := d.ruleHeader(); rule != "" {
			resp.Header.Set("X-Robots-Gate-Rule", rule)
		}
		return resp
	case ActionUsageRefused:
		resp := s.answer(r, http.StatusForbidden, d.Action, usageBody(r, d))
		resp.Header.Set("X-Robots-Gate-Rule", d.ruleHeader())
		return resp
	case ActionDenied:
		return s.answer(r, http.StatusForbidden, d.Action, fmt.Sprintf("robotsgate: %s is denied by a site rule: %s\n", displayURL(r), d.Site.Reason))
	case ActionPrivate:
		if d.Reason == reasonSelf {
			return s.answer(r, http.StatusForbidden, d.Action, fmt.Sprintf("robotsgate: %s: %s: ask its own address directly, not through it\n", displayHost(r), reasonSelf))
		}
		return s.answer(r, http.StatusForbidden, d.Action, fmt.Sprintf("robotsgate: %s: %s (refused by [upstream] block_private; "+
			"set block_private = false to reach private addresses, for example a test origin on this machine)\n", displayHost(r), reasonPrivate))
	case ActionUnreachable:
		resp := s.answer(r, http.StatusServiceUnavailable, d.Action, blockBody(r, d))
		wait := time.Second
		if !d.Fetch.RetryAt.IsZero() {
			wait = max(d.Fetch.RetryAt.Sub(s.opts.Now()), time.Second)
		}
		resp.Header.Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		return resp
	case ActionUpstream:
		return s.answer(r, http.StatusBadGateway, d.Action, "robotsgate: "+d.Reason+"\n")
	case ActionBadRequest:
		code := http.StatusBadRequest
		if d.Status != 0 {
			code = d.Status // 414, 408
		}
		return s.answer(r, code, d.Action, "robotsgate: "+d.Reason+"\n")
	case ActionMisdirected:
		return s.answer(r, http.StatusMisdirectedRequest, d.Action, "robotsgate: "+d.Reason+"\n")
	case ActionAuth:
		resp := s.answer(r, http.StatusProxyAuthRequired, ActionAuth, "robotsgate: proxy authentication required\n")
		resp.Header.Set("Proxy-Authenticate", `Basic realm="robotsgate"`)
		return resp
	case ActionOverloaded:
		resp := s.answer(r, http.StatusServiceUnavailable, d.Action, "robotsgate: "+d.Reason+"\n")
		resp.Header.Set("Retry-After", "1")
		return resp
	case ActionPaced:
		resp := s.answer(r, http.StatusTooManyRequests, d.Action, fmt.Sprintf("robotsgate: %s is %s\n", displayURL(r), d.Reason))
		resp.Header.Set("Retry-After", strconv.Itoa(max(1, int((d.Waited+time.Second-1)/time.Second))))
		return resp
	}
	return s.answer(r, http.StatusInternalServerError, d.Action, "robotsgate: "+d.Reason+"\n")
}

// answer builds one of the proxy's own responses.
func (s *Server) answer(r *http.Request, code int, gate, body string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("Date", s.opts.Now().UTC().Format(http.TimeFormat))
	h.Set("X-Robots-Gate", gate)
	return &http.Response{
		StatusCode:    code,
		Status:        fmt.Sprintf("%d %s", code, http.StatusText(code)),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}
}

// blockBody explains a robots.txt block to a person reading a scraper's log.
func blockBody(r *http.Request, d *Decision) string {
	var b strings.Builder
	if d.Action == ActionUnreachable {
		fmt.Fprintf(&b, "robotsgate: %s is not allowed: robots.txt could not be fetched and no copy is held\n\n", displayURL(r))
	} else {
		fmt.Fprintf(&b, "robotsgate: %s is disallowed by robots.txt\n\n", displayURL(r))
	}
	fmt.Fprintf(&b, "agent:      %s\n", strings.Join(d.Agents.Slice(), ", "))
	if d.Token != "" && d.Agents.Len() > 1 {
		fmt.Fprintf(&b, "blocked for: %s\n", d.Token)
	}
	fmt.Fprintf(&b, "robots.txt: %s", d.RobotsURL())
	if f := &d.Fetch; !f.IsZero() {
		fmt.Fprintf(&b, " (%s", f.Outcome)
		if f.Status != 0 {
			fmt.Fprintf(&b, " %d", f.Status)
		}
		if !f.FetchedAt.IsZero() {
			fmt.Fprintf(&b, ", %s ago", f.Age.Round(time.Second))
		}
		if f.Error != "" {
			fmt.Fprintf(&b, "; %s", f.Error)
		}
		b.WriteString(")")
	}
	b.WriteString("\n")
	if d.Verdict.Line > 0 {
		fmt.Fprintf(&b, "rule:       %s (line %d)\n", d.Verdict.Rule(), d.Verdict.Line)
	}
	fmt.Fprintf(&b, "reason:     %s\n", d.Reason)
	return b.String()
}

// usageBody explains a usage refusal to a person reading a scraper's log.
func usageBody(r *http.Request, d *Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "robotsgate: %s is not fetched for %s: the site refuses that use\n\n", displayURL(r), d.Refusal.Purpose)
	fmt.Fprintf(&b, "purpose:    %s (declared: %s)\n", d.Refusal.Purpose, strings.Join(d.Purposes.Names(), ", "))
	if d.Refusal.Header {
		fmt.Fprintf(&b, "statement:  %s (a header of the response, whose body was withheld)\n", d.Refusal.Statement)
	} else {
		fmt.Fprintf(&b, "statement:  %s (line %d of %s)\n", d.Refusal.Statement, d.Refusal.Line, d.RobotsURL())
	}
	fmt.Fprintf(&b, "agent:      %s\n", strings.Join(d.Agents.Slice(), ", "))
	fmt.Fprintf(&b, "reason:     %s\n", d.Reason)
	return b.String()
}

// ruleHeader is X-Robots-Gate-Rule for d: the usage statement that refused
// it, or the robots.txt rule that decided; "" for neither.
func (d *Decision) ruleHeader() string {
	switch {
	case d.Refusal.Statement != "":
		return d.Refusal.headerValue()
	case d.Verdict.Line > 0:
		return ruleHeader(d.Verdict.Rule(), d.Verdict.Line)
	}
	return ""
}

// ruleHeader formats X-Robots-Gate-Rule: the directive, the pattern with
// bytes outside 0x21-0x7E percent-encoded, and the line.
func ruleHeader(rule string, line int) string {
	dir, pat, _ := strings.Cut(rule, ":")
	pat = strings.TrimPrefix(pat, " ")
	var b strings.Builder
	b.WriteString(strings.ToLower(dir))
	b.WriteString(": ")
	for i := 0; i < len(pat); i++ {
		if c := pat[i]; c < 0x21 || c > 0x7E {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	fmt.Fprintf(&b, " (line %d)", line)
	return b.String()
}

// displayURL is the request's URL as sent, with any userinfo removed and
// the host not percent-encoded.
func displayURL(r *http.Request) string {
	if r.URL == nil {
		return ""
	}
	if r.Method == http.MethodConnect {
		return displayHost(r) // a CONNECT names host:port, no URL
	}
	host := r.URL.Host
	if host == "" {
		host = r.Host
	}
	if host == "" {
		return ""
	}
	uri := r.RequestURI
	if uri == "" { // a forwarded request: goproxy cleared it
		uri = r.URL.RequestURI()
	}
	target := requestTarget(uri)
	return r.URL.Scheme + "://" + host + target
}

func displayHost(r *http.Request) string {
	if r.URL != nil && r.URL.Host != "" {
		return r.URL.Host
	}
	return r.Host
}

// clientAddr is the client's IP address.
func clientAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// removeHopByHop deletes the hop-by-hop headers that must not be forwarded
// (RFC 9110 section 7.6.1), and those named in Connection. With upgrade (a
// WebSocket upgrade request, or a 101 answer to one) Connection and
// Upgrade are kept; without it they go too, so that no other protocol is
// switched to and no client is left holding a connection that was never
// upgraded.
func removeHopByHop(h http.Header, upgrade bool) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if name != "" && !(upgrade && strings.EqualFold(name, "Upgrade")) {
				h.Del(name)
			}
		}
	}
	// Canonical names, deleted from the map directly: Header.Del would
	// canonicalise each one again on every request.
	for _, name := range [...]string{"Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer"} {
		delete(h, name)
	}
	if !upgrade {
		delete(h, "Connection")
		delete(h, "Upgrade")
	}
}

// isWebSocketUpgrade reports whether h asks for (or, on a 101, agrees to)
// a WebSocket upgrade: the one protocol switch robotsgate relays.
func isWebSocketUpgrade(h http.Header) bool {
	return len(h["Connection"]) > 0 && headerHas(h, "Connection", "upgrade") && headerHas(h, "Upgrade", "websocket")
}

func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
