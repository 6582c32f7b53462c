// Package fetch gets robots.txt files for package robots: the Fetcher,
// which turns HTTP answers into RFC 9309's outcomes within bounds of size,
// time and redirects, and the Cache, which shares one fetch per origin
// (package origin's Origin, the cache key) among every request waiting on
// it, bounds the fetches in flight, and keeps the state that changes
// answers (the last good copy, when failures began, when to retry) apart
// from the evictable rules.
package fetch

import (
	"github.com/robotsgate/robotsgate/robots"

	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Outcome is how a robots.txt fetch ended, in RFC 9309's words (section 2.3.1).
type Outcome string

// The outcomes of a fetch.
const (
	// Fetched: a 2xx answer; its body is the file.
	Fetched Outcome = "fetched"
	// Unavailable: a 4xx answer (or too many redirects): no restrictions,
	// except 401 and 403 under FetcherOptions.AuthErrorsDisallow.
	Unavailable Outcome = "unavailable"
	// Unreachable: 429, 5xx, or a network, TLS or protocol failure: the
	// crawler must assume the whole site is disallowed for a while.
	Unreachable Outcome = "unreachable"
)

// Defaults of FetcherOptions, as docs/configuration.md's [robots] keys.
const (
	DefaultMaxBytes     = 512000
	DefaultMaxRedirects = 5
	DefaultFetchTimeout = 10 * time.Second
	maxRetryAfter       = 24 * time.Hour
)

// FetcherOptions configures a Fetcher. Each zero value means the default
// named in its comment.
type FetcherOptions struct {
	// Transport sends the requests. Nil: NewTransport(TransportOptions{}),
	// which dials directly (never through the environment's proxy
	// variables) and verifies TLS with the system roots.
	Transport http.RoundTripper
	// UserAgent is sent with every request. "": "robotsgate".
	UserAgent string
	// MaxBytes is how much of a body is read, after decoding (RFC 9309 asks
	// for at least 500 KiB); content after it is ignored. 0: DefaultMaxBytes.
	MaxBytes int
	// MaxRedirects is how many redirect hops are followed; one more, or a
	// loop, counts as 404. 0: DefaultMaxRedirects; negative: none.
	MaxRedirects int
	// Timeout bounds the whole fetch, redirects and body included, so a
	// slow origin cannot extend it. 0: DefaultFetchTimeout.
	Timeout time.Duration
	// AuthErrorsDisallow makes 401 and 403 disallow everything, instead of
	// RFC 9309's "unavailable: no restrictions".
	AuthErrorsDisallow bool
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

// Fetcher fetches robots.txt files. It is safe for concurrent use.
type Fetcher struct {
	opts   FetcherOptions
	client *http.Client
}

// NewFetcher returns a Fetcher with opts, defaults filled in.
func NewFetcher(opts FetcherOptions) *Fetcher {
	if opts.Transport == nil {
		opts.Transport = NewTransport(TransportOptions{})
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "robotsgate"
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxRedirects == 0 {
		opts.MaxRedirects = DefaultMaxRedirects
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultFetchTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Fetcher{
		opts: opts,
		client: &http.Client{
			Transport: opts.Transport,
			// Redirects are followed by Fetch itself, to count hops and
			// find loops.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// CloseIdleConnections closes the fetcher's kept-alive connections.
func (f *Fetcher) CloseIdleConnections() { f.client.CloseIdleConnections() }

// TransportOptions configures NewTransport.
type TransportOptions struct {
	// Proxy is the next-hop proxy; nil dials directly. The environment's
	// proxy variables are never used: they would point back at robotsgate.
	Proxy *url.URL
	// RootCAs verifies servers' certificates; nil: the system roots.
	RootCAs *x509.CertPool
	// DialContext dials TCP; nil: a net.Dialer with a 10 s timeout.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// fetchKey carries a fetch's context into the transport's dial.
type fetchKey struct{}

// NewTransport returns an http.Transport for fetching robots.txt files.
// Compression is left to Fetch, which bounds what it decodes. A dial for a
// fetch ends with the fetch: net/http detaches dials from their request's
// cancellation (so that another request may use the connection), which
// would let fetches that were given up or timed out leave connection
// attempts behind, unbounded.
func NewTransport(o TransportOptions) *http.Transport {
	dial := o.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	t := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if fetch, ok := ctx.Value(fetchKey{}).(context.Context); ok {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				defer context.AfterFunc(fetch, cancel)()
			}
			return dial(ctx, network, addr)
		},
		TLSClientConfig:        &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
	}
	if o.Proxy != nil {
		t.Proxy = http.ProxyURL(o.Proxy)
	}
	return t
}

// Result is what one fetch of an origin's robots.txt found.
type Result struct {
	Outcome     Outcome
	Status      int            // the last HTTP status; 0 if none was received
	Rules       *robots.Robots // Fetched: the file (parsed with the fetch's options); else nil
	Body        []byte         // Fetched: the body read (after the MaxBytes cap), for a Store to keep
	DisallowAll bool           // 401 or 403 with AuthErrorsDisallow
	MaxAge      time.Duration  // Cache-Control max-age; 0 for no-store, no-cache or max-age=0; -1 if absent
	RetryAfter  time.Duration  // a 429 or 503's Retry-After, at most 24 h; 0 if none
	Err         error          // Unreachable: the failure; Unavailable: why a 3xx counted as 404
	URL         string         // the last URL requested
	Redirects   int            // hops followed
	Truncated   bool           // the body was longer than MaxBytes
	At          time.Time      // when the fetch started
	Duration    time.Duration
}

// Fetch fetches the robots.txt of origin o (RFC 9309 section 2.3), parsing
// a fetched body with opts. It never returns a nil result: every failure is
// an Unreachable outcome with Err set.
func (f *Fetcher) Fetch(ctx context.Context, o Origin, opts ...robots.Option) *Result {
	res := &Result{At: f.opts.Now(), MaxAge: -1}
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	ctx = context.WithValue(ctx, fetchKey{}, ctx)
	f.fetch(ctx, o.RobotsURL(), "text/plain, */*;q=0.5", res)
	if res.Outcome == Fetched {
		res.Rules = robots.Parse(res.Body, opts...)
	}
	res.Duration = f.opts.Now().Sub(res.At)
	return res
}

// FetchDocument fetches another file a site publishes about its content
// (TDMRep's tdmrep.json, an RSL licence) as robots.txt is fetched: the
// same outcomes, redirects, size cap and timeout; accept is the Accept
// header sent. The Result has the Body and no Rules.
func (f *Fetcher) FetchDocument(ctx context.Context, url, accept string) *Result {
	res := &Result{At: f.opts.Now(), MaxAge: -1}
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	ctx = context.WithValue(ctx, fetchKey{}, ctx)
	f.fetch(ctx, url, accept, res)
	res.Duration = f.opts.Now().Sub(res.At)
	return res
}

// fetch fetches target into res, following redirects, sending accept.
func (f *Fetcher) fetch(ctx context.Context, target, accept string, res *Result) {
	seen := map[string]bool{}
	for {
		res.URL = target
		seen[target] = true
		resp, err := f.get(ctx, target, accept)
		if err != nil {
			res.Outcome, res.Err, res.Status = Unreachable, err, 0
			return
		}
		res.Status = resp.StatusCode
		switch code := resp.StatusCode; {
		case code >= 200 && code <= 299:
			res.MaxAge = maxAge(resp.Header)
			body, truncated, err := f.readBody(resp)
			if err != nil {
				res.Outcome, res.Err = Unreachable, err
				return
			}
			res.Outcome, res.Truncated, res.Body = Fetched, truncated, body
			return
		case code >= 300 && code <= 399:
			drain(resp)
			next, err := location(resp)
			if err != nil {
				res.Outcome, res.Err = Unreachable, err
				return
			}
			switch {
			case seen[next]:
				res.Outcome, res.Err = Unavailable, fmt.Errorf("redirect loop at %s: counted as 404", next)
				return
			case res.Redirects >= f.opts.MaxRedirects:
				res.Outcome, res.Err = Unavailable, fmt.Errorf("more than %d redirects: counted as 404", max(f.opts.MaxRedirects, 0))
				return
			}
			res.Redirects++
			target = next
		case code == 429 || code >= 500 && code <= 599:
			drain(resp)
			if code == 429 || code == 503 {
				res.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), f.opts.Now())
			}
			res.Outcome, res.Err = Unreachable, &StatusError{Code: code, RetryAfter: res.RetryAfter}
			return
		case code >= 400 && code <= 499:
			drain(resp)
			res.Outcome, res.MaxAge = Unavailable, maxAge(resp.Header)
			res.DisallowAll = f.opts.AuthErrorsDisallow && (code == 401 || code == 403)
			return
		default:
			drain(resp)
			res.Outcome, res.Err = Unreachable, &StatusError{Code: code}
			return
		}
	}
}

func (f *Fetcher) get(ctx context.Context, target, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", target, err)
	}
	req.Header.Set("User-Agent", f.opts.UserAgent)
	req.Header.Set("Accept", accept)
	req.Header.Set("Accept-Encoding", "gzip, deflate")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", target, unwrapURLError(err))
	}
	return resp, nil
}

// unwrapURLError drops *url.Error's "Get URL:" prefix, which the caller
// already writes.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// readBody reads at most MaxBytes of decoded body. A body that ends before
// its declared length or final chunk is an error.
func (f *Fetcher) readBody(resp *http.Response) (body []byte, truncated bool, err error) {
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	size := int64(-1) // the decoded body's declared size, if known
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		size = resp.ContentLength
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, false, fmt.Errorf("read gzip body: %w", err)
		}
		defer zr.Close()
		r = zr
	case "deflate":
		// "deflate" is zlib (RFC 9110), though some servers send raw deflate.
		br := newPeekReader(resp.Body)
		if zr, err := zlib.NewReader(br); err == nil {
			defer zr.Close()
			r = zr
		} else {
			br.rewind()
			fr := flate.NewReader(br)
			defer fr.Close()
			r = fr
		}
	default:
		return nil, false, fmt.Errorf("unsupported content-encoding %q", enc)
	}
	// One byte more than the cap tells a long body from one of exactly
	// MaxBytes; the rest is never read (a gzip bomb inflates no further).
	body, err = readAll(io.LimitReader(r, int64(f.opts.MaxBytes)+1), min(size, int64(f.opts.MaxBytes)))
	if err != nil {
		return nil, false, fmt.Errorf("read body: %w", err)
	}
	if len(body) > f.opts.MaxBytes {
		return body[:f.opts.MaxBytes], true, nil
	}
	return body, false, nil
}

