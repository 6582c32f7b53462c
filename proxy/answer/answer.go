// Package answer writes robotsgate's own answers: the plain-text 403,
// 503 and the rest that carry a decision's evidence to the client (and
// its X-Robots-Gate), and, in the browser block style, answers a page
// can take without breaking.
package answer

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/usage"
)

// For returns robotsgate's own answer to r for d, written in style
// ([responses] block_style) at now; nil when d lets r go to its origin.
func For(style policy.BlockStyle, r *http.Request, d *policy.Decision, now time.Time) *http.Response {
	return answerFor(style, r, d, false, now)
}

// Withheld returns robotsgate's own answer to r for d, as For does, when
// the origin answered r and its answer is withheld: a use the answer's
// own statements refuse (d.Action is policy.ActionUsageRefused).
func Withheld(style policy.BlockStyle, r *http.Request, d *policy.Decision, now time.Time) *http.Response {
	return answerFor(style, r, d, true, now)
}

// answerFor is For, and Withheld when withheld.
func answerFor(style policy.BlockStyle, r *http.Request, d *policy.Decision, withheld bool, now time.Time) *http.Response {
	resp := plainAnswer(r, d, withheld, now)
	if resp != nil && style == policy.BlockBrowser {
		resp = browserAnswer(r, d, resp)
	}
	return resp
}

// plainAnswer is the proxy's own answer for a decision in plain text, or
// nil to forward; withheld: the origin's answer is withheld.
func plainAnswer(r *http.Request, d *policy.Decision, withheld bool, now time.Time) *http.Response {
	switch d.Action {
	case policy.ActionAllowed, policy.ActionWouldBlock:
		return nil
	case policy.ActionDisallowed:
		resp := Text(r, http.StatusForbidden, d.Action, now, blockBody(r, d))
		if rule := d.RuleHeader(); rule != "" {
			resp.Header.Set("X-Robots-Gate-Rule", rule)
		}
		return resp
	case policy.ActionUsageRefused:
		resp := Text(r, http.StatusForbidden, d.Action, now, usageBody(r, d, withheld))
		resp.Header.Set("X-Robots-Gate-Rule", d.RuleHeader())
		return resp
	case policy.ActionDenied:
		return Text(r, http.StatusForbidden, d.Action, now, fmt.Sprintf("robotsgate: %s is denied by a site rule: %s\n", DisplayURL(r), d.Site.Reason))
	case policy.ActionPrivate:
		if d.Reason == policy.ReasonSelf {
			return Text(r, http.StatusForbidden, d.Action, now, fmt.Sprintf("robotsgate: %s: %s: ask its own address directly, not through it\n", DisplayHost(r), policy.ReasonSelf))
		}
		return Text(r, http.StatusForbidden, d.Action, now, fmt.Sprintf("robotsgate: %s: %s (refused by [upstream] block_private; "+
			"set block_private = false to reach private addresses, for example a test origin on this machine)\n", DisplayHost(r), policy.ReasonPrivate))
	case policy.ActionUnreachable:
		resp := Text(r, http.StatusServiceUnavailable, d.Action, now, blockBody(r, d))
		wait := time.Second
		if !d.Fetch.RetryAt.IsZero() {
			wait = max(d.Fetch.RetryAt.Sub(now), time.Second)
		}
		resp.Header.Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		return resp
	case policy.ActionUpstream:
		return Text(r, http.StatusBadGateway, d.Action, now, "robotsgate: "+d.Reason+"\n")
	case policy.ActionBadRequest:
		code := http.StatusBadRequest
		if d.Status != 0 {
			code = d.Status // 414, 408
		}
		return Text(r, code, d.Action, now, "robotsgate: "+d.Reason+"\n")
	case policy.ActionMisdirected:
		return Text(r, http.StatusMisdirectedRequest, d.Action, now, "robotsgate: "+d.Reason+"\n")
	case policy.ActionAuth:
		resp := Text(r, http.StatusProxyAuthRequired, policy.ActionAuth, now, "robotsgate: proxy authentication required\n")
		resp.Header.Set("Proxy-Authenticate", `Basic realm="robotsgate"`)
		return resp
	case policy.ActionOverloaded:
		resp := Text(r, http.StatusServiceUnavailable, d.Action, now, "robotsgate: "+d.Reason+"\n")
		resp.Header.Set("Retry-After", "1")
		return resp
	case policy.ActionShuttingDown:
		resp := Text(r, http.StatusServiceUnavailable, d.Action, now, fmt.Sprintf("robotsgate: %s was not sent: %s; retry\n", DisplayURL(r), d.Reason))
		resp.Header.Set("Retry-After", strconv.Itoa(ShutdownRetryAfter))
		return resp
	case policy.ActionClientLeft:
		// Its client has gone: on HTTP/1 this is written all the same,
		// and one that only closed its sending side reads it (and may
		// retry); the audit's status says 503 then. On HTTP/2 the stream
		// is reset or the connection closed: nothing is written, status 0.
		resp := Text(r, http.StatusServiceUnavailable, d.Action, now, fmt.Sprintf("robotsgate: %s was not answered: %s\n", DisplayURL(r), d.Reason))
		resp.Header.Set("Retry-After", "1")
		return resp
	case policy.ActionPriceRefused:
		return Text(r, http.StatusPaymentRequired, d.Action, now, fmt.Sprintf("robotsgate: %s: %s\n", DisplayURL(r), d.Reason))
	case policy.ActionPaced:
		resp := Text(r, http.StatusTooManyRequests, d.Action, now, fmt.Sprintf("robotsgate: %s is %s\n", DisplayURL(r), d.Reason))
		resp.Header.Set("Retry-After", strconv.Itoa(max(1, int((d.Waited+time.Second-1)/time.Second))))
		return resp
	}
	return Text(r, http.StatusInternalServerError, d.Action, now, "robotsgate: "+d.Reason+"\n")
}

