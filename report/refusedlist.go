package report

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robotsgate/robotsgate/proxy/policy"
)

// Defaults for the refused-URL list.
const (
	DefaultMaxRefused = 10_000 // refusals listed
	// MaxURLLen is the longest URL the list keeps, in bytes; longer ones
	// are cut (at a character boundary) and end in "…".
	MaxURLLen = 2048
)

// RefusedURL is one entry of the refused-URL list: the records that
// refused one URL (of one origin) with one decision, rule and line. Count is exact, and
// First its earliest record, when CountError is 0; otherwise the entry
// took the place of a less refused one when the list was full (see
// Summary.MaxRefused), the refusal's records number between
// Count-CountError and Count, and First is the earliest since then.
type RefusedURL struct {
	URL        string        `json:"url"`
	Origin     string        `json:"origin"`
	Decision   policy.Action `json:"decision"`
	Class      string        `json:"class"` // a RefusalClass's name
	Rule       string        `json:"rule"`
	Line       int           `json:"line"`
	Reason     string        `json:"reason"` // of its latest record
	Count      int64         `json:"count"`
	CountError int64         `json:"count_error"` // at most this many of Count are not its own
	First      string        `json:"first"`       // RFC 3339 UTC with milliseconds
	Last       string        `json:"last"`
	class      RefusalClass
}

// refusedList is the refused URLs, at most a limit of entries, kept by
// Space-Saving (Metwally, Agrawal and El Abbadi, "Efficient computation
// of frequent and top-k elements in data streams", ICDT 2005). Until the
// list is full each refusal has an entry with its exact count. Once it
// is full, a refusal with none takes the place of the entry with the
// fewest records, whose count it inherits as its error bound before
// counting its own. Each count is then at most its error bound above the
// refusal's records, and every refusal with more records than the
// smallest count (itself at most the records over the limit) holds an
// entry. Entries' buffers are reused when they are replaced: a full list
// allocates nothing per record. The counts live in the heap's slots, apart
// from the entries, so that keeping it ordered reads a few small arrays.
type refusedList struct {
	byHash   map[uint64]*refusedEntry // by the hash of the key: url, origin, decision, rule and line (chained)
	entries  []*refusedEntry          // by id
	heap     []refusedSlot            // the entries' counts; a min-heap by count once heaped
	pos      []int32                  // by id: the entry's slot in heap
	heaped   bool                     // the list was full once
	hash     maphash.Hash             // its seed random, so a log cannot aim at a chain
	replaced int64                    // entries that took another's place
}

// refusedSlot is an entry's count, in the heap.
type refusedSlot struct {
	count int64
	id    int32
}

// refusedEntry is one entry of a refusedList.
type refusedEntry struct {
	url, origin, rule, reason []byte // buffers kept across replacements
	action                    policy.Action
	line                      int
	class                     RefusalClass
	err                       int64 // the count it took over
	first, last               time.Time
	hash                      uint64
	next                      *refusedEntry // of the same hash
	id                        int32
}

// add counts one refused record.
func (l *refusedList) add(p *parsed, class RefusalClass, limit int) {
	url, origin, rule := p.url, p.origin, p.rule
	if len(url) > MaxURLLen {
		url = appendClip(nil, url, MaxURLLen)
	}
	if len(origin) > MaxKeyLen {
		origin = appendClip(nil, origin, MaxKeyLen)
	}
	if len(rule) > MaxKeyLen {
		rule = appendClip(nil, rule, MaxKeyLen)
	}
	h := l.keyHash(url, origin, p.action, rule, p.line)
	for e := l.byHash[h]; e != nil; e = e.next {
		if e.action == p.action && e.line == p.line && bytes.Equal(e.url, url) && bytes.Equal(e.origin, origin) && bytes.Equal(e.rule, rule) {
			e.record(p)
			i := l.pos[e.id]
			l.heap[i].count++
			if l.heaped {
				l.down(int(i))
			}
			return
		}
	}
	var e *refusedEntry
	if len(l.entries) < limit {
		e = &refusedEntry{id: int32(len(l.entries))}
		l.entries = append(l.entries, e)
		l.pos = append(l.pos, int32(len(l.heap)))
		l.heap = append(l.heap, refusedSlot{1, e.id})
		if l.heaped {
			l.up(len(l.heap) - 1)
		} else if len(l.entries) == limit {
			l.heapify()
		}
	} else {
		if !l.heaped {
			l.heapify()
		}
		e = l.entries[l.heap[0].id] // the fewest records: its count is the new one's bound
		l.unlink(e)
		e.err = l.heap[0].count
		l.heap[0].count++
		l.down(0)
		l.replaced++
	}
	e.url, e.origin, e.rule = append(e.url[:0], url...), append(e.origin[:0], origin...), append(e.rule[:0], rule...)
	e.reason = appendClip(e.reason[:0], p.reason, MaxKeyLen)
	e.action, e.line, e.class, e.first, e.last, e.hash = p.action, p.line, class, p.time, p.time, h
	if l.byHash == nil {
		l.byHash = map[uint64]*refusedEntry{}
	}
	e.next, l.byHash[h] = l.byHash[h], e
}

