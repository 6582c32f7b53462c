package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/check"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/proxy/wire"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// Bounds of POST /v1/decide (docs/data-teams.md, "The decision API: POST
// /v1/decide").
const (
	// MaxDecideURLs bounds the URLs of one call.

	MaxDecideURLs = 10_000
	// MaxDecideBytes bounds a call's body: 10,000 URLs of 1.6 KiB.
	MaxDecideBytes = 16 << 20
	// MaxDecideCalls bounds the calls decided at once: each may hold 16
	// robots.txt fetches and its body's memory. Past it: 503, Retry-After.
	MaxDecideCalls = 4
	// MaxDecideURLBytes bounds one URL, as policy.MaxTargetBytes bounds a
	// proxied request's target (absolute-form included).
	MaxDecideURLBytes = policy.MaxTargetBytes
	// MaxDecideWork bounds the matching work of one call, in
	// robots.Budget units: 64 URLs at the bound of one each, some 0.3 s of
	// CPU. URLs past it are not decided (decision "overloaded"); real
	// files take a few hundred units a URL, so 10,000 URLs never come near.
	MaxDecideWork = 64 * policy.DecideWork
	// decideReadTimeout bounds the time to send a body.
	decideReadTimeout = 30 * time.Second
	// DecideCallTimeout is the default of Options.DecideTimeout, the
	// bound of a call's time: fetching the robots.txt of its origins and
	// the usage files (tdmrep.json, RSL licences) its purposes need (URLs
	// whose files are not fetched by then are "unreachable" for it, a
	// later call finding them cached), and deciding (a URL it cuts short
	// is "overloaded", reasonDecideTime).
	DecideCallTimeout = time.Minute
)

// ReasonDecideWork is the reason of the URLs of a /v1/decide call past
// its work bound.
const ReasonDecideWork = "not decided: this call reached its work bound (MaxDecideWork); send the rest in another call"

// reasonDecideTime is the reason of a URL whose deciding the call's time
// bound (%v) cut short: overloaded, never client-left to a caller still
// there.
const reasonDecideTime = "not decided: this call reached its time bound (%v); send the rest in another call"

// decideInput is the body of POST /v1/decide (docs/data-teams.md, "The
// decision API: POST /v1/decide"), read by decodeDecideFields.
type decideInput struct {
	UserAgent *string
	Agent     *string
	Purpose   []string
	URLs      []string
}

// decideOutput is its answer: one check -json object per URL, in order.
type decideOutput struct {
	Results []audit.Result `json:"results"`
}

// serveDecide answers POST /v1/decide: URLs decided as check decides them,
// by the same code, with the proxy's own cache (cold origins fetched once
// each, several at a time, within max_fetches). The caller's address and
// [auth] user apply to [[agents]] rules; block_private applies; pacing and
// report mode do not (the answer is what the rules say).
func (h *Handler) serveDecide(w http.ResponseWriter, r *http.Request, user string) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		// Also what keeps a web page from posting here: a JSON body needs
		// a CORS preflight, which is never answered.
		apiError(w, http.StatusUnsupportedMediaType, "send the body as Content-Type: application/json")
		return
	}
	select {
	case h.decideCalls <- struct{}{}:
		defer func() { <-h.decideCalls }()
	default:
		w.Header().Set("Retry-After", "1")
		apiError(w, http.StatusServiceUnavailable, fmt.Sprintf("%d decide calls are running: retry", MaxDecideCalls))
		return
	}
	// The slot is held while the body arrives: a client that drips it
	// cannot hold one for long.
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(decideReadTimeout))
	in, code, err := readDecideInput(w, r)
	if err != nil {
		apiError(w, code, err.Error())
		return
	}
	p, _ := h.o.Snapshot()
	bound := h.o.DecideTimeout
	if bound <= 0 {
		bound = DecideCallTimeout
	}
	fetchCtx, cancel := context.WithTimeout(r.Context(), bound)
	defer cancel()
	wd := &policy.Env{Rules: check.Prefetch(fetchCtx, h.o.Cache, h.fetchable(fetchCtx, p, in.URLs)), Private: h.o.Private, Now: h.o.Now}
	filesRead := h.o.Files != nil // as check reads them, without -robots
	if filesRead {
		wd.Files = h.o.Files
	}
	declared, _ := policy.ParsePurposes(in.Purpose) // checked by readDecideInput
	out := decideOutput{Results: make([]audit.Result, 0, len(in.URLs))}
	var work int64
	for _, u := range in.URLs {
		if r.Context().Err() != nil {
			return // the caller left: decide no more
		}
		req := policy.Request{Kind: policy.KindCheck, Client: wire.ClientAddr(r), User: user, Purposes: in.Purpose}
		switch {
		case in.Agent != nil:
			req.Agents = []string{*in.Agent}
		case in.UserAgent != nil:
			req.UserAgent = *in.UserAgent
		}
		var d policy.Decision
		switch err := req.SetURL(u); {
		case len(u) > MaxDecideURLBytes:
			d.Action, d.Reason, d.Purposes = policy.ActionBadRequest, fmt.Sprintf("%s: longer than %d bytes", policy.ReasonBadRequest, MaxDecideURLBytes), declared
		case err != nil:
			d.Action, d.Reason, d.Purposes = policy.ActionBadRequest, policy.ReasonBadRequest+": "+err.Error(), declared
		case work > MaxDecideWork:
			d.Action, d.Reason, d.Purposes = policy.ActionOverloaded, ReasonDecideWork, declared
		default:
			// Under the call's bound: a usage file a declared purpose
			// needs is fetched within it, or the URL is answered
			// unreachable ("gave up waiting").
			p.Decide(fetchCtx, wd, &req, &d)
			work += d.Work()
			if d.Action == policy.ActionOverloaded && fetchCtx.Err() != nil && r.Context().Err() == nil {
				d.Reason = fmt.Sprintf(reasonDecideTime, bound)
			}
		}
		out.Results = append(out.Results, audit.ResultOf(u, &d, filesRead))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(out)
}