// readAll is io.ReadAll into a buffer of the declared size (-1: unknown;
// at most the fetcher's MaxBytes), and a byte more to see the end: one
// allocation, not a chain of them, for the body of most fetches.
func readAll(r io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, size+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // longer than declared: grow as io.ReadAll does
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// peekReader remembers the first bytes read so that a failed zlib header
// check can be retried as raw deflate.
type peekReader struct {
	r      io.Reader
	buf    []byte
	replay int // bytes of buf still to replay; -1 while recording
}

func newPeekReader(r io.Reader) *peekReader { return &peekReader{r: r, replay: -1} }

func (p *peekReader) Read(b []byte) (int, error) {
	if p.replay > 0 {
		n := copy(b, p.buf[len(p.buf)-p.replay:])
		p.replay -= n
		return n, nil
	}
	n, err := p.r.Read(b)
	if p.replay < 0 && len(p.buf) < 64 {
		p.buf = append(p.buf, b[:n]...)
	}
	return n, err
}

func (p *peekReader) rewind() { p.replay = len(p.buf) }

// ReadByte lets flate and zlib read without buffering past what they use.
func (p *peekReader) ReadByte() (byte, error) {
	var b [1]byte
	if _, err := io.ReadFull(p, b[:]); err != nil {
		return 0, err
	}
	return b[0], nil
}

// drain reads a little of a body that is not used, so the connection can be
// reused, and closes it.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
}

