package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/proxy/answer"
	"github.com/robotsgate/robotsgate/proxy/head"
	"github.com/robotsgate/robotsgate/proxy/header"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/pay"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage"
)

// The forward path (docs/development.md, "The forward path"), as
// net/http/httputil's ReverseProxy shapes it: the request the client sent
// is never edited; a clone of it goes upstream, prepared by the request
// steps (prepare), and what comes back is passed through the response
// steps (answer), each a small named method below, in the order the two
// lists give. A response step may answer for the origin (a price or a use
// refused): the steps after it are then skipped.

// forwarding is one allowed request on its way to its origin and back.
type forwarding struct {
	s   *Server
	sn  *snapshot     // the config it was decided under: its policy, signer and egress
	in  *http.Request // as the client sent it: never edited
	out *http.Request // the clone that goes upstream, which the steps prepare
	// req is a copy of the request as decided: a pointer to the caller's
	// would move it to the heap, for every request, with whatever else
	// of f's reaches it.
	req policy.Request
	ci  *connectInfo // the tunnel it came in, if any
	d   *policy.Decision
	// client is the client's context: whether it is still there (to be
	// paid for). out's does not end with it.
	client context.Context
	// connNamed is what the request's Connection header names, which its
	// trailer may not carry either (set when it has content).
	connNamed []string
	// own: a response step replaced the origin's answer with robotsgate's
	// own; the steps after it do not run.
	own bool
	// up is what happened upstream, apart from d, what was decided.
	up outcome
	// offer is the crawler-max-price the request carries, if any
	// (offerPrice).
	offer priceOffer
}

// outcome is what happened upstream to a forwarded request, kept apart
// from its policy.Decision, which says what was decided: finish counts
// and audits both.
type outcome struct {
	answered int        // the origin's status, when it answered (even if robotsgate withheld the answer); 0 otherwise
	charged  pay.Amount // what the site charged for it (pay-per-crawl); zero when nothing
	// audited: the answer is audited even with log_allowed off (a 402 to a
	// path never paid for, a site's crawler-error), its reason saying why.
	audited bool
}

// forward sends a request that goes through upstream, exactly as decided
// under sn (its policy, signer and egress), and returns the origin's
// answer for the client, or robotsgate's own when the upstream failed or
// a response step refused it. Every way out is finished once, here.
func (s *Server) forward(sn *snapshot, in *http.Request, req *policy.Request, ci *connectInfo, d *policy.Decision) *http.Response {
	f := forwarding{s: s, sn: sn, in: in, req: *req, ci: ci, d: d, client: in.Context()}
	f.prepare()
	resp, err := f.send()
	if err != nil {
		resp = s.upstreamFailure(f.sn.pol, f.out, f.client, d.Origin.HostPort(), err, d)
		f.lostOffer()
	} else {
		resp = f.answer(resp)
	}
	s.finish(f.sn.pol, f.out, d, f.up, resp.StatusCode, "")
	return resp
}

// prepare builds the request that goes upstream: the request steps, in
// order.
func (f *forwarding) prepare() {
	f.clone()
	f.dropHopByHop()
	f.dropPurposeHeaders()
	f.readableHead()
	f.dropPriceOffers()
	f.offerPrice()
	f.guardContent()
	f.bindToDecision()
	f.sign()
}

// answer passes the origin's answer resp on: the response steps, in
// order, until one answers for the origin.
func (f *forwarding) answer(resp *http.Response) *http.Response {
	if resp = f.pay(resp); f.own {
		return resp
	}
	f.scrubGateFields(resp)
	f.observeBackoff(resp)
	if resp = f.judgeUsage(resp); f.own {
		return resp
	}
	f.watchTrailer(resp)
	// The origin's hop-by-hop fields go before robotsgate's own are added:
	// a Connection header naming X-Robots-Gate would remove them.
	header.RemoveHopByHop(resp.Header, resp.StatusCode == http.StatusSwitchingProtocols && header.IsWebSocketUpgrade(resp.Header))
	f.markWouldBlock(resp)
	f.markHeld(resp)
	return resp
}

// clone makes out: in with its own header map and URL (what the steps
// edit), to the CONNECT authority only when it came in a tunnel. Decided:
// the round trip does not end when the client leaves (an abandoned
// request costs that one round trip, bounded by upstream.timeout), and
// waits on nothing of the client's connection. The body and the trailer
// map are in's until guardContent wraps them.
func (f *forwarding) clone() {
	out := f.in.WithContext(context.WithoutCancel(f.client))
	out.Header = f.in.Header.Clone()
	u := *f.in.URL
	out.URL = &u
	if f.ci != nil {
		u.Host = f.ci.tunnel.Authority
	}
	f.out = out
}

// dropHopByHop removes the hop-by-hop fields (a WebSocket's upgrade
// aside). "Connection: close" is the client's word on its own connection:
// the upstream one stays in the pool, for the next request and the next
// tunnel to the origin. But a connection that carried content is never
// used again (docs/decision.md step 0): an origin that ignored the content
// may have read it as a request of its own, and its answer to that must
// reach nobody.
func (f *forwarding) dropHopByHop() {
	h := f.out.Header
	if f.req.Content {
		f.connNamed = header.ConnectionNamed(h)
	}
	header.RemoveHopByHop(h, header.IsWebSocketUpgrade(h))
	f.out.Close = f.req.Content
}