// fetchable returns the URLs of urls whose robots.txt a decision may
// need: not those whose host is an address block_private refuses (as step
// 2's lookup judges it), which are answered private-address before any
// rules are looked at, so that their robots.txt is never fetched. Names
// are not resolved here, one by one: their fetches are checked by the
// fetcher's guard (upstream.Guard), several at a time, which refuses a
// name that resolves to a private address before any connection, and
// step 2 then answers from the lookup that check left behind.
func (h *Handler) fetchable(ctx context.Context, p *policy.Policy, urls []string) []string {
	up := &p.Config().Upstream
	if !up.BlockPrivate || h.o.Private == nil {
		return urls
	}
	out := make([]string, 0, len(urls))
	for _, u := range urls {
		o, err := fetch.ParseOrigin(u)
		if err != nil {
			continue // decided bad-request, without rules
		}
		if _, err := netip.ParseAddr(o.Host); err == nil && h.o.Private.Private(ctx, o.Host, up.Timeout) {
			continue
		}
		out = append(out, u)
	}
	return out
}

// readDecideInput reads and checks a /v1/decide body; on error it returns
// the status to answer with (400, or 413 for too much).
func readDecideInput(w http.ResponseWriter, r *http.Request) (*decideInput, int, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxDecideBytes))
	// Fields by their exact names: encoding/json alone would take "URLS"
	// for "urls".
	var fields map[string]json.RawMessage
	err := dec.Decode(&fields)
	var in decideInput
	if err == nil {
		err = decodeDecideFields(fields, &in)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("body over %d bytes", MaxDecideBytes)
		}
		if errors.Is(err, io.EOF) {
			return nil, http.StatusBadRequest, errors.New("empty body: want a JSON object with \"urls\"")
		}
		return nil, http.StatusBadRequest, fmt.Errorf("bad JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, http.StatusBadRequest, errors.New("bad JSON: more after the object")
	}
	switch {
	case in.URLs == nil:
		return nil, http.StatusBadRequest, errors.New(`"urls" is missing: want an array of URLs`)
	case len(in.URLs) > MaxDecideURLs:
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("%d URLs: at most %d per request", len(in.URLs), MaxDecideURLs)
	case in.Agent != nil && in.UserAgent != nil:
		return nil, http.StatusBadRequest, errors.New(`"agent" and "user_agent" are exclusive: give the token, or the whole header`)
	case in.Agent != nil && !robots.ValidToken(*in.Agent):
		return nil, http.StatusBadRequest, fmt.Errorf(`"agent": %q is not a product token (letters, "_" and "-"); for a whole User-Agent header use "user_agent"`, *in.Agent)
	}
	if _, err := policy.ParsePurposes(in.Purpose); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf(`"purpose": %v`, err)
	}
	return &in, 0, nil
}

// decodeDecideFields reads a /v1/decide body's fields, each by its exact
// name; any other name is an error naming the known ones.
func decodeDecideFields(fields map[string]json.RawMessage, in *decideInput) error {
	for name, raw := range fields {
		var err error
		switch name {
		case "user_agent":
			err = json.Unmarshal(raw, &in.UserAgent)
		case "agent":
			err = json.Unmarshal(raw, &in.Agent)
		case "purpose":
			err = json.Unmarshal(raw, &in.Purpose)
		case "urls":
			err = json.Unmarshal(raw, &in.URLs)
		default:
			return fmt.Errorf("unknown field %q: the fields are user_agent, agent, purpose and urls", name)
		}
		if err != nil {
			return fmt.Errorf("%q: %v", name, err)
		}
	}
	return nil
}

// apiError answers a JSON API request with {"error": msg}.
func apiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{"robotsgate: " + strings.TrimPrefix(msg, "robotsgate: ")})
}