// location resolves a redirect's Location against the request URL.
func location(resp *http.Response) (string, error) {
	loc := resp.Header.Get("Location")
	if loc == "" {
		return "", fmt.Errorf("status %d without Location", resp.StatusCode)
	}
	u, err := resp.Request.URL.Parse(loc)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("status %d with unusable Location %q", resp.StatusCode, loc)
	}
	u.Fragment = ""
	return u.String(), nil
}

// maxAge reads Cache-Control: max-age in seconds; 0 for no-store, no-cache
// or max-age=0; -1 when there is none.
func maxAge(h http.Header) time.Duration {
	age := time.Duration(-1)
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "no-store", "no-cache":
				return 0
			case "max-age":
				n, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(val), `"`), 10, 64)
				if err != nil || n < 0 {
					continue
				}
				age = time.Duration(min(n, int64(maxRetryAfter*365/time.Second))) * time.Second
			}
		}
	}
	return age
}

// retryAfter reads a Retry-After header (seconds or an HTTP date), capped at
// 24 hours; 0 when absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		d = time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// ErrPrivateAddress is wrapped by the error of a connection robotsgate
// refused to open, or to ask a next hop for, because its address is
// private (block_private) or robotsgate's own listener: an *AddressError.
var ErrPrivateAddress = errors.New("private address")

