package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/robotsgate/robotsgate/internal/jsonscan"
)

// lineInfo is what verify reads of one audit line.
type lineInfo struct {
	prev Hash
	// ck is the line's checkpoint; nil for a record.
	ck *Checkpoint
	// time is the line's time as written, when it starts {"time":"…;
	// it is b's bytes, valid as long as b is.
	time []byte
}

// The suffix robotsgate writes every record with: prev is its last
// member.
var (
	prevKey       = []byte(`,"prev":"`)
	timePrefix    = []byte(`{"time":"`)
	checkpointMsg = []byte(`"msg":"checkpoint"`)
)

// checkpointFields are a checkpoint line's members, and nothing else.
var checkpointFields = []string{"event", "head", "key", "level", "lines", "msg", "prev", "sig", "time"}

// parseLine reads one audit line (without its "\n"): it must be a JSON
// object with a prev of 64 hex digits; a line whose msg is "checkpoint"
// must have a checkpoint's members, and only those. A record is not
// decoded whole: it is checked to be valid JSON (jsonscan.Valid) and its
// prev read where robotsgate writes it, its last member (anywhere else,
// the line is decoded to find it).
func parseLine(b []byte) (lineInfo, error) {
	var li lineInfo
	switch {
	case len(b) == 0:
		return li, errors.New("an empty line")
	case b[0] != '{':
		return li, errors.New("not a JSON object")
	case b[len(b)-1] != '}' || !jsonscan.Valid(b):
		return li, errors.New("not a whole JSON object (a write cut short, or not a robotsgate audit line)")
	}
	if bytes.HasPrefix(b, timePrefix) {
		if i := bytes.IndexByte(b[len(timePrefix):], '"'); i > 0 && i < 40 && isTime(b[len(timePrefix):len(timePrefix)+i]) {
			li.time = b[len(timePrefix) : len(timePrefix)+i]
		}
	}
	if bytes.Contains(b, checkpointMsg) {
		ck, ok, err := parseCheckpoint(b)
		if err != nil {
			return li, err
		}
		if ok {
			li.ck = ck
			h, err := ParseHash(ck.Prev)
			if err != nil {
				return li, fmt.Errorf("prev: %w", err)
			}
			li.prev = h
			return li, nil
		}
	}
	const tail = 64 + 2 // the hex, its closing quote, the object's }
	if n := len(b) - tail - len(prevKey); n > 0 && bytes.Equal(b[n:n+len(prevKey)], prevKey) && b[len(b)-2] == '"' {
		if _, err := hex.Decode(li.prev[:], b[len(b)-tail:len(b)-2]); err == nil {
			return li, nil
		}
	}
	return li, prevOf(b, &li.prev)
}

// prevOf finds the top-level prev of the JSON object b, in whatever
// place: the slow way, for a line robotsgate did not write as it does.
func prevOf(b []byte, h *Hash) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	raw, ok := m["prev"]
	if !ok {
		return errors.New("no prev: not a robotsgate audit line, or one written before the chain")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("prev is not a string: %s", raw)
	}
	var err error
	if *h, err = ParseHash(s); err != nil {
		return fmt.Errorf("prev: %w", err)
	}
	return nil
}

// parseCheckpoint decodes b as a checkpoint; ok false when its top-level
// msg is not "checkpoint" (the words were a nested member's).
func parseCheckpoint(b []byte) (*Checkpoint, bool, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, false, fmt.Errorf("not a JSON object: %w", err)
	}
	if string(m["msg"]) != `"checkpoint"` {
		return nil, false, nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, checkpointFields) {
		return nil, false, fmt.Errorf("a checkpoint with members %v: want exactly %v", keys, checkpointFields)
	}
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, false, fmt.Errorf("a checkpoint that does not read: %w", err)
	}
	switch c.Event {
	case EventStart, EventInterval, EventRotate, EventShutdown:
	default:
		return nil, false, fmt.Errorf("a checkpoint of unknown event %q", c.Event)
	}
	if c.Lines < 0 {
		return nil, false, fmt.Errorf("a checkpoint counting %d lines", c.Lines)
	}
	return &c, true, nil
}

// isTime reports whether b is an RFC 3339 time, as audit lines write it
// ("2026-03-02T09:14:07.412Z", or with an offset): a line's time that is
// not one is not shown as the log's first or last time. It is checked
// without allocating, as every line's is.
func isTime(b []byte) bool {
	const shape = "dddd-dd-ddTdd:dd:dd"
	if len(b) < len(shape)+1 {
		return false
	}
	for i := range len(shape) {
		if c := b[i]; shape[i] == 'd' && (c < '0' || c > '9') || shape[i] != 'd' && c != shape[i] {
			return false
		}
	}
	num := func(i int) int { return int(b[i]-'0')*10 + int(b[i+1]-'0') }
	if m, d := num(5), num(8); m < 1 || m > 12 || d < 1 || d > 31 || num(11) > 23 || num(14) > 59 || num(17) > 60 {
		return false
	}
	rest := b[len(shape):]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	switch {
	case len(rest) == 1 && rest[0] == 'Z':
		return true
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		for _, i := range []int{1, 2, 4, 5} {
			if rest[i] < '0' || rest[i] > '9' {
				return false
			}
		}
		return true
	}
	return false
}
