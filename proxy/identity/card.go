package identity

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/robots"
)

// CardType is the Signature Agent Card's media type: a Client ID Metadata
// Document's, as the draft's example of fetching one serves it.
const CardType = "application/json"

// The ways [identity.card] keys gives the key directory's keys.
const (
	CardKeysInline = "jwks"     // the card's jwks: the directory's JWK Set, the card signed
	CardKeysURI    = "jwks_uri" // the card's jwks_uri: signature_agent, where the directory is
)

// A Card is a Signature Agent Card (draft-meunier-webbotauth-registry-04,
// section 3) as [identity.card] describes it, checked: its members but
// the keys, which JSON adds from the key ring in force. It is published at
// its client_id, which the proxy's own listener serves at ClientID's path.
type Card struct {
	members   CardJSON
	inline    bool   // jwks, not jwks_uri
	path      string // client_id's path, where the listener serves it
	authority string // client_id's authority, the one its signature is for
}

// CardJSON is a Signature Agent Card's JSON: the OAuth client metadata
// members the draft takes from RFC 7591 (as the Client ID Metadata
// Document uses them), and its web_bot_auth object. Exactly one of
// JWKSURI and JWKS is set: the draft forbids both.
type CardJSON struct {
	ClientID   string         `json:"client_id"`
	ClientName string         `json:"client_name,omitempty"`
	ClientURI  string         `json:"client_uri,omitempty"`
	LogoURI    string         `json:"logo_uri,omitempty"`
	Contacts   []string       `json:"contacts,omitempty"`
	JWKSURI    string         `json:"jwks_uri,omitempty"`
	JWKS       *KeySet        `json:"jwks,omitempty"`
	WebBotAuth WebBotAuthJSON `json:"web_bot_auth"`
}

// WebBotAuthJSON is the card's web_bot_auth object: the members the
// draft registers (section 3.2), each left out when not configured but
// rfc9309-compliance, which is always stated.
type WebBotAuthJSON struct {
	ExpectedUserAgent   string   `json:"expected-user-agent,omitempty"`
	RFC9309ProductToken string   `json:"rfc9309-product-token,omitempty"`
	RFC9309Compliance   bool     `json:"rfc9309-compliance"`
	Trigger             string   `json:"trigger,omitempty"`
	Purpose             string   `json:"purpose,omitempty"`
	TargetedContent     string   `json:"targeted-content,omitempty"`
	RateControl         string   `json:"rate-control,omitempty"`
	RateExpectation     string   `json:"rate-expectation,omitempty"`
	KnownURLs           []string `json:"known-urls,omitempty"`
	IPsURI              string   `json:"ips_uri,omitempty"`
}

// A KeySet is a JWK Set (RFC 7517 section 5): the key directory's body.
type KeySet struct {
	Keys []JWK `json:"keys"`
}

// KeySetOf returns the JWK Set of keys, in their order.
func KeySetOf(keys []*Key) *KeySet {
	s := &KeySet{Keys: make([]JWK, len(keys))}
	for i, k := range keys {
		s.Keys[i] = k.JWK()
	}
	return s
}

// Path returns where the proxy's listener serves the card: its
// client_id's path.
func (c *Card) Path() string { return c.path }

// ClientID returns the URL the card is published at.
func (c *Card) ClientID() string { return c.members.ClientID }

// Authority returns the authority of the card's client_id, the one its
// signature is made for (as the key directory's is for signature_agent's).
func (c *Card) Authority() string { return c.authority }

// Signed reports whether the card is served signed: with its keys inline
// (jwks), as the draft recommends, covering its Content-Digest.
func (c *Card) Signed() bool { return c.inline }

// ProductToken returns the robots.txt product token the card names.
func (c *Card) ProductToken() string { return c.members.WebBotAuth.RFC9309ProductToken }

// JSON returns the card listing keys, the key ring's (signing key first,
// then the retired ones, as the key directory lists them) inline, or
// naming the directory by jwks_uri: indented, for the people who read it.
func (c *Card) JSON(keys []*Key) []byte {
	m := c.members
	if c.inline {
		m.JWKS = KeySetOf(keys)
	}
	b, _ := json.MarshalIndent(m, "", "  ") // strings, a bool and arrays of them: cannot fail
	return append(b, '\n')
}

