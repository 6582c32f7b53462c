package identity

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/proxy/header"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// The fields a signature travels in (RFC 9421 section 4; the draft's
// Signature-Agent).
const (
	FieldSignature      = "Signature"
	FieldSignatureInput = "Signature-Input"
	FieldSignatureAgent = "Signature-Agent"
)

// Tags name what a signature is for (the draft's tag parameter).
const (
	TagWebBotAuth = "web-bot-auth"
	TagDirectory  = "http-message-signatures-directory"
)

// label is the signature's label in the fields, and the Signature-Agent
// member it covers.
const label = "sig1"

// The components a request's signature covers, as the draft has it: the
// target's authority and the Signature-Agent member that names where the
// key directory is published (componentAgentString: the whole field, in
// the legacy string form).
const (
	componentAuthority   = `"@authority"`
	componentAgent       = `"signature-agent";key="` + label + `"`
	componentAgentString = `"signature-agent"`
)

// A Form is how Signature-Agent is sent: its zero value is no choice (the
// signer's own form applies).
type Form uint8

// The forms of Signature-Agent.
const (
	// FormDictionary is draft-ietf-webbotauth-httpsig-protocol-01's:
	// Signature-Agent: sig1="<URL>", the signature covering the member
	// ("signature-agent";key="sig1").
	FormDictionary Form = iota + 1
	// FormString is the legacy single quoted string, Signature-Agent:
	// "<URL>", the signature covering the whole field ("signature-agent"),
	// which the npm web-bot-auth 0.1.3 verifier expects.
	FormString
)

// ParseForm returns the Form named s: "dictionary" or "string".
func ParseForm(s string) (Form, error) {
	switch s {
	case "dictionary":
		return FormDictionary, nil
	case "string":
		return FormString, nil
	}
	return 0, fmt.Errorf("%q: want \"dictionary\" or \"string\"", s)
}

// String returns the form's name, as the config spells it.
func (f Form) String() string {
	switch f {
	case FormDictionary:
		return "dictionary"
	case FormString:
		return "string"
	}
	return ""
}

// A Signer signs requests as one bot: with its key ring's current key,
// naming Agent, the URL its key directory is published at. Signatures are
// valid for Validity from their creation. A signature covers only the
// authority and the agent, so one made for an authority is reused for its
// requests while it has nine tenths of its validity ahead (at most a
// minute): signing a request to a hot origin costs a map lookup. It is safe
// for concurrent use.
type Signer struct {
	key       *Key
	form      Form
	other     *Signer  // the signer of the other form, sharing the key
	agent     []string // Signature-Agent's value, sig1="<agent>" or "<agent>", shared by every request
	agentVal  string   // the covered component's value: "<agent>", an sf-string
	component string   // the covered component's identifier (componentAgent or componentAgentString)
	// directory is the authority of agent's URL, where the key directory
	// is published: the one authority a directory is signed for.
	directory string
	validity  time.Duration
	reuse     time.Duration
	now       func() time.Time

	mu    sync.RWMutex
	cache map[string]*signed // by authority
}

// signed is a signature made for an authority: the fields' values, shared
// by every request that carries them (never written after being made).
type signed struct {
	created int64
	input   []string // Signature-Input
	sig     []string // Signature
}

// maxSigned bounds the authorities whose signatures are kept: past it, all
// are forgotten at once (a broad crawl signs each origin's first request
// anew anyway).
const maxSigned = 16 << 10

