package policy

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/robotsgate/robotsgate/proxy/header"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

// PurposeHeader is the request header in which a client declares what it
// fetches for ("ai-train, search"); it never reaches the origin.
const PurposeHeader = "X-Robots-Gate-Purpose"

// Purposes is a set of declared purposes (usage.Set).
type Purposes = usage.Set

// ParsePurposes reads purpose names as X-Robots-Gate-Purpose or check
// -purpose give them (usage.ParseSet).
func ParsePurposes(values []string) (Purposes, error) { return usage.ParseSet(values) }

// Refusal is the evidence of a usage refusal: the purpose refused, the
// statement that refused it, and the source it came from.
type Refusal struct {
	Purpose   usage.Purpose
	Statement string         // "content-usage: train-ai=n"
	Line      int            // its line in robots.txt; 0 for any other source
	Source    usage.SourceID // where the statement came from
}

// refusalOf is the refusal of purpose p by verdict v.
func refusalOf(p usage.Purpose, v usage.Verdict) Refusal {
	return Refusal{Purpose: p, Statement: v.Statement, Line: v.Line, Source: v.Source}
}

// Rule is the refusal as X-Robots-Gate-Rule and the audit's rule show it:
// the statement, or "response header " and the header
// (usage.RuleSource reads it back).
func (r *Refusal) Rule() string {
	if r.Source == usage.FromHeader {
		return "response header " + r.Statement
	}
	return r.Statement
}

