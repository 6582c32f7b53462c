// Package admin serves the requests made to the proxy itself rather than
// through it: /healthz, /metrics, /ca.pem, the robots.txt cache (/robots,
// /robots/purge), the status page and its JSON (/status, /status.json),
// and the decision API (POST /v1/decide), each under its access rule.
package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/auth"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/pace"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/proxy/wire"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage/source"
)

// Options are what a Handler serves from.
type Options struct {
	// Snapshot returns the policy in force and its authenticator (nil
	// without [auth] users).
	Snapshot func() (*policy.Policy, *auth.Authenticator)
	Cache    *fetch.Cache    // the proxy's robots.txt cache
	Files    *fetch.Files    // the proxy's other usage files (tdmrep.json, RSL licences); nil: none
	Cluster  *cluster.Client // the fleet's Redis; nil: this instance alone
	Metrics  http.Handler    // serves /metrics
	Board    *Board          // what /status shows besides the cache
	// Holds says what holds requests now, for each host held: the
	// back-off in force (until when, zero when none, and why) and how
	// many requests wait, for their turn or for the back-off. Nil:
	// nothing is shown.
	Holds func() map[string]pace.Hold
	// CA is the PEM certificate of the CA the proxy signs with, served
	// at /ca.pem; nil in tunnel mode, which decrypts nothing.
	CA []byte
	// Identity returns what the proxy publishes of [identity], all of
	// it from the config in force at one instant: a reload between two
	// reads would serve one config's card with another's keys. Its zero
	// value (or a nil Identity) is [identity] off: the key directory and
	// the card are then 404.
	Identity func() Identity
	// Private is the decision API's block_private lookup.
	Private policy.PrivateLookup
	// DecideTimeout bounds each /v1/decide call; 0: DecideCallTimeout.
	DecideTimeout time.Duration
	Now           func() time.Time
}

// Handler serves the proxy's own endpoints.
type Handler struct {
	o Options
	// mux routes each endpoint by method and path (routes).
	mux *http.ServeMux
	// decideCalls are the /v1/decide calls running (MaxDecideCalls slots).
	decideCalls chan struct{}
}

// Running is the number of decision API calls running.
func (h *Handler) Running() int { return len(h.decideCalls) }

// New returns the Handler of o.
func New(o Options) *Handler {
	h := &Handler{o: o, mux: http.NewServeMux(), decideCalls: make(chan struct{}, MaxDecideCalls)}
	h.routes()
	return h
}

// routes registers the endpoints. A method pattern's other methods are
// answered as they always were: 404 where an endpoint takes one method
// (or GET and HEAD) and says nothing more, 405 with an Allow header where
// it names the method to use, and then only to the clients its access
// rule admits. (A "GET" pattern takes HEAD too: where HEAD is not served,
// it is registered as not found.)
func (h *Handler) routes() {
	m := h.mux
	onlyGet := func(path string, serve http.HandlerFunc, head bool) {
		m.HandleFunc("GET "+path, serve)
		if !head {
			m.Handle("HEAD "+path, http.NotFoundHandler())
		}
		m.Handle(path, http.NotFoundHandler())
	}
	onlyGet("/healthz", h.serveHealth, true)
	onlyGet("/metrics", h.o.Metrics.ServeHTTP, false)
	onlyGet("/ca.pem", h.serveCA, true)
	onlyGet(DirectoryPath, h.serveDirectory, true)
	onlyGet("/robots", h.access(openWithoutAuth, h.serveRobotsEntry), false)
	m.HandleFunc("POST /robots/purge", h.access(loopbackOrUser, h.servePurge))
	m.HandleFunc("/robots/purge", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "robotsgate: POST /robots/purge?origin=URL", http.StatusMethodNotAllowed)
	})
	for _, path := range []string{"/status", "/status.json"} {
		m.HandleFunc("GET "+path, h.statusAccess(h.serveStatus))
		m.HandleFunc(path, h.statusAccess(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "robotsgate: GET only", http.StatusMethodNotAllowed)
		}))
	}
	m.HandleFunc("POST /v1/decide", h.accessAs(loopbackOrUser, h.serveDecide))
	m.HandleFunc("/v1/decide", h.access(loopbackOrUser, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		apiError(w, http.StatusMethodNotAllowed, "POST a JSON body: {\"user_agent\": \"...\", \"purpose\": [...], \"urls\": [...]}")
	}))
}