// NewSigner returns a Signer for agent (an https URL, printable ASCII)
// with key, sending Signature-Agent in form (0: FormDictionary); now is
// the clock (nil: time.Now). Its Form method returns the signer of the
// other form.
func NewSigner(key *Key, agent string, form Form, validity time.Duration, now func() time.Time) (*Signer, error) {
	if key == nil || key.Private == nil {
		return nil, errors.New("no signing key")
	}
	if validity < time.Second {
		return nil, fmt.Errorf("validity %v: want at least a second", validity)
	}
	val, err := sfString(agent)
	if err != nil {
		return nil, fmt.Errorf("signature agent: %w", err)
	}
	directory, err := AgentAuthority(agent)
	if err != nil {
		return nil, fmt.Errorf("signature agent: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	dict := &Signer{
		key: key, form: FormDictionary, agent: []string{label + "=" + val}, agentVal: val, component: componentAgent,
		directory: directory, validity: validity, reuse: min(validity/10, time.Minute), now: now, cache: map[string]*signed{},
	}
	str := &Signer{
		key: key, form: FormString, agent: []string{val}, agentVal: val, component: componentAgentString,
		directory: directory, validity: validity, reuse: dict.reuse, now: now, cache: map[string]*signed{},
	}
	dict.other, str.other = str, dict
	if form == FormString {
		return str, nil
	}
	return dict, nil
}

// Form returns the signer that sends Signature-Agent in form f, with the
// same key, agent and validity: s itself when f is s's form or 0.
func (s *Signer) Form(f Form) *Signer {
	if f == 0 || f == s.form {
		return s
	}
	return s.other
}

// AgentForm returns the form s sends Signature-Agent in.
func (s *Signer) AgentForm() Form { return s.form }

// Validity returns how long each of s's signatures is valid: its expires
// is its created plus Validity, in whole seconds. A response that carries
// one (the key directory, the card) must not be kept by a cache for
// longer than what is left of it.
func (s *Signer) Validity() time.Duration { return s.validity }

// KeyID returns the signing key's id (its JWK thumbprint).
func (s *Signer) KeyID() string { return s.key.ID }

// Sign puts the signature of a request to authority (host[:port], as the
// request's target names it) in h: Signature-Agent, Signature-Input and
// Signature, replacing whatever h held in them (a client's own signature
// is never forwarded beside robotsgate's). It allocates nothing when a
// signature made for authority can be reused.
func (s *Signer) Sign(h http.Header, authority string) {
	authority = canonicalAuthority(authority)
	now := s.now().Unix()
	s.mu.RLock()
	e := s.cache[authority]
	s.mu.RUnlock()
	if e == nil || time.Duration(now-e.created)*time.Second >= s.reuse || now < e.created {
		e = s.sign(authority, now)
	}
	s.put(h, e)
}

// sign makes and keeps the signature for authority, created at now.
func (s *Signer) sign(authority string, now int64) *signed {
	e := s.make(authority, now, nil)
	s.mu.Lock()
	if len(s.cache) >= maxSigned {
		clear(s.cache)
	}
	s.cache[authority] = e
	s.mu.Unlock()
	return e
}

// SignWith is Sign with a signature made now, never reused, that covers
// the header fields named too (their values as h holds them, combined
// as RFC 9421 section 2.1 has it): for a request whose fields must be
// bound to the signature (a price accepted).
func (s *Signer) SignWith(h http.Header, authority string, fields ...string) {
	authority = canonicalAuthority(authority)
	extra := make([][2]string, len(fields))
	for i, f := range fields {
		vals := h.Values(f)
		for j := range vals {
			vals[j] = strings.TrimSpace(vals[j])
		}
		extra[i] = [2]string{`"` + strings.ToLower(f) + `"`, strings.Join(vals, ", ")}
	}
	e := s.make(authority, s.now().Unix(), extra)
	s.put(h, e)
}

// put puts signature e in h, replacing what h held in the signature
// fields, in every spelling a client may have used (Signature_Input
// too: header.SameName).
func (s *Signer) put(h http.Header, e *signed) {
	header.RemoveSpellings(h, "signature", "signature-input", "signature-agent")
	h[FieldSignatureAgent] = s.agent
	h[FieldSignatureInput] = e.input
	h[FieldSignature] = e.sig
}

// make makes the signature of a request to authority created at now,
// covering extra components (identifier and value) after the draft's.
func (s *Signer) make(authority string, now int64, extra [][2]string) *signed {
	covered := append([][2]string{{componentAuthority, authority}, {s.component, s.agentVal}}, extra...)
	params := s.params(covered, now, TagWebBotAuth)
	base := Base(covered, params)
	return &signed{
		created: now,
		input:   []string{label + "=" + params},
		sig:     []string{label + "=:" + base64.StdEncoding.EncodeToString(ed25519.Sign(s.key.Private, base)) + ":"},
	}
}

// params returns the signature parameters of covered components made at
// now for tag, as Signature-Input carries them after the label: the
// components' identifiers, created, expires (created + validity), keyid,
// alg and tag.
func (s *Signer) params(covered [][2]string, now int64, tag string) string {
	ids := make([]string, len(covered))
	for i, c := range covered {
		ids[i] = c[0]
	}
	return "(" + strings.Join(ids, " ") + ")" +
		";created=" + strconv.FormatInt(now, 10) +
		";expires=" + strconv.FormatInt(now+int64(s.validity/time.Second), 10) +
		`;keyid="` + s.key.ID + `";alg="ed25519";tag="` + tag + `"`
}

// SignDirectory puts in h the signature of the key directory: label sig1
// covering ("@authority";req), tag http-message-signatures-directory, as
// the draft asks of a directory, for the authority of the signature
// agent's URL only, where the directory is published, whatever authority
// it was asked at: a directory signed for any authority a client named
// would let anyone serve this bot's keys, signed, as their own domain's.
// A verifier that fetched it elsewhere finds a signature for another
// authority, which does not verify there.
func (s *Signer) SignDirectory(h http.Header) { s.signResponse(h, s.directory, nil) }

// FieldContentDigest carries the digest of a response's content (RFC 9530).
const FieldContentDigest = "Content-Digest"

// SignCard puts in h the Content-Digest of body, the JSON of card (RFC
// 9530, sha-256), and the signature draft-meunier-webbotauth-registry-04
// recommends for a card that carries its keys inline (section 3.1.3):
// label sig1 covering ("@authority";req "content-digest"), made as the key
// directory's is (tag http-message-signatures-directory, the one tag the
// drafts give a response that publishes keys; the card's own signature is
// a TODO of the draft), for the authority of the card's client_id, where
// it is published, whatever authority it was asked at.
func (s *Signer) SignCard(h http.Header, card *Card, body []byte) {
	sum := sha256.Sum256(body)
	digest := "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
	h.Set(FieldContentDigest, digest)
	s.signResponse(h, card.Authority(), [][2]string{{`"content-digest"`, digest}})
}

// signResponse puts in h the signature of a response that publishes keys:
// label sig1 covering the request's authority, given (";req"), and extra
// components, tag http-message-signatures-directory.
func (s *Signer) signResponse(h http.Header, authority string, extra [][2]string) {
	now := s.now().Unix()
	covered := append([][2]string{{`"@authority";req`, authority}}, extra...)
	params := s.params(covered, now, TagDirectory)
	base := Base(covered, params)
	h.Set(FieldSignatureInput, label+"="+params)
	h.Set(FieldSignature, label+"=:"+base64.StdEncoding.EncodeToString(ed25519.Sign(s.key.Private, base))+":")
}

// DirectoryAuthority returns the authority the key directory is signed
// for: the signature agent URL's (AgentAuthority).
func (s *Signer) DirectoryAuthority() string { return s.directory }

// AgentAuthority returns the authority the key directory published at
// agent, a signature agent URL, is signed for: its origin's, as robotsgate
// writes every origin's (fetch.Origin.Authority: the host lower-cased and
// mapped by IDNA, an IPv4 address in dotted decimal, an IPv6 one in its
// short form, the scheme's default port left out), which is what a
// verifier computes as "@authority" (RFC 9421 section 2.2.3) from the URL
// as browsers parse it. A host written with a trailing dot is an error:
// the URL Standard keeps the dot, robotsgate's origins drop it, and a
// directory signed for either would not verify for a verifier that took
// the other.
func AgentAuthority(agent string) (string, error) {
	o, err := fetch.ParseOrigin(agent)
	if err != nil {
		return "", err
	}
	if host := writtenHost(agent); strings.HasSuffix(host, ".") || strings.HasSuffix(host, "\u3002") ||
		strings.HasSuffix(host, "\uff0e") || strings.HasSuffix(host, "\uff61") {
		return "", fmt.Errorf("host %q ends in a dot: verifiers differ on its authority (with the dot or without); write it without", host)
	}
	return o.Authority(), nil
}

// writtenHost is the host of an absolute URL as written, without its
// port ("" for an IPv6 literal, which has no trailing dot).
func writtenHost(rawURL string) string {
	_, rest, _ := strings.Cut(rawURL, "://")
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	rest = rest[strings.LastIndexByte(rest, '@')+1:]
	if strings.HasPrefix(rest, "[") {
		return ""
	}
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// Base returns the signature base (RFC 9421 section 2.5) of the covered
// components, each its identifier as serialized in the inner list
// (`"@authority"`, `"signature-agent";key="sig1"`) and its value, and the
// signature parameters params (the inner list and its parameters, as
// Signature-Input carries them after the label).
func Base(covered [][2]string, params string) []byte {
	n := len(`"@signature-params": `) + len(params)
	for _, c := range covered {
		n += len(c[0]) + len(c[1]) + 3
	}
	b := make([]byte, 0, n)
	for _, c := range covered {
		b = append(b, c[0]...)
		b = append(b, ": "...)
		b = append(b, c[1]...)
		b = append(b, '\n')
	}
	b = append(b, `"@signature-params": `...)
	return append(b, params...)
}

// canonicalAuthority is an authority as RFC 9421's @authority has it
// (section 2.2.3): the host lower-cased, the port kept as sent (a default
// port is left out by whoever built the target).
func canonicalAuthority(a string) string {
	for i := 0; i < len(a); i++ {
		if c := a[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(a)
		}
	}
	return a
}

// sfString serializes s as a structured field String (RFC 8941 section
// 4.1.6): printable ASCII only, '"' and '\' escaped.
func sfString(s string) (string, error) {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("%q: only printable ASCII can be sent", s)
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), nil
}

// Transport signs every request it sends, redirect hops included (each is
// a request of its own), with the Signer Signer returns, if any (nil: it
// sends them as they are): for the fetches robotsgate makes itself
// (robots.txt, usage files), whose requests it never shares. OnSign, if
// set, counts each signed request. The request given is not changed: a
// copy carries the signature.
type Transport struct {
	Base   http.RoundTripper
	Signer func() *Signer
	OnSign func()
}

// RoundTrip signs a copy of r and sends it with Base.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	s := t.Signer()
	if s == nil {
		return t.Base.RoundTrip(r)
	}
	signed := *r
	signed.Header = r.Header.Clone()
	if signed.Header == nil {
		signed.Header = http.Header{}
	}
	s.Sign(signed.Header, Authority(r))
	if t.OnSign != nil {
		t.OnSign()
	}
	return t.Base.RoundTrip(&signed)
}

// Authority returns the authority of r's target as RFC 9421's @authority
// has it: its Host (or its URL's), the host lower-cased, the scheme's
// default port left out.
func Authority(r *http.Request) string {
	a := r.Host
	if a == "" {
		a = r.URL.Host
	}
	a = canonicalAuthority(a)
	switch {
	case r.URL.Scheme == "https" && strings.HasSuffix(a, ":443"):
		a = a[:len(a)-4]
	case r.URL.Scheme == "http" && strings.HasSuffix(a, ":80"):
		a = a[:len(a)-3]
	}
	return a
}
