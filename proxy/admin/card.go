package admin

import (
	"net/http"
	"net/url"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
)

// card returns the Signature Agent Card in force; nil when there is none.
func (h *Handler) card() *identity.Card {
	if h.o.Snapshot == nil {
		return nil
	}
	if pol, _ := h.o.Snapshot(); pol != nil {
		return pol.Card()
	}
	return nil
}

// serveCard answers the Signature Agent Card ([identity.card]) at its
// client_id's path, where draft-meunier-webbotauth-registry-04 has it
// fetched (GET, 200, application/json): its keys the key directory's, as
// the key ring in force lists them (the signing key, then the retired
// ones), or named by jwks_uri; with them inline, signed over its
// Content-Digest for the client_id's authority (identity.Signer.SignCard).
// Anyone may read it: it holds what the operator publishes.
func (h *Handler) serveCard(w http.ResponseWriter, r *http.Request, card *identity.Card) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "robotsgate: GET the Signature Agent Card", http.StatusMethodNotAllowed)
		return
	}
	var ring *identity.KeyRing
	var signer *identity.Signer
	if h.o.Identity != nil {
		ring, signer = h.o.Identity()
	}
	if ring == nil { // a card needs signature_agent: only between two loads of a reload
		http.Error(w, "robotsgate: no Signature Agent Card: [identity] signature_agent is not set", http.StatusNotFound)
		return
	}
	body := card.JSON(ring.Keys())
	w.Header().Set("Content-Type", identity.CardType)
	w.Header().Set("Cache-Control", "max-age=300")
	if card.Signed() {
		signer.SignCard(w.Header(), card, body)
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
