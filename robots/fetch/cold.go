package fetch

import (
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/robotsgate/robotsgate/robots"
)

// The cache keeps origins in two tiers (docs/performance.md, "Two
// tiers"). Every origin's last good copy is held cold: its rules in their
// binary form (robots.Robots.AppendBinary), compressed when that pays,
// off the heap (arena.go), and the few fields of its Entry: about the
// size of the file's text and nothing per rule. A decision for a cold origin reads the copy back (a
// few microseconds: a copy, not a parse) and tests it by scan. The origins
// decided on often are also held hot, in ristretto: the Entry read back,
// offered as it is (no copy) after a cold decision, and made Hot in place
// when the hot tier first answers with it, so that its matchers are built
// as requests need them; bounded by a part of MaxBytes (hotShare) and
// chosen by ristretto's TinyLFU admission, which every lookup feeds.

// coldCopy is an origin's last good copy as the state holds it. It is
// immutable once made, but for ref and offered.
type coldCopy struct {
	// ref is where the rules' binary form is, S2-compressed if packed;
	// zero: no rules. The arena moves copies: it is read and written with
	// the Cache's mu held.
	ref blobRef
	// offered is when the copy read back was last offered to the hot tier,
	// in Unix seconds; 0 if it was never decided on cold, 1 if it was, once,
	// and not offered. Read and written with mu held. An entry is offered
	// from its second cold decision on (an origin decided on once is not
	// one the tier wants), and at most once a second: the tier's admission
	// counts an origin's lookups, not its offers, and an origin it refused,
	// decided on cold again and again, gains nothing by being offered each
	// time.
	offered   uint32
	more      *coldExtra        // what few entries have; nil if none
	sum       [sha256.Size]byte // Entry.Sum
	fetchedAt int64             // Entry.FetchedAt, Unix nanoseconds; 0: zero time
	expires   int64             // Entry.Expires, the same
	size      int32             // the heap this copy holds (what the state counts)
	hotSize   int32             // Entry.Size: the heap of the entry made hot
	status    int16
	flags     coldFlags
}

// coldExtra is the part of an Entry few have.
type coldExtra struct {
	url, note string
}

// coldFlags are an Entry's booleans, and how its rules are kept.
type coldFlags uint8

const (
	coldUnavailable coldFlags = 1 << iota // Outcome Unavailable, else Fetched
	coldDisallowAll
	coldTruncated
	coldRules  // the entry has rules, in the arena
	coldPacked // they are S2-compressed
)

// freeze makes e's cold copy, and the bytes of its rules for the arena.
func freeze(e *Entry) (*coldCopy, []byte, error) {
	g := &coldCopy{fetchedAt: unixNano(e.FetchedAt), expires: unixNano(e.Expires), hotSize: int32(min(e.Size, 1<<31-1)), status: int16(e.Status), sum: e.Sum}
	if e.Outcome == Unavailable {
		g.flags |= coldUnavailable
	}
	if e.DisallowAll {
		g.flags |= coldDisallowAll
	}
	if e.Truncated {
		g.flags |= coldTruncated
	}
	if e.URL != "" || e.Note != "" {
		g.more = &coldExtra{url: e.URL, note: e.Note}
	}
	var bin []byte
	if e.Rules != nil {
		var err error
		if bin, err = e.Rules.AppendBinary(nil); err != nil {
			return nil, nil, fmt.Errorf("%w: keep robots.txt of %s: %w", ErrColdCopy, e.Origin, err)
		}
		// S2 takes a median file's binary form to about half, and reads
		// it back in well under a microsecond.
		if packed := s2.EncodeBetter(nil, bin); len(packed) < len(bin) {
			bin, g.flags = packed, g.flags|coldPacked
		}
		g.flags |= coldRules
	}
	g.size = int32(coldSize(g))
	return g, bin, nil
}

// thaw makes the Entry g keeps for o, its rules, bin, read back cold
// (robots.DecodeBinary): nothing of bin is kept. scratch, if not nil,
// is room to decompress into, grown as needed.
func thaw(o Origin, g *coldCopy, bin []byte, scratch *[]byte) (*Entry, error) {
	// The Entry and its rules are allocated at once: a cold decision
	// allocates little else.
	both := new(struct {
		e     Entry
		rules robots.Robots
	})
	e := &both.e
	*e = Entry{
		Origin:      o,
		Outcome:     Fetched,
		Status:      int(g.status),
		DisallowAll: g.flags&coldDisallowAll != 0,
		Truncated:   g.flags&coldTruncated != 0,
		FetchedAt:   fromUnixNano(g.fetchedAt),
		Expires:     fromUnixNano(g.expires),
		Size:        int(g.hotSize),
		Sum:         g.sum,
	}
	if g.flags&coldUnavailable != 0 {
		e.Outcome = Unavailable
	}
	if g.more != nil {
		e.URL, e.Note = g.more.url, g.more.note
	}
	if g.flags&coldRules == 0 {
		return e, nil
	}
	if g.flags&coldPacked != 0 {
		var dst []byte
		if scratch != nil {
			dst = (*scratch)[:cap(*scratch)]
		}
		var err error
		if bin, err = s2.Decode(dst, bin); err != nil {
			return nil, fmt.Errorf("%w: read robots.txt of %s back: %w", ErrColdCopy, o, err)
		}
		if scratch != nil {
			*scratch = bin
		}
	}
	if err := both.rules.UnmarshalBinary(bin); err != nil {
		return nil, fmt.Errorf("%w: read robots.txt of %s back: %w", ErrColdCopy, o, err)
	}
	e.Rules = &both.rules
	return e, nil
}

// sameCopy reports whether e is the entry g was made from (or made from
// g): the hot tier's copy of the state's.
func (g *coldCopy) sameCopy(e *Entry) bool {
	return unixNano(e.FetchedAt) == g.fetchedAt && unixNano(e.Expires) == g.expires
}

func (g *coldCopy) fetched() time.Time { return fromUnixNano(g.fetchedAt) }

func (g *coldCopy) fresh(now time.Time) bool { return now.Before(fromUnixNano(g.expires)) }

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