// record takes one more record of e's refusal's times and reason.
func (e *refusedEntry) record(p *parsed) {
	if p.time.Before(e.first) {
		e.first = p.time
	}
	if !p.time.Before(e.last) {
		e.last = p.time
		if !bytes.Equal(e.reason, p.reason) {
			e.reason = appendClip(e.reason[:0], p.reason, MaxKeyLen)
		}
	}
}

// keyHash hashes a refusal's key.
func (l *refusedList) keyHash(url, origin []byte, action policy.Action, rule []byte, line int) uint64 {
	l.hash.Reset()
	var b [8]byte
	for _, f := range [...][]byte{url, origin, rule} { // each after its length: no two keys run together alike
		binary.LittleEndian.PutUint64(b[:], uint64(len(f)))
		l.hash.Write(b[:])
		l.hash.Write(f)
	}
	binary.LittleEndian.PutUint64(b[:], uint64(line)<<8|uint64(action))
	l.hash.Write(b[:])
	return l.hash.Sum64()
}

// unlink takes e out of its hash chain.
func (l *refusedList) unlink(e *refusedEntry) {
	switch head := l.byHash[e.hash]; {
	case head == e && e.next == nil:
		delete(l.byHash, e.hash)
	case head == e:
		l.byHash[e.hash] = e.next
	default:
		for p := head; p.next != nil; p = p.next {
			if p.next == e {
				p.next = e.next
				break
			}
		}
	}
	e.next = nil
}

// heapify orders the slots as a min-heap by count.
func (l *refusedList) heapify() {
	l.heaped = true
	for i := len(l.heap)/2 - 1; i >= 0; i-- {
		l.down(i)
	}
}

// swap swaps two slots of the heap.
func (l *refusedList) swap(i, j int) {
	h := l.heap
	h[i], h[j] = h[j], h[i]
	l.pos[h[i].id], l.pos[h[j].id] = int32(i), int32(j)
}

// down moves the slot at i down the heap while a child has fewer records.
func (l *refusedList) down(i int) {
	h := l.heap
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if r := c + 1; r < len(h) && h[r].count < h[c].count {
			c = r
		}
		if h[c].count >= h[i].count {
			return
		}
		l.swap(i, c)
		i = c
	}
}

// up moves the slot at i up the heap while its parent has more records.
func (l *refusedList) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if l.heap[p].count <= l.heap[i].count {
			return
		}
		l.swap(i, p)
		i = p
	}
}

// complete reports whether the list holds every refusal counted, each
// with its exact count: no entry ever took another's place.
func (l *refusedList) complete() bool { return l.replaced == 0 }

// floor is the fewest records of an entry: every refusal with more
// records holds one. Meaningful when the list is not complete.
func (l *refusedList) floor() int64 {
	if len(l.heap) == 0 || !l.heaped {
		return 0
	}
	return l.heap[0].count
}

// certain is the records the entries surely hold: their counts less
// their error bounds.
func (l *refusedList) certain() int64 {
	var n int64
	for _, sl := range l.heap {
		n += sl.count - l.entries[sl.id].err
	}
	return n
}

// sorted returns the entries, most records first, then by origin, URL,
// decision, rule and line.
func (l *refusedList) sorted() []*RefusedURL {
	out := make([]*RefusedURL, 0, len(l.heap))
	for _, sl := range l.heap {
		e := l.entries[sl.id]
		out = append(out, &RefusedURL{URL: string(e.url), Origin: string(e.origin), Decision: e.action, Class: e.class.String(),
			Rule: string(e.rule), Line: e.line, Reason: string(e.reason), Count: sl.count, CountError: e.err,
			First: stamp(e.first), Last: stamp(e.last), class: e.class})
	}
	slices.SortFunc(out, func(a, b *RefusedURL) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Origin, b.Origin), strings.Compare(a.URL, b.URL),
			cmp.Compare(a.Decision, b.Decision), strings.Compare(a.Rule, b.Rule), cmp.Compare(a.Line, b.Line))
	})
	return out
}

// appendClip appends b to dst, cut as clip cuts a string to n bytes.
func appendClip(dst, b []byte, n int) []byte {
	if len(b) <= n {
		return append(dst, b...)
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(b[i]) {
		i--
	}
	return append(append(dst, b[:i]...), "…"...)
}

// maxRefused is the limit of the refused-URL list.
func (s *Summary) maxRefused() int {
	if s.MaxRefused <= 0 {
		return DefaultMaxRefused
	}
	return s.MaxRefused
}