// ServeHTTP answers a request to the proxy itself: /healthz, /metrics,
// /ca.pem, the key directory and the Signature Agent Card to anyone; the robots.txt cache, the
// status page and the decision API only to the clients allowed admits,
// and never to a page of another site.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := h.identity(); id.Card != nil && r.URL.Path == id.Card.Path() {
		h.serveCard(w, r, id) // public, as the key directory
		return
	}
	if r.URL.Path != "/healthz" && r.URL.Path != "/metrics" && r.URL.Path != "/ca.pem" && r.URL.Path != DirectoryPath && !sameOrigin(r) {
		http.Error(w, "robotsgate: the operator endpoints answer no request sent by a page of another site", http.StatusForbidden)
		return
	}
	// Routed by the path as it is: one the mux would clean ("//healthz",
	// "/status/../healthz") and redirect, or "*", names no endpoint.
	p := r.URL.Path
	if p == "" || p[0] != '/' || cleanPath(p) != p {
		http.NotFound(w, r)
		return
	}
	if r.URL.RawPath != "" {
		// Matched on the decoded path, as ever ("/robots%2Fpurge" is
		// /robots/purge), not segment by segment.
		r2, u := *r, *r.URL
		u.RawPath = ""
		r2.URL = &u
		r = &r2
	}
	h.mux.ServeHTTP(w, r)
}

// cleanPath is p as ServeMux cleans it: no "//", "." or ".." segment, a
// trailing slash kept.
func cleanPath(p string) string {
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// access serves r with serve when access admits its client, and answers
// 403 otherwise.
func (h *Handler) access(access adminAccess, serve http.HandlerFunc) http.HandlerFunc {
	return h.accessAs(access, func(w http.ResponseWriter, r *http.Request, _ string) { serve(w, r) })
}

// accessAs is access for an endpoint that needs to know who asked: serve
// is given the user access admitted (empty for a client admitted without
// one).
func (h *Handler) accessAs(access adminAccess, serve func(w http.ResponseWriter, r *http.Request, user string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		user, ok := h.allowed(r, access)
		if !ok {
			adminForbidden(w)
			return
		}
		serve(w, r, user)
	}
}

// statusAccess serves r with serve when statusAllowed admits it.
func (h *Handler) statusAccess(serve http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.statusAllowed(w, r) {
			serve(w, r)
		}
	}
}

// serveHealth answers GET /healthz: up, and the fleet's Redis when there
// is one.
func (h *Handler) serveHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
	if h.o.Cluster != nil { // a detail: the instance is healthy without Redis
		io.WriteString(w, clusterLine(h.o.Cluster.Status()))
	}
}