// dropPurposeHeaders removes the purpose declarations: robotsgate's,
// never the origin's.
func (f *forwarding) dropPurposeHeaders() {
	policy.RemovePurposeHeaders(f.out.Header, f.req.OtherPurposeSpelling)
}

// readableHead asks, for a request that declares purposes, for an answer
// whose HTML head can be read (head.Reader): in a coding robotsgate reads,
// and from its first byte (a range would skip the head, or wrap it in
// multipart/byteranges).
func (f *forwarding) readableHead() {
	if f.d.Purposes == 0 {
		return
	}
	h := f.out.Header
	head.AcceptReadable(h)
	delete(h, "Range")
	delete(h, "If-Range")
}

// dropPriceOffers removes a client's own price offers when pay-per-crawl
// or [identity] is on: a price offer signed with robotsgate's identity is
// the operator's, and every payment goes through the budget, never a
// client's own offer, which would have a site charge without a 402
// robotsgate sees.
func (f *forwarding) dropPriceOffers() {
	if _, _, on := f.sn.pol.Payments(); on || f.sn.signer != nil {
		removePriceOffers(f.out.Header)
	}
}

// guardContent bounds the content's reads and filters its trailer
// (guardBody).
func (f *forwarding) guardContent() {
	if f.req.Content {
		f.out.Body = f.s.guardBody(f.sn.pol, f.in, f.out, f.connNamed)
	}
}

// bindToDecision sends no User-Agent when the client sent none (not Go's
// default), and the request as decided (sendAsDecided): it is a client's
// request now.
func (f *forwarding) bindToDecision() {
	if _, ok := f.out.Header["User-Agent"]; !ok {
		f.out.Header["User-Agent"] = []string{""}
	}
	sendAsDecided(f.out, f.req.Target, f.d.Origin, f.sn.out.tr.Proxy != nil)
	f.out.RequestURI = ""
}

// sign signs the request with [identity]'s key, for the authority
// decided, which it names (out.Host, set by bindToDecision); a client's
// own Signature fields are replaced. The matching [[sites]] rule's
// signature_agent_form wins over [identity]'s.
func (f *forwarding) sign() {
	if signer := f.signer(); signer != nil {
		if f.offer.amount.Currency != "" {
			// A price offered is covered: it cannot be replayed with another.
			signer.SignWith(f.out.Header, f.out.Host, pay.FieldMaxPrice)
		} else {
			signer.Sign(f.out.Header, f.out.Host)
		}
		f.s.metrics.signed.Inc()
	}
}

// signer returns the signer in force for the request decided: the
// snapshot's, in the form of Signature-Agent its [[sites]] rule names, if
// any; nil when [identity] is off.
func (f *forwarding) signer() *identity.Signer {
	s := f.sn.signer
	if s != nil && f.d.Site != nil {
		s = s.Form(f.d.Site.AgentForm)
	}
	return s
}

// errUnaskedSwitch is a 101 to a request that asked for no upgrade.
var errUnaskedSwitch = errors.New("the origin switched protocols unasked")

// send sends out through the egress and notes the origin's answer.
func (f *forwarding) send() (*http.Response, error) {
	start := time.Now()
	resp, err := f.roundTrip()
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols && !header.IsWebSocketUpgrade(f.out.Header) {
		// A 101 to a request that asked for no upgrade (its Upgrade is
		// removed unless it is a WebSocket's): no protocol to relay.
		resp.Body.Close()
		return nil, errUnaskedSwitch
	}
	if err != nil {
		return nil, err
	}
	f.s.metrics.upstream.Observe(time.Since(start).Seconds())
	f.up.answered = resp.StatusCode
	return resp, nil
}

// scrubGateFields removes X-Robots-Gate* fields from the answer, and from
// its trailer as the body's end brings it: a client can trust that they
// are robotsgate's.
func (f *forwarding) scrubGateFields(resp *http.Response) {
	header.RemoveGateFields(resp.Header)
	if resp.StatusCode != http.StatusSwitchingProtocols && (resp.Trailer != nil || resp.ContentLength < 0) {
		// The trailer comes with the body's end, where it is read into
		// resp.Trailer: filtered there, before a writer copies it.
		header.RemoveGateFields(resp.Trailer)
		resp.Body = &trailerGuard{ReadCloser: resp.Body, resp: resp}
	}
}