// AddressError is the refusal of a connection to Host: it is, or resolves
// to, Addr ("" when a name's addresses are not known one by one), a
// private address under block_private, or robotsgate's own listener
// (Self). It wraps ErrPrivateAddress.
type AddressError struct {
	Host string
	Addr string
	Self bool
}

func (e *AddressError) Error() string {
	switch {
	case e.Self:
		return fmt.Sprintf("%s is robotsgate itself: %v", e.Host, ErrPrivateAddress)
	case e.Addr == "" || e.Addr == e.Host:
		return fmt.Sprintf("%s is a %v", e.Host, ErrPrivateAddress)
	}
	return fmt.Sprintf("%s resolves to %s: %v", e.Host, e.Addr, ErrPrivateAddress)
}

// Unwrap returns ErrPrivateAddress.
func (e *AddressError) Unwrap() error { return ErrPrivateAddress }

// StatusError is the failure of a fetch answered with 429, 5xx or an
// unknown status.
type StatusError struct {
	Code       int
	RetryAfter time.Duration // the answer's Retry-After; 0 if none
}

func (e *StatusError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("status %d, retry after %v", e.Code, e.RetryAfter)
	}
	return fmt.Sprintf("status %d", e.Code)
}

// Describe says in a few words, without Go internals, why a fetch or a
// proxied request failed: "status 503", "refused: connection refused",
// "timeout: no answer in time", "tls-verify: certificate signed by an
// unknown authority".
func Describe(err error) string {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Error()
	}
	kind := ErrorKind(err)
	msg := err.Error()
	var reason string
	switch kind {
	case "private-address":
		var ae *AddressError
		if errors.As(err, &ae) {
			reason = "refused: " + ae.Error()
		} else {
			reason = "refused: " + ErrPrivateAddress.Error()
		}
		if ae == nil || !ae.Self {
			reason += " (block_private)"
		}
	case "dns":
		reason = "name not found"
	case "refused":
		reason = "connection refused"
	case "reset":
		reason = "connection reset"
	case "timeout":
		reason = "no answer in time"
	case "tls-verify":
		switch {
		case strings.Contains(msg, "unknown authority"):
			reason = "certificate signed by an unknown authority"
		case strings.Contains(msg, "expired") || strings.Contains(msg, "not yet valid"):
			reason = "certificate expired or not yet valid"
		case strings.Contains(msg, "not valid for") || strings.Contains(msg, "doesn't contain"):
			reason = "certificate not valid for this host"
		default:
			reason = "certificate not trusted"
		}
	case "tls":
		reason = "TLS handshake failed"
	default:
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(msg, "unexpected EOF"):
			reason = "body cut short"
		case strings.Contains(msg, "redirect"), strings.Contains(msg, "Location"), strings.Contains(msg, "content-encoding"), strings.Contains(msg, "gzip"):
			reason = msg
		default:
			reason = "malformed or missing response"
		}
	}
	return kind + ": " + reason
}

// ErrorKind names the class of a network failure as the proxy reports it:
// "private-address" (robotsgate refused it: ErrPrivateAddress), "dns",
// "refused", "reset", "tls-verify", "tls", "timeout" or "protocol".
func ErrorKind(err error) string {
	var dnsErr *net.DNSError
	var verifyErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	var recordErr tls.RecordHeaderError
	var alertErr tls.AlertError
	var netErr net.Error
	switch {
	case errors.Is(err, ErrPrivateAddress):
		return "private-address"
	case errors.As(err, &dnsErr):
		if dnsErr.IsTimeout {
			return "timeout"
		}
		return "dns"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return "reset"
	case errors.As(err, &verifyErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return "tls-verify"
	case errors.As(err, &recordErr), errors.As(err, &alertErr), strings.Contains(err.Error(), "tls: "):
		return "tls"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	}
	return "protocol"
}
