// Package evidence keeps what an audit needs months later: the copies of
// sites' files (robots.txt, tdmrep.json, RSL licences) that decided, each
// distinct body once, named by its SHA-256 and compressed, with an index
// of when each URL's copy changed (docs/auditors.md).
//
// A Store keeps them under a directory of its own:
//
//	objects/ab/<hex>.gz   a body, gzip, named by the SHA-256 of the body
//	index.jsonl           a line when a URL's copy changes: {url, sha256, fetched, status[, for]}
//
// An object's mtime is when an audit record last named it (renewed at most
// once an hour); retention and the size bound sweep by it, the copies
// named longest ago going first.
//
// In a fleet, each instance keeps its own store, fed from the bodies it
// reads: fetched itself or taken from the fleet's Redis (the shared
// robots.txt entries carry the body). Each instance's audit log then has
// every copy it names in its own store; nothing read months later depends
// on Redis, whose TTLs drop copies within a day; and Redis's memory does
// not grow with the evidence. The cost is a copy of each body per
// instance: about 3 KB an origin compressed, 6 KB on disk in 4 KiB blocks
// (robots/testdata/corpus, BenchmarkCorpusBytes).
package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Copy names one copy of a site's file that a decision used: where it
// came from, the SHA-256 of its body as read (after the size cap: the
// bytes the rules were parsed from), when it was fetched and the HTTP
// status it was answered with. An answer with no body (a 404: no
// restrictions) has a zero Sum; its Status says what decided.
type Copy struct {
	URL string
	// For is the URL asked for when a redirect made URL differ from it
	// (an origin's /robots.txt answered from https:// or www.): the index
	// finds the copy by either. "" otherwise.
	For     string
	Sum     [sha256.Size]byte
	Fetched time.Time
	Status  int
}

// SumOf returns the SHA-256 of body, as a Copy names it.
func SumOf(body []byte) [sha256.Size]byte { return sha256.Sum256(body) }

// HasBody reports whether c names a body (its Sum is not zero).
func (c *Copy) HasBody() bool { return c.Sum != [sha256.Size]byte{} }

// Hex returns c's Sum in hex, or "" when c names no body.
func (c *Copy) Hex() string {
	if !c.HasBody() {
		return ""
	}
	return hex.EncodeToString(c.Sum[:])
}

// Keeper is told of every body a process reads of a site's file, fetched
// or taken from a store it shares, so that a copy of it can be kept. Keep
// must not block (a store that cannot keep up drops, and counts what it
// drops) and must not keep body past its return without copying it.
type Keeper interface {
	Keep(c Copy, body []byte)
}
