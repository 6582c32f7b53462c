package fetch

import (
	"errors"
	"strings"
	"testing"
)

// TestFilesUnknownKind: a kind Files does not hold is an error that names
// it, not a file not found, which would never refuse.
func TestFilesUnknownKind(t *testing.T) {
	t.Parallel()
	tdm := FileKind{Name: "tdmrep.json", Parse: func(_ string, body []byte) (any, error) { return body, nil }}
	files := NewFiles(FilesOptions{Fetcher: NewFetcher(FetcherOptions{}), Kinds: []FileKind{tdm}})
	d, err := files.Get(t.Context(), "tdmrep", "http://a.example/.well-known/tdmrep.json")
	if !errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), "tdmrep ") || d.Good() {
		t.Errorf("Get of a kind not held = %+v, %v; want an error wrapping ErrUnknownKind naming the kind", d, err)
	}
	if _, ok := files.Peek("tdmrep", "http://a.example/.well-known/tdmrep.json"); ok {
		t.Error("Peek of a kind not held: ok; want nothing held")
	}
}
