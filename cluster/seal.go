package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"sync"
)

// The seal on every value an instance writes to Redis, and on every
// message it publishes (docs/operations.md, "Redis is not trusted"): whoever
// can write to Redis but lacks [cluster] secret cannot make a value an
// instance will use.
//
// A sealed value is
//
//	v1.<MAC>.<JSON>
//
// where MAC is HMAC-SHA256, keyed by the secret, over "v1.", the length
// of the key (or channel) the value is written under as 4 bytes big-endian,
// that key, and the JSON; written in unpadded base64url (43 characters).
// The key in the MAC binds a value to where it was written: a copy moved
// to another origin's key, or a message to another channel, does not
// verify. "v1." tells this format from any later one, and from the bare
// JSON of earlier versions, which is refused.

// MinSecretBytes is the shortest [cluster] secret New accepts: 256 bits,
// the size of the MAC.
const MinSecretBytes = 32

const (
	sealVersion = "v1."
	macChars    = 43 // base64.RawURLEncoding.EncodedLen(sha256.Size)
)

// Why a value is refused before its JSON is read.
var (
	errUnsealed = errors.New(`no "v1." seal: not a value written by this version of robotsgate`)
	errBadSeal  = errors.New("its MAC does not verify: not written with this fleet's secret, or not under this key")
)

// sealer seals and opens values with the fleet's secret. It keeps HMAC
// states in a pool: sealing or opening a value allocates nothing beyond
// the sealed value itself.
type sealer struct {
	pool sync.Pool // of *macState
}

// macState is one HMAC and the scratch its computations use.
type macState struct {
	h   hash.Hash
	buf []byte // the key, for h.Write
	sum []byte
	enc []byte // sum in base64url
}

func newSealer(secret []byte) *sealer {
	key := make([]byte, len(secret))
	copy(key, secret) // the caller's slice may change
	s := &sealer{}
	s.pool.New = func() any { return &macState{h: hmac.New(sha256.New, key)} }
	return s
}

// mac computes the MAC of payload written under where into m.enc.
func (m *macState) mac(where string, payload []byte) {
	m.h.Reset()
	m.buf = append(m.buf[:0], sealVersion...)
	m.buf = binary.BigEndian.AppendUint32(m.buf, uint32(len(where)))
	m.buf = append(m.buf, where...)
	m.h.Write(m.buf)
	m.h.Write(payload)
	m.sum = m.h.Sum(m.sum[:0])
	m.enc = base64.RawURLEncoding.AppendEncode(m.enc[:0], m.sum)
}

// seal returns payload sealed for where, the key or channel it is
// written under.
func (s *sealer) seal(where string, payload []byte) []byte {
	m := s.pool.Get().(*macState)
	defer s.pool.Put(m)
	m.mac(where, payload)
	out := make([]byte, 0, len(sealVersion)+macChars+1+len(payload))
	out = append(out, sealVersion...)
	out = append(out, m.enc...)
	out = append(out, '.')
	return append(out, payload...)
}

// open returns the payload of v, read under where, if v is sealed for
// where with the secret. The payload is a slice of v.
func (s *sealer) open(where string, v []byte) ([]byte, error) {
	if len(v) < len(sealVersion)+macChars+1 || string(v[:len(sealVersion)]) != sealVersion || v[len(sealVersion)+macChars] != '.' {
		return nil, errUnsealed
	}
	got, payload := v[len(sealVersion):len(sealVersion)+macChars], v[len(sealVersion)+macChars+1:]
	m := s.pool.Get().(*macState)
	defer s.pool.Put(m)
	m.mac(where, payload)
	if !hmac.Equal(m.enc, got) {
		return nil, errBadSeal
	}
	return payload, nil
}
