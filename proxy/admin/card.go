package admin

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
)

// Identity is what the proxy publishes of [identity], read from one
// config: the card, the key ring that the card and the key directory
// list, and the signer that signs them.
type Identity struct {
	Card   *identity.Card    // nil: no [identity.card]
	Ring   *identity.KeyRing // nil: [identity] is off
	Signer *identity.Signer  // set with Ring
}

// identity returns the Identity in force; its zero value when there is
// none.
func (h *Handler) identity() Identity {
	if h.o.Identity == nil {
		return Identity{}
	}
	return h.o.Identity()
}

// maxCacheAge is the longest a cache may keep the key directory or the
// card: a rotation shows at most this long after the reload that applied
// it.
const maxCacheAge = 300 * time.Second

// cacheControl is the Cache-Control of a response signed by s (the key
// directory, the card): kept for maxCacheAge at most, and for no more
// than half of its signature's validity (5 s of 10 s), so that no cache
// serves it with its signature expired, even a second or two off the
// clock of the proxy.
func cacheControl(s *identity.Signer) string {
	age := maxCacheAge
	if s != nil {
		age = min(age, s.Validity()/2)
	}
	return "max-age=" + strconv.Itoa(int(age/time.Second))
}

// serveCard answers the Signature Agent Card ([identity.card]) at its
// client_id's path, where draft-meunier-webbotauth-registry-04 has it
// fetched (GET, 200, application/json): its keys the key directory's, as
// the key ring of the same config lists them (the signing key, then the
// retired ones), or named by jwks_uri; with them inline, signed over its
// Content-Digest for the client_id's authority (identity.Signer.SignCard)
// by that ring's signing key. Caches may keep it as they keep the key
// directory (cacheControl). Anyone may read it: it holds what the operator
// publishes.
func (h *Handler) serveCard(w http.ResponseWriter, r *http.Request, id Identity) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "robotsgate: GET the Signature Agent Card", http.StatusMethodNotAllowed)
		return
	}
	if id.Ring == nil { // policy.Compile refuses a card without signature_agent
		http.Error(w, "robotsgate: no Signature Agent Card: [identity] signature_agent is not set", http.StatusNotFound)
		return
	}
	body := id.Card.JSON(id.Ring.Keys())
	w.Header().Set("Content-Type", identity.CardType)
	w.Header().Set("Cache-Control", cacheControl(id.Signer))
	if id.Card.Signed() {
		id.Signer.SignCard(w.Header(), id.Card, body)
	}
	w.Write(body)
}

// CheckConfig checks that the listener can serve [identity.card] at its
// client_id's path: not one of the operator endpoints', which answer there
// (policy.Compile takes it as a check; identity.CheckCard checks the URL
// itself).
func CheckConfig(c *config.Config, pb *config.Problems) {
	u, err := url.Parse(c.Identity.Card.ClientID)
	if c.Identity.Card.ClientID == "" || err != nil || u.Path == "" {
		return
	}
	h := &Handler{o: Options{Metrics: http.NotFoundHandler()}, mux: http.NewServeMux()}
	h.routes()
	if _, pattern := h.mux.Handler(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: u.Path}}); pattern != "" {
		pb.Addf("identity.card.client_id", "%q: the proxy's listener serves %s itself (%s): publish the card at another path", c.Identity.Card.ClientID, u.Path, pattern)
	}
}