// ShutdownRetryAfter is the Retry-After, in seconds, of the requests a
// shutdown answers: about what a restart, or a balancer's move to
// another instance, takes.
const ShutdownRetryAfter = 5

// Text builds one of the proxy's own answers to r: status code,
// X-Robots-Gate: gate, and body as plain text, dated now.
func Text(r *http.Request, code int, gate policy.Action, now time.Time, body string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	h["X-Robots-Gate"] = []string{gate.String()}
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
func blockBody(r *http.Request, d *policy.Decision) string {
	var b strings.Builder
	if d.Action == policy.ActionUnreachable {
		what := "robots.txt"
		if d.Unfetched != "" {
			what = d.Unfetched
		}
		fmt.Fprintf(&b, "robotsgate: %s is not allowed: %s could not be fetched and no copy is held\n\n", DisplayURL(r), what)
	} else {
		fmt.Fprintf(&b, "robotsgate: %s is disallowed by robots.txt\n\n", DisplayURL(r))
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

// usageBody explains a usage refusal to a person reading a scraper's log;
// withheld: the origin answered, and its answer is withheld.
func usageBody(r *http.Request, d *policy.Decision, withheld bool) string {
	var b strings.Builder
	if withheld {
		fmt.Fprintf(&b, "robotsgate: the answer for %s is withheld for %s: the site refuses that use\n\n", DisplayURL(r), d.Refusal.Purpose)
	} else {
		fmt.Fprintf(&b, "robotsgate: %s is not fetched for %s: the site refuses that use\n\n", DisplayURL(r), d.Refusal.Purpose)
	}
	fmt.Fprintf(&b, "purpose:    %s (declared: %s)\n", d.Refusal.Purpose, strings.Join(d.Purposes.Names(), ", "))
	switch {
	case d.Refusal.Source == usage.FromHeader:
		fmt.Fprintf(&b, "statement:  %s (a header of the response, whose body was withheld)\n", d.Refusal.Statement)
	case d.Refusal.Line > 0:
		fmt.Fprintf(&b, "statement:  %s (line %d of %s)\n", d.Refusal.Statement, d.Refusal.Line, d.RobotsURL())
	case withheld:
		fmt.Fprintf(&b, "statement:  %s (the body was withheld)\n", d.Refusal.Statement)
	default: // a file besides robots.txt: the statement names it
		fmt.Fprintf(&b, "statement:  %s\n", d.Refusal.Statement)
	}
	fmt.Fprintf(&b, "agent:      %s\n", strings.Join(d.Agents.Slice(), ", "))
	fmt.Fprintf(&b, "reason:     %s\n", d.Reason)
	return b.String()
}

// DisplayURL is the request's URL as sent, with any userinfo removed and
// the host not percent-encoded.
func DisplayURL(r *http.Request) string {
	if r.URL == nil {
		return ""
	}
	if r.Method == http.MethodConnect {
		return DisplayHost(r) // a CONNECT names host:port, no URL
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
	target := policy.RequestTarget(uri)
	return r.URL.Scheme + "://" + host + target
}

// DisplayHost is the host a request names, as sent.
func DisplayHost(r *http.Request) string {
	if r.URL != nil && r.URL.Host != "" {
		return r.URL.Host
	}
	return r.Host
}