// HeaderValue is X-Robots-Gate-Rule's value: bytes outside printable
// ASCII percent-encoded, and the line for a robots.txt statement.
func (r *Refusal) HeaderValue() string {
	var b strings.Builder
	for _, c := range []byte(r.Rule()) {
		if c < 0x20 || c > 0x7E {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	if r.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", r.Line)
	}
	return b.String()
}

const (
	reasonUsage       = "usage refused: the site refuses %s: %s"
	reasonUsageHeader = "usage refused: %s is refused for this response: %s; its body was withheld"
	reasonUsageReport = "usage refused: %s is refused for this response: %s (report mode: forwarded)"
	reasonBadPurpose  = "bad " + PurposeHeader + ": %v"
)

// judgeUsage is step 7b: a request that robots.txt allows, and that
// declares purposes, is refused when the statements that apply to it
// refuse one of them.
func (d *Decision) judgeUsage() {
	if d.Action != ActionAllowed || d.Purposes == 0 {
		return
	}
	if p, v, ok := d.Usage.Refuses(d.Purposes.List()); ok {
		d.Refusal = refusalOf(p, v)
		d.Action, d.Reason = ActionUsageRefused, fmt.Sprintf(reasonUsage, p, d.Refusal.HeaderValue())
	}
}

// judgesResponse reports whether a forwarded response's own statements
// decide d: an allowed request that declares purposes. A site allow rule
// lifts them, as it lifts robots.txt; /robots.txt itself is always
// allowed (step 4), whatever its headers say.
func (p *Policy) judgesResponse(d *Decision) bool {
	return d.Purposes != 0 && !d.noRobots && d.Action == ActionAllowed && d.Reason != reasonRobotsTxt
}

// NeedsHead reports whether a forwarded response must have its HTML head
// read (the proxy's head reader) before JudgeResponse: a page with content, for
// a request its statements could refuse, that says it is HTML (text/html;
// application/xhtml+xml, which the head reader reads as XML, as browsers
// do) or, saying nothing of its type, may be (as browsers sniff it, never
// as XML).
func (p *Policy) NeedsHead(d *Decision, resp *http.Response) bool {
	if !p.judgesResponse(d) || resp.Request != nil && resp.Request.Method == http.MethodHead {
		return false
	}
	switch code := resp.StatusCode; {
	case code < 200, code == http.StatusNoContent, code == http.StatusNotModified:
		return false
	}
	ct, _ := header.ContentType(resp.Header) // the last field, as browsers read it
	return ct == "" || ct == "text/html" || ct == "application/xhtml+xml"
}

// JudgeResponse decides a forwarded response's own statements for an
// allowed request that declares purposes (step 7b, on the response): each
// source of phase usage.OnResponse, in the list's order (its headers:
// Content-Usage, Content-Signal, tdm-reservation, X-Robots-Tag for the
// tokens obeyed, noimageai for an image; then head, what the <meta>
// elements of an HTML page's head say, nil when not read): one that
// could not be judged (its Judge's error) refuses every declared purpose
// (usage.Unjudged), as a head that could not be read does; then, for a
// reservation a source of phase usage.Reserve held before the request was
// sent (the site's tdmrep.json), whether the response lifts it with a
// statement of its own. It reports whether they refuse a declared
// purpose, setting d's action (usage-refused, or would-block in report
// mode) and evidence. A WebSocket's 101 is judged too: its stream is the
// site's content. ctx is the request's; the sources judge under it.
func (p *Policy) JudgeResponse(ctx context.Context, d *Decision, h http.Header, head *usage.Usage) bool {
	if !p.judgesResponse(d) {
		return false
	}
	ct, _ := header.ContentType(h) // the last field, as browsers read it
	// As decided: the origin, tokens, the target as decided and the rules
	// (none of the files besides robots.txt, which only the sources judged
	// before sending read), and what the response says.
	in := source.Input{Origin: d.Origin, Agents: d.Agents.Slice(), Purposes: d.Purposes.List(), Paths: []string{robots.Normalize(d.Target)},
		Rules: d.rules, Token: d.Token, Header: h, Image: strings.HasPrefix(ct, "image/"), Head: head}
	for _, s := range p.sources {
		if s.Phase() != usage.OnResponse {
			continue
		}
		u, err := s.Judge(ctx, &in)
		if pur, v, ok := u.Refuses(in.Purposes); ok {
			return p.refuseResponse(d, refusalOf(pur, v))
		}
		if err != nil {
			// Refused, as a head that could not be read is: the statement
			// names the source by its rules' prefix and says why.
			u = usage.Unjudged(s.Info(), err)
			pur, v, _ := u.Refuses(in.Purposes)
			return p.refuseResponse(d, refusalOf(pur, v))
		}
	}
	for _, s := range p.sources {
		if s.Phase() != usage.Reserve || d.reserved.Statement == "" || d.reserved.Source != s.Info().ID {
			continue
		}
		if l, ok := s.(source.Lifter); !ok || !l.Lifts(&in) {
			return p.refuseResponse(d, d.reserved)
		}
	}
	return false
}

// refuseResponse refuses d for r, a statement of (or about) the response,
// whose body is then withheld; a would-block in report mode.
func (p *Policy) refuseResponse(d *Decision, r Refusal) bool {
	d.Refusal = r
	d.Action, d.Reason = ActionUsageRefused, fmt.Sprintf(reasonUsageHeader, r.Purpose, r.HeaderValue())
	if p.mode == ModeReport {
		d.Action, d.Reason = ActionWouldBlock, fmt.Sprintf(reasonUsageReport, r.Purpose, r.HeaderValue())
	}
	return true
}

// PurposeValues returns the values of the request's purpose header and of
// any spelling of it with "_" for "-" (X_Robots_Gate_Purpose), which
// CGI-style servers read as the same header: all are declarations. other
// says whether there were other spellings (for RemovePurposeHeaders). One
// pass over the header names; in the common case it returns the header's
// own slice and allocates nothing.
func PurposeValues(h http.Header) (vals []string, other bool) {
	vals = h[PurposeHeader]
	for k, v := range h {
		if len(k) == len(PurposeHeader) && k != PurposeHeader && isPurposeSpelling(k) {
			vals, other = append(vals[:len(vals):len(vals)], v...), true
		}
	}
	return vals, other
}

// RemovePurposeHeaders deletes the purpose header, and, when other says
// there are, its other spellings.
func RemovePurposeHeaders(h http.Header, other bool) {
	delete(h, PurposeHeader)
	if !other {
		return
	}
	for k := range h {
		if isPurposeSpelling(k) {
			delete(h, k)
		}
	}
}

// isPurposeSpelling reports whether a header name is PurposeHeader's,
// in any spelling a server may read as it (header.SameName).
func isPurposeSpelling(k string) bool {
	return header.SameName(k, "x-robots-gate-purpose")
}
