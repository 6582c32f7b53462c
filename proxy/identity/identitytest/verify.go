// Package identitytest verifies Web Bot Auth signatures as a site would,
// for tests: with an implementation of its own, independent of the
// signer's. Structured fields are parsed and serialized by
// github.com/dunglas/httpsfv (RFC 9651), the key directory read and its
// keys' thumbprints computed by github.com/go-jose/go-jose (RFC 7638);
// only the signature base's few lines are written here, from RFC 9421.
package identitytest

import (
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/go-jose/go-jose/v4"
)

// Signature is what Verify found in a verified request.
type Signature struct {
	KeyID string
	Agent string // the Signature-Agent member (or string) the signature covers
	// Form is "dictionary" when the signature covers the Signature-Agent
	// member ("signature-agent";key=<label>), "string" when it covers
	// the whole field, a single quoted string ("signature-agent").
	Form    string
	Created time.Time
	Expires time.Time
	Tag     string
	Covered []string // the covered components' identifiers, as serialized
}

// Verify checks the web-bot-auth signature of r, a request as an origin
// received it: its Signature-Input and Signature with one label, covering
// "@authority" and the Signature-Agent member it names (or, in the legacy
// string form, the whole field, a single sf-string), tag web-bot-auth,
// alg ed25519, valid at now, signed by the key of the directory (a JSON
// Web Key Set) whose JWK SHA-256 thumbprint is its keyid.
func Verify(r *http.Request, directory []byte, now time.Time) (*Signature, error) {
	inputs, err := httpsfv.UnmarshalDictionary(r.Header.Values("Signature-Input"))
	if err != nil {
		return nil, fmt.Errorf("Signature-Input: %w", err)
	}
	sigs, err := httpsfv.UnmarshalDictionary(r.Header.Values("Signature"))
	if err != nil {
		return nil, fmt.Errorf("Signature: %w", err)
	}
	names := inputs.Names()
	if len(names) != 1 {
		return nil, fmt.Errorf("%d signatures: want 1", len(names))
	}
	lbl := names[0]
	m, _ := inputs.Get(lbl)
	il, ok := m.(httpsfv.InnerList)
	if !ok {
		return nil, fmt.Errorf("Signature-Input %s is not an inner list", lbl)
	}
	sm, ok := sigs.Get(lbl)
	if !ok {
		return nil, fmt.Errorf("no Signature %s", lbl)
	}
	sigItem, ok := sm.(httpsfv.Item)
	sigBytes, isBytes := sigItem.Value.([]byte)
	if !ok || !isBytes {
		return nil, fmt.Errorf("Signature %s is not a byte sequence", lbl)
	}

	var s Signature
	param := func(name string) (any, bool) { return il.Params.Get(name) }
	created, ok1 := param("created")
	expires, ok2 := param("expires")
	keyid, ok3 := param("keyid")
	alg, ok4 := param("alg")
	tag, ok5 := param("tag")
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil, errors.New("created, expires, keyid, alg and tag are not all there")
	}
	s.Created, s.Expires = time.Unix(created.(int64), 0), time.Unix(expires.(int64), 0)
	s.KeyID, s.Tag = keyid.(string), tag.(string)
	switch {
	case alg != "ed25519":
		return nil, fmt.Errorf("alg %v", alg)
	case s.Tag != "web-bot-auth":
		return nil, fmt.Errorf("tag %q", s.Tag)
	case now.Before(s.Created.Add(-time.Minute)) || !now.Before(s.Expires):
		return nil, fmt.Errorf("not valid at %v: created %v, expires %v", now, s.Created, s.Expires)
	}

	base, err := signatureBase(r, il, lbl, &s)
	if err != nil {
		return nil, err
	}
	key, err := findKey(directory, s.KeyID)
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(key, []byte(base), sigBytes) {
		return nil, fmt.Errorf("the signature does not verify over:\n%s", base)
	}
	return &s, nil
}