// observeBackoff has an origin that asks for a pause (429, 503 with
// Retry-After) held back, with [politeness] honour_retry_after.
func (f *forwarding) observeBackoff(resp *http.Response) {
	pc := &f.sn.pol.Config().Politeness
	if !pc.HonourRetryAfter {
		return
	}
	s, o := f.s, f.d.Origin
	if wait, ok := s.backoffs.Observe(o.Host, o.String, resp.StatusCode, resp.Header.Get("Retry-After"), pc.MaxBackoff); ok {
		s.metrics.backoffs.Inc()
		s.log.Info("origin backing off", "host", o.Host, "status", resp.StatusCode, "retry_after", resp.Header.Get("Retry-After"), "for", wait)
		s.shareBackoff(o.Host)
	}
}

// judgeUsage has the answer judged for the purposes the request declares:
// its header's usage statements and, for HTML, its head's. A refused use
// withholds the body: closing it unread closes the origin connection,
// which no later request can then inherit half-read.
func (f *forwarding) judgeUsage(resp *http.Response) *http.Response {
	var inHead *usage.Usage // what the HTML head's meta elements say, when read
	if f.sn.pol.NeedsHead(f.d, resp) {
		u := f.s.heads.Read(resp, f.d.Agents.Slice())
		inHead = &u
	}
	if !f.sn.pol.JudgeResponse(f.client, f.d, resp.Header, inHead) || f.d.Action != policy.ActionUsageRefused {
		return resp
	}
	resp.Body.Close()
	f.own = true
	return answer.Withheld(f.d.Style, f.out, f.d, f.s.opts.Now())
}

// watchTrailer has the end of the body judged for usage statements in
// its trailer, when the request declares purposes (head.WatchTrailer). It
// comes too late to withhold anything, so a statement there that would
// have refused a declared purpose is logged (a warning naming the URL and
// the statement) and counted (robotsgate_usage_trailer_statements_total),
// for the operator to drop what was received.
func (f *forwarding) watchTrailer(resp *http.Response) {
	d, r := f.d, f.out
	if d.Purposes == 0 || resp.StatusCode == http.StatusSwitchingProtocols || r.Method == http.MethodHead || !head.MayHaveTrailer(resp) {
		return
	}
	// The closure takes what it needs, never f: f would escape with it,
	// one more allocation for every forwarded request.
	s, p, ctx := f.s, f.sn.pol, f.client
	dc := *d // judged once the body ends, on a copy: d was audited already
	url := r.URL.String()
	head.WatchTrailer(resp, func(statements http.Header) {
		if !p.JudgeResponse(ctx, &dc, statements, nil) {
			return
		}
		s.metrics.trailerStatements.Inc()
		s.log.Warn("usage statement in a trailer, after the body was sent: not enforced",
			"url", url, "purpose", dc.Refusal.Purpose.String(), "rule", dc.RuleHeader())
	})
}

// markWouldBlock says, in report mode, that robotsgate would have blocked
// the request, and by which rule.
func (f *forwarding) markWouldBlock(resp *http.Response) {
	if f.d.Action != policy.ActionWouldBlock {
		return
	}
	resp.Header["X-Robots-Gate"] = []string{policy.ActionWouldBlock.String()}
	if rule := f.d.RuleHeader(); rule != "" {
		resp.Header.Set("X-Robots-Gate-Rule", rule)
	}
}

// heldHeader is the field on an allowed answer that robotsgate held, for
// pacing or its origin's back-off, before sending the request: how long,
// in seconds with three decimals ("1.250").
const heldHeader = "X-Robots-Gate-Held"

// markHeld says how long robotsgate held the request before sending it
// (heldHeader), so that a crawler can tell its own pacing from a slow
// site. A request not held gets none, and costs nothing.
func (f *forwarding) markHeld(resp *http.Response) {
	if !f.d.Paced || f.d.Waited <= 0 {
		return
	}
	resp.Header[heldHeader] = []string{strconv.FormatFloat(f.d.Waited.Seconds(), 'f', 3, 64)}
}

// sendAsDecided binds r to what was decided (docs/decision.md step 7, "what
// is decided is what is sent"): the raw request-target goes upstream byte
// for byte, never rebuilt from the parsed URL (which re-encodes a path
// holding "|", "{" or bytes >= 0x80 and so turns "%2F" into "/"), and the
// host dialled is the origin's host as decided ("127.1" is 127.0.0.1, not
// a name for a next hop to resolve). The request goes in origin-form,
// except in absolute-form to a plain-HTTP next hop (viaProxy) and for a
// path that starts with "//", which origin-form would turn into an
// authority.
func sendAsDecided(r *http.Request, target string, o fetch.Origin, viaProxy bool) {
	// The authority as decided, in the request line, the Host header and
	// the address dialled alike: never the client's spelling of it
	// ("EXAMPLE.COM.", "1572395042", ":0080"), which a next hop or origin
	// could read otherwise.
	authority := o.Authority()
	u := r.URL
	u.Host, r.Host = authority, authority
	path, query, hasQuery := strings.Cut(target, "?")
	u.RawQuery, u.ForceQuery = query, hasQuery && query == ""
	u.Fragment, u.RawFragment = "", ""
	if viaProxy && u.Scheme == "http" || strings.HasPrefix(path, "//") {
		u.Opaque = "//" + authority + path // RequestURI: "http://host" + path
	} else {
		u.Opaque = path
	}
}
