package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRespWriterReadFromLength: the flushing copy stops at a declared
// Content-Length, and copies a body whose Content-Length is missing or
// does not parse to its end (unknown length), never cutting it to nothing.
func TestRespWriterReadFromLength(t *testing.T) {
	for _, tc := range []struct {
		name, length, want string
	}{
		{"none", "", "hello"},
		{"declared", "3", "hel"},
		{"unparseable", "5x", "hello"},
		{"negative", "-1", "hello"},
		{"too large", "99999999999999999999", "hello"},
	} {
		rec := httptest.NewRecorder()
		w := &respWriter{ResponseWriter: rec}
		if tc.length != "" {
			w.Header()["Content-Length"] = []string{tc.length}
		}
		w.ReadFrom(strings.NewReader("hello")) // a cut body is an error, and what was written is the point
		if got := rec.Body.String(); got != tc.want {
			t.Errorf("%s: Content-Length %q: wrote %q; want %q", tc.name, tc.length, got, tc.want)
		}
		if rec.Code != http.StatusOK {
			t.Errorf("%s: status %d; want 200", tc.name, rec.Code)
		}
	}
}

// TestDeclaredLength: a Content-Length that does not parse is unknown (-1).
func TestDeclaredLength(t *testing.T) {
	for cl, want := range map[string]int64{"": -1, "0": 0, "42": 42, "4 2": -1, "x": -1, "-3": -1, "99999999999999999999": -1} {
		h := http.Header{}
		if cl != "" {
			h.Set("Content-Length", cl)
		}
		if got := declaredLength(h); got != want {
			t.Errorf("Content-Length %q: %d; want %d", cl, got, want)
		}
	}
}