// servePurge answers POST /robots/purge?origin=O: the origin's robots.txt
// and usage files are forgotten, here and across the fleet.
func (h *Handler) servePurge(w http.ResponseWriter, r *http.Request) {
	o, err := fetch.ParseOrigin(r.URL.Query().Get("origin"))
	if err != nil {
		http.Error(w, "robotsgate: origin: "+err.Error(), http.StatusBadRequest)
		return
	}
	if h.o.Files != nil { // its usage files too: tdmrep.json, the licences its robots.txt names, fleet-wide
		h.o.Files.Purge(o, h.o.Cache.Licenses(r.Context(), o)...)
	}
	held := h.o.Cache.Purge(o)
	if h.o.Cluster != nil { // the other instances forget it too
		if err := h.o.Cluster.PublishPurge(r.Context(), o); err != nil {
			// Forgotten here, not by the fleet: the operator retries.
			w.Header().Set("Retry-After", "2")
			http.Error(w, fmt.Sprintf("robotsgate: purged %s on this instance, but the fleet was not told (redis: %v): retry", o, err), http.StatusServiceUnavailable)
			return
		}
	}
	if !held {
		http.Error(w, "robotsgate: nothing cached for "+o.String(), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "purged %s\n", o)
}

// serveCA answers /ca.pem, to anyone who can reach the listener: a CA's
// certificate is public, and a client must have it before it can use
// the proxy for HTTPS.
func (h *Handler) serveCA(w http.ResponseWriter, _ *http.Request) {
	if h.o.CA == nil {
		http.Error(w, "robotsgate: tls.mode is \"tunnel\": HTTPS is not decrypted, and there is no CA to trust", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	w.Header().Set("Content-Disposition", `attachment; filename="robotsgate-ca.pem"`)
	w.Header().Set("Cache-Control", "no-cache") // a restart with another CA serves another
	w.Write(h.o.CA)
}

// statusAllowed applies the operator surface's access rule to the status
// page and its JSON, answering a refused request: with [auth] users, 401
// with a Basic challenge, so that a browser asks for the login.
func (h *Handler) statusAllowed(w http.ResponseWriter, r *http.Request) bool {
	if _, ok := h.allowed(r, loopbackOrUser); ok {
		return true
	}
	if _, a := h.o.Snapshot(); a != nil {
		w.Header().Set("WWW-Authenticate", `Basic realm="robotsgate", charset="UTF-8"`)
		http.Error(w, "robotsgate: log in as an [auth] user", http.StatusUnauthorized)
		return false
	}
	adminForbidden(w)
	return false
}

// clusterLine describes the fleet's Redis for /healthz, which anyone who
// reaches the listener may read: up or down, not the error (which names
// Redis's address); /status.json, for operators, has it.
func clusterLine(st cluster.Status) string {
	if st.Up {
		return fmt.Sprintf("cluster: redis up (%d errors since start)\n", st.Errors)
	}
	return fmt.Sprintf("cluster: redis down since %s, going on alone (%d errors since start)\n",
		st.Since.UTC().Format(time.RFC3339), st.Errors)
}

// adminAccess says who may use an endpoint of the proxy itself.
type adminAccess int

const (
	// openWithoutAuth: anyone when [auth] has no users; otherwise loopback
	// clients and authenticated users (GET /robots).
	openWithoutAuth adminAccess = iota
	// loopbackOrUser: loopback clients and authenticated users only, with
	// or without [auth] users (POST /robots/purge and the operator surface).
	loopbackOrUser
)

// allowed reports whether r may use an endpoint of the proxy itself
// whose rule is access, and the [auth] user it authenticated as, if any.
// Loopback clients may, when they name the proxy by its own address
// (localHost); one that sends credentials is checked like any other, so
// that its user's [[agents]] rules apply (and wrong ones are refused).
// Others need the Basic credentials of an [auth] user, in
// Authorization or Proxy-Authorization, checked (and rate-limited) as
// proxy requests are. The client is the connection's peer: behind a
// reverse proxy on the same host, every client looks like loopback.
func (h *Handler) allowed(r *http.Request, access adminAccess) (string, bool) {
	p, a := h.o.Snapshot()
	if a != nil && (r.Header.Get("Authorization") != "" || r.Header.Get("Proxy-Authorization") != "") {
		return a.CheckRequest(r, true)
	}
	if wire.ClientAddr(r).IsLoopback() && localHost(r, p.Config().Listen) {
		return "", true
	}
	if a == nil {
		return "", access == openWithoutAuth
	}
	return "", false
}

// localHost reports whether a request names the proxy by its own address:
// its Host is an IP address or "localhost" (any port), or the host of
// listen.
// Only such a request is let in on the loopback rule: a page that a local
// browser loaded from a rebound DNS name sends that name, and gets no
// further than the credentials rule.
func localHost(r *http.Request, listen string) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	listenHost, _, _ := net.SplitHostPort(listen)
	_, err := netip.ParseAddr(host)
	return err == nil || strings.EqualFold(host, "localhost") || strings.EqualFold(host, listenHost)
}

// sameOrigin reports whether a request to the proxy itself carries no
// Origin of another site: a page posting across sites does.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// adminForbidden is the 403 answer to a client allowed refused.
func adminForbidden(w http.ResponseWriter) {
	http.Error(w, "robotsgate: only for loopback clients and authenticated users", http.StatusForbidden)
}

// RobotsEntry is the JSON of GET /robots?origin=O: an origin's cached
// robots.txt.
type RobotsEntry struct {
	Origin    string        `json:"origin"`
	RobotsURL string        `json:"robots_url"`
	Outcome   string        `json:"outcome"`
	Status    int           `json:"status"`
	FetchedAt *time.Time    `json:"fetched_at"`
	Expires   *time.Time    `json:"expires"`
	Stale     bool          `json:"stale"`
	LastError string        `json:"last_error"`
	RetryAt   *time.Time    `json:"retry_at"`
	Bytes     int           `json:"bytes"`
	Truncated bool          `json:"truncated"`
	Sitemaps  []string      `json:"sitemaps"`
	Groups    []RobotsGroup `json:"groups"`
	// Licenses are the RSL licences its License lines name, each with
	// what is held of it; TDMRep what is held of its tdmrep.json (null
	// when nothing: it is fetched only for requests that declare
	// ai-train or ai-input).
	Licenses []UsageFile `json:"licenses"`
	TDMRep   *UsageFile  `json:"tdmrep"`
}

// UsageFile is what is held of a usage file besides robots.txt.
type UsageFile struct {
	URL       string     `json:"url"`
	Outcome   string     `json:"outcome"` // fetched, unavailable, unreachable; "" when not fetched yet
	Status    int        `json:"status"`
	FetchedAt *time.Time `json:"fetched_at"`
	Stale     bool       `json:"stale"`
	Error     string     `json:"error"` // why it could not be fetched, or read
	Entries   int        `json:"entries"`
}

// usageFile describes d, a usage file's answer: its entries, when what
// it parsed to counts them (Len).
func usageFile(d fetch.Doc[any], held bool, url string) UsageFile {
	f := UsageFile{URL: url}
	if !held {
		return f
	}
	f.Outcome, f.Status, f.Stale, f.Error = string(d.Outcome), d.Status, d.Stale, d.Err
	if !d.FetchedAt.IsZero() {
		at := d.FetchedAt.UTC()
		f.FetchedAt = &at
	}
	if d.ParseErr != nil {
		f.Error = d.ParseErr.Error()
	}
	if v, ok := d.Value.(interface{ Len() int }); ok && d.Good() {
		f.Entries = v.Len()
	}
	return f
}

// RobotsGroup is one group of a RobotsEntry.
type RobotsGroup struct {
	Agents     []string          `json:"agents"`
	Line       int               `json:"line"`
	Rules      int               `json:"rules"`
	CrawlDelay *float64          `json:"crawl_delay"`
	Usage      []audit.Statement `json:"usage"` // its Content-Usage and Content-Signal statements, and those before any group
}

func (h *Handler) serveRobotsEntry(w http.ResponseWriter, r *http.Request) {
	o, err := fetch.ParseOrigin(r.URL.Query().Get("origin"))
	if err != nil {
		http.Error(w, "robotsgate: origin: "+err.Error(), http.StatusBadRequest)
		return
	}
	a, ok := h.o.Cache.Peek(o)
	if !ok {
		http.Error(w, "robotsgate: nothing cached for "+o.String(), http.StatusNotFound)
		return
	}
	e := RobotsEntry{Origin: o.String(), RobotsURL: o.RobotsURL(), Stale: a.Stale, LastError: a.LastError, Groups: []RobotsGroup{}, Sitemaps: []string{},
		Licenses: []UsageFile{}}
	if h.o.Files != nil {
		if d, held := h.o.Files.Peek(source.KindTDMRep, source.TDMRepURL(o)); held {
			f := usageFile(d, held, source.TDMRepURL(o))
			e.TDMRep = &f
		}
	}
	if !a.RetryAt.IsZero() {
		e.RetryAt = &a.RetryAt
	}
	if en := a.Entry; en != nil {
		e.Outcome, e.Status, e.Truncated = string(en.Outcome), en.Status, en.Truncated
		e.FetchedAt, e.Expires = &en.FetchedAt, &en.Expires
		e.Bytes = en.Rules.Size()
		if en.Rules != nil {
			e.Sitemaps = append(e.Sitemaps, en.Rules.Sitemaps()...)
			for _, l := range en.Rules.Licenses() {
				f := UsageFile{URL: l}
				u, ok := o.LicenseURL(l)
				if !ok {
					f.Error = "not an http or https URL: unread, refusing ai-train and ai-input"
				} else if l = u; h.o.Files != nil {
					d, held := h.o.Files.Peek(source.KindRSL, l)
					f = usageFile(d, held, l)
				}
				e.Licenses = append(e.Licenses, f)
			}
			statements := en.Rules.Statements()
			for i, g := range en.Rules.Groups() {
				ge := RobotsGroup{Agents: g.Agents, Line: g.Line, Rules: g.Rules, Usage: []audit.Statement{}}
				for _, st := range statements {
					if st.Group == i || st.Group < 0 {
						ge.Usage = append(ge.Usage, audit.StatementOf(&st))
					}
				}
				if g.CrawlDelay >= 0 {
					cd := g.CrawlDelay
					ge.CrawlDelay = &cd
				}
				e.Groups = append(e.Groups, ge)
			}
		}
	} else {
		e.Outcome, e.Status = string(fetch.Unreachable), a.LastStatus
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(e)
}

// DirectoryPath is where the key directory is served, and where the
// operator publishes it at the signature agent's origin.
const DirectoryPath = "/.well-known/http-message-signatures-directory"

// serveDirectory answers the Web Bot Auth key directory: the signing key
// and the retired ones still listed, signed with the signing key for the
// signature agent's authority, where it is published, whatever Host it
// was asked with (identity.Signer.SignDirectory), for caches to keep no
// longer than that signature is valid (cacheControl). Anyone may read it:
// it holds public keys only, for publishing.
func (h *Handler) serveDirectory(w http.ResponseWriter, r *http.Request) {
	id := h.identity()
	if id.Ring == nil {
		http.Error(w, "robotsgate: no key directory: [identity] signature_agent is not set", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", identity.DirectoryType)
	w.Header().Set("Cache-Control", cacheControl(id.Signer))
	id.Signer.SignDirectory(w.Header())
	w.Write(identity.Directory(id.Ring.Keys()))
}