// signatureBase is the signature base of r under the signature lbl whose
// parameters are il, line by line (RFC 9421 section 2.5); it records in s
// the components covered and the signature agent.
func signatureBase(r *http.Request, il httpsfv.InnerList, lbl string, s *Signature) (string, error) {
	var base strings.Builder
	covered := map[string]bool{}
	var ok bool
	for _, it := range il.Items {
		name, _ := it.Value.(string)
		id, err := httpsfv.Marshal(it)
		if err != nil {
			return "", err
		}
		var value string
		switch key, hasKey := it.Params.Get("key"); {
		case name == "@authority":
			value = strings.ToLower(r.Host)
		case hasKey:
			d, err := httpsfv.UnmarshalDictionary(r.Header.Values(name))
			if err != nil {
				return "", fmt.Errorf("%s: %w", name, err)
			}
			member, ok := d.Get(key.(string))
			if !ok {
				return "", fmt.Errorf("%s has no member %v", name, key)
			}
			if value, err = httpsfv.Marshal(member.(httpsfv.Item)); err != nil {
				return "", err
			}
			if name == "signature-agent" {
				s.Agent, _ = member.(httpsfv.Item).Value.(string)
			}
		default:
			vals := r.Header.Values(name)
			if len(vals) == 0 {
				return "", fmt.Errorf("covered field %s absent", name)
			}
			for i := range vals {
				vals[i] = strings.TrimSpace(vals[i])
			}
			value = strings.Join(vals, ", ")
			if name == "signature-agent" {
				it, err := httpsfv.UnmarshalItem(vals)
				if err != nil {
					return "", fmt.Errorf("signature-agent, covered whole: %w", err)
				}
				if s.Agent, ok = it.Value.(string); !ok {
					return "", fmt.Errorf("signature-agent, covered whole, is %q: want a string", value)
				}
			}
		}
		covered[id] = true
		s.Covered = append(s.Covered, id)
		fmt.Fprintf(&base, "%s: %s\n", id, value)
	}
	switch dict, str := covered[`"signature-agent";key="`+lbl+`"`], covered[`"signature-agent"`]; {
	case !covered[`"@authority"`] || dict == str:
		return "", fmt.Errorf("covers %v: want \"@authority\" and either \"signature-agent\";key=%q or \"signature-agent\"", covered, lbl)
	case dict:
		s.Form = "dictionary"
	default:
		s.Form = "string"
	}
	params, err := httpsfv.Marshal(il)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&base, "\"@signature-params\": %s", params)
	return base.String(), nil
}

// findKey returns the key of directory whose thumbprint is keyid.
func findKey(directory []byte, keyid string) (ed25519.PublicKey, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(directory, &set); err != nil {
		return nil, fmt.Errorf("the key directory: %w", err)
	}
	for _, k := range set.Keys {
		tp, err := k.Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, err
		}
		if base64.RawURLEncoding.EncodeToString(tp) == keyid {
			pub, ok := k.Key.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("key %s is a %T", keyid, k.Key)
			}
			return pub, nil
		}
	}
	return nil, fmt.Errorf("no key %s in the directory", keyid)
}

// VerifyDirectory checks the signature of a key directory as a verifier
// that fetched it at authority would: Signature-Input and Signature in
// h (the response's header) with one label, covering ("@authority";req)
// only, tag http-message-signatures-directory, alg ed25519, valid at now,
// signed by the key of directory (the response's body) that keyid names.
func VerifyDirectory(h http.Header, directory []byte, authority string, now time.Time) error {
	return verifyResponse(h, directory, authority, nil, now)
}