// CheckCard checks c's [identity.card] into pb and returns its Card
// (usable only when pb holds no problem); nil when it is off (no
// client_id). obeys returns the tokens
// robotsgate obeys for a request whose User-Agent is the given one and
// that names nothing else (policy's step 3, as check -user-agent runs
// it): the product token the card names defaults to the first of them
// for its expected-user-agent, and one configured must be among them, so
// that the card names the robots.txt group robotsgate follows for the
// bot's requests. rfc9309-compliance defaults to mode = "enforce" and
// cannot be true in report mode, which forwards what robots.txt refuses.
func CheckCard(c *config.Config, pb *config.Problems, obeys func(userAgent string) []string) *Card {
	cc := &c.Identity.Card
	const key = "identity.card"
	if cc.ClientID == "" {
		if !cardEmpty(cc) {
			pb.Addf(key+".client_id", "required with any other [identity.card] key: the https URL the card is published at")
		}
		return nil
	}
	card := &Card{members: CardJSON{
		ClientID: cc.ClientID, ClientName: cc.ClientName, ClientURI: cc.ClientURI, LogoURI: cc.LogoURI, Contacts: cc.Contacts,
	}}
	if c.Identity.SignatureAgent == "" {
		pb.Addf(key+".client_id", "set without identity.signature_agent: the card gives the keys of the identity that signs")
	}
	card.path, card.authority = checkClientID(pb, key+".client_id", cc.ClientID)
	checkWebURL(pb, key+".client_uri", cc.ClientURI, false)
	checkWebURL(pb, key+".logo_uri", cc.LogoURI, false)
	for i, s := range cc.Contacts {
		if u, err := url.Parse(s); err != nil || u.Scheme == "" || !printable(s) {
			pb.Addf(fmt.Sprintf("%s.contacts[%d]", key, i), "%q is not a URI with a scheme (\"mailto:bots@example.com\", \"https://example.com/contact\")", s)
		}
	}
	switch cc.Keys {
	case CardKeysInline:
		card.inline = true
	case CardKeysURI:
		card.members.JWKSURI = c.Identity.SignatureAgent
	default:
		pb.Addf(key+".keys", "%q: want %q (the key directory's keys in the card, signed) or %q (the card names signature_agent)", cc.Keys, CardKeysInline, CardKeysURI)
	}
	card.members.WebBotAuth = checkWebBotAuth(c, pb, obeys)
	return card
}

// cardEmpty reports whether cc sets nothing but its default keys.
func cardEmpty(cc *config.CardConfig) bool {
	w := &cc.WebBotAuth
	return cc.ClientName == "" && cc.ClientURI == "" && cc.LogoURI == "" && len(cc.Contacts) == 0 && cc.Keys == CardKeysInline &&
		w.ExpectedUserAgent == "" && w.RFC9309ProductToken == "" && w.RFC9309Compliance == nil && w.Trigger == "" && w.Purpose == "" &&
		w.TargetedContent == "" && w.RateControl == "" && w.RateExpectation == "" && len(w.KnownURLs) == 0 && w.IPsURI == ""
}

// checkWebBotAuth checks [identity.card.web_bot_auth] and returns the
// card's web_bot_auth object.
func checkWebBotAuth(c *config.Config, pb *config.Problems, obeys func(string) []string) WebBotAuthJSON {
	w := &c.Identity.Card.WebBotAuth
	const key = "identity.card.web_bot_auth"
	out := WebBotAuthJSON{
		ExpectedUserAgent: w.ExpectedUserAgent, Trigger: w.Trigger, Purpose: w.Purpose, TargetedContent: w.TargetedContent,
		RateControl: w.RateControl, RateExpectation: w.RateExpectation, KnownURLs: w.KnownURLs, IPsURI: w.IPsURI,
		RFC9309Compliance: c.Mode == "enforce",
	}
	if w.ExpectedUserAgent != "" && !printable(w.ExpectedUserAgent) {
		pb.Addf(key+".expected-user-agent", "%q: a User-Agent is printable ASCII, spaces between its words", w.ExpectedUserAgent)
	}
	out.RFC9309ProductToken = productToken(pb, key, w, obeys(w.ExpectedUserAgent))
	if w.RFC9309Compliance != nil {
		out.RFC9309Compliance = *w.RFC9309Compliance
		if *w.RFC9309Compliance && c.Mode == "report" {
			pb.Addf(key+".rfc9309-compliance", "true in report mode, which forwards what robots.txt refuses: set mode = \"enforce\", or leave it out (false in report mode)")
		}
	}
	switch w.Trigger {
	case "", "fetcher", "crawler":
	default:
		pb.Addf(key+".trigger", "%q: want \"fetcher\" (requests a user starts) or \"crawler\" (autonomous)", w.Trigger)
	}
	for _, f := range []struct{ name, v string }{{"purpose", w.Purpose}, {"targeted-content", w.TargetedContent},
		{"rate-control", w.RateControl}, {"rate-expectation", w.RateExpectation}} {
		if !utf8.ValidString(f.v) || strings.ContainsFunc(f.v, unicode.IsControl) {
			pb.Addf(key+"."+f.name, "%q: want text without control characters", f.v)
		}
	}
	for i, s := range w.KnownURLs {
		if s == "" || !printable(s) || strings.Contains(s, " ") {
			pb.Addf(fmt.Sprintf("%s.known-urls[%d]", key, i), "%q: want a URL, a path (\"/ads.txt\") or a pattern with * (\"*.png\"), without spaces", s)
		}
	}
	checkWebURL(pb, key+".ips_uri", w.IPsURI, true)
	return out
}