// VerifyCard checks a Signature Agent Card served with its keys inline
// (draft-meunier-webbotauth-registry-04, section 3.1.3) as a verifier that
// fetched it at authority would: its Content-Digest (RFC 9530) is the
// sha-256 of card, the response's body, and its signature covers
// ("@authority";req "content-digest"), made as a key directory's (tag
// http-message-signatures-directory, alg ed25519, valid at now) by the
// key of the card's own jwks that keyid names.
func VerifyCard(h http.Header, card []byte, authority string, now time.Time) error {
	var c struct {
		JWKS json.RawMessage `json:"jwks"`
	}
	if err := json.Unmarshal(card, &c); err != nil || len(c.JWKS) == 0 {
		return fmt.Errorf("the card has no jwks (%v)", err)
	}
	digests, err := httpsfv.UnmarshalDictionary(h.Values("Content-Digest"))
	if err != nil {
		return fmt.Errorf("Content-Digest: %w", err)
	}
	m, _ := digests.Get("sha-256")
	item, _ := m.(httpsfv.Item)
	got, _ := item.Value.([]byte)
	if want := sha256.Sum256(card); string(got) != string(want[:]) {
		return fmt.Errorf("Content-Digest %q is not the sha-256 of the card", h.Get("Content-Digest"))
	}
	return verifyResponse(h, c.JWKS, authority, [][2]string{{`"content-digest"`, h.Get("Content-Digest")}}, now)
}

// verifyResponse checks the one signature of a response that publishes
// keys (their JWK Set): covering ("@authority";req) for authority, then
// the extra components (identifier and value), tag
// http-message-signatures-directory, alg ed25519, valid at now, by the
// key of keys that keyid names.
func verifyResponse(h http.Header, keys []byte, authority string, extra [][2]string, now time.Time) error {
	inputs, err := httpsfv.UnmarshalDictionary(h.Values("Signature-Input"))
	if err != nil {
		return fmt.Errorf("Signature-Input: %w", err)
	}
	sigs, err := httpsfv.UnmarshalDictionary(h.Values("Signature"))
	if err != nil {
		return fmt.Errorf("Signature: %w", err)
	}
	if len(inputs.Names()) != 1 {
		return fmt.Errorf("%d signatures: want 1", len(inputs.Names()))
	}
	lbl := inputs.Names()[0]
	m, _ := inputs.Get(lbl)
	il, ok := m.(httpsfv.InnerList)
	sm, _ := sigs.Get(lbl)
	sigItem, isItem := sm.(httpsfv.Item)
	sig, isBytes := sigItem.Value.([]byte)
	if !ok || !isItem || !isBytes {
		return fmt.Errorf("signature %s: not an inner list and a byte sequence", lbl)
	}
	covered := append([][2]string{{`"@authority";req`, strings.ToLower(authority)}}, extra...)
	if len(il.Items) != len(covered) {
		return fmt.Errorf("covers %d components: want %d", len(il.Items), len(covered))
	}
	var base strings.Builder
	for i, c := range covered {
		id, err := httpsfv.Marshal(il.Items[i])
		if err != nil || id != c[0] {
			return fmt.Errorf("covers %s (%v) at %d: want %s", id, err, i, c[0])
		}
		fmt.Fprintf(&base, "%s: %s\n", id, c[1])
	}
	created, _ := il.Params.Get("created")
	expires, _ := il.Params.Get("expires")
	keyid, _ := il.Params.Get("keyid")
	alg, _ := il.Params.Get("alg")
	tag, _ := il.Params.Get("tag")
	c, _ := created.(int64)
	e, _ := expires.(int64)
	switch {
	case alg != "ed25519":
		return fmt.Errorf("alg %v", alg)
	case tag != "http-message-signatures-directory":
		return fmt.Errorf("tag %v", tag)
	case now.Before(time.Unix(c, 0).Add(-time.Minute)) || !now.Before(time.Unix(e, 0)):
		return fmt.Errorf("not valid at %v: created %d, expires %d", now, c, e)
	}
	kid, _ := keyid.(string)
	key, err := findKey(keys, kid)
	if err != nil {
		return err
	}
	params, err := httpsfv.Marshal(il)
	if err != nil {
		return err
	}
	fmt.Fprintf(&base, "\"@signature-params\": %s", params)
	if !ed25519.Verify(key, []byte(base.String()), sig) {
		return fmt.Errorf("the signature does not verify over:\n%s", base.String())
	}
	return nil
}