// productToken returns the card's rfc9309-product-token: w's, which must
// be one robotsgate obeys for the bot's requests (obeyed), or else the
// first token obeyed; a problem when none is a product token.
func productToken(pb *config.Problems, key string, w *config.WebBotAuthConfig, obeyed []string) string {
	key += ".rfc9309-product-token"
	whose := "requests with no User-Agent (set expected-user-agent to the bot's)"
	if w.ExpectedUserAgent != "" {
		whose = fmt.Sprintf("requests with User-Agent %q (expected-user-agent)", w.ExpectedUserAgent)
	}
	if w.RFC9309ProductToken == "" {
		if len(obeyed) == 0 || obeyed[0] == "*" {
			pb.Addf(key, "robotsgate obeys no product token for %s, only \"*\": set default_agent, an [[agents]] token, or an expected-user-agent that names the bot's token", whose)
			return ""
		}
		return obeyed[0]
	}
	if !robots.ValidToken(w.RFC9309ProductToken) {
		pb.Addf(key, "%q is not a product token (letters, \"_\" and \"-\")", w.RFC9309ProductToken)
		return ""
	}
	for _, t := range obeyed {
		if strings.EqualFold(t, w.RFC9309ProductToken) {
			return w.RFC9309ProductToken
		}
	}
	pb.Addf(key, "%q is not a token robotsgate obeys for %s: it obeys %q (the card would name rules it does not follow); leave it out, or make [[agents]], default_agent or expected-user-agent name it",
		w.RFC9309ProductToken, whose, strings.Join(obeyed, ", "))
	return ""
}

// checkClientID checks the card's client_id and returns its path and
// authority: an https URL as the Client ID Metadata Document has it (a
// path, no fragment, no user information), with no query (the listener
// serves the card at the path alone) and a path as written that a
// request names as it is (no "." or ".." segment, no "//").
func checkClientID(pb *config.Problems, key, s string) (string, string) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" || strings.Contains(s, "#") || u.RawQuery != "" || u.ForceQuery || !printable(s) {
		pb.Addf(key, "%q is not an https URL without a query, fragment or user information (where the card is published: \"https://bot.example.com/bot\")", s)
		return "", ""
	}
	p := u.Path
	if p == "" {
		p = "/"
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	if clean != p {
		pb.Addf(key, "%q: its path has \".\", \"..\" or empty segments: write it as requests name it", s)
		return "", ""
	}
	authority, err := AgentAuthority(s)
	if err != nil {
		pb.Addf(key, "%q: %v", s, err)
		return "", ""
	}
	return p, authority
}

// checkWebURL checks that s, if set, is an absolute https URL (or http
// too, unless httpsOnly).
func checkWebURL(pb *config.Problems, key, s string, httpsOnly bool) {
	if s == "" {
		return
	}
	u, err := url.Parse(s)
	ok := err == nil && u.Host != "" && (u.Scheme == "https" || u.Scheme == "http" && !httpsOnly) && printable(s)
	switch {
	case !ok && httpsOnly:
		pb.Addf(key, "%q is not an https URL (the draft requires https)", s)
	case !ok:
		pb.Addf(key, "%q is not an http or https URL", s)
	}
}

// printable reports whether s is printable ASCII, spaces included.
func printable(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e })
}
