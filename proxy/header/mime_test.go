package header

import (
	"net/http"
	"testing"
)

// TestContentType: the Content-Type browsers use (Fetch's "extract a MIME
// type"): the last valid value across field lines and commas.
func TestContentType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		vals             []string
		essence, charset string
	}{
		{nil, "", ""},
		{[]string{"text/html"}, "text/html", ""},
		{[]string{"Text/HTML; Charset=\"UTF-16\""}, "text/html", "UTF-16"},
		{[]string{"text/plain", "text/html"}, "text/html", ""},
		{[]string{"text/html; charset=utf-8", "text/plain"}, "text/plain", ""},
		{[]string{"text/plain, text/html"}, "text/html", ""},
		{[]string{"text/html; charset=shift_jis", "text/html"}, "text/html", "shift_jis"},
		{[]string{"text/html; charset=shift_jis, text/html; charset=utf-16"}, "text/html", "utf-16"},
		{[]string{"text/html", "*/*"}, "text/html", ""},
		{[]string{"text/html", "nonsense"}, "text/html", ""},
		{[]string{"nonsense"}, "", ""},
		{[]string{`text/html; x="a,b"; charset=utf-16le`}, "text/html", "utf-16le"},
		{[]string{"text/html; charset=; charset=utf-16"}, "text/html", "utf-16"},
		{[]string{"text/html; charset=utf-16; charset=utf-8"}, "text/html", "utf-16"},
		{[]string{"text /html"}, "", ""},
	}
	for _, tt := range tests {
		e, cs := ContentType(http.Header{"Content-Type": tt.vals})
		if e != tt.essence || cs != tt.charset {
			t.Errorf("ContentType(%q) = %q, %q; want %q, %q", tt.vals, e, cs, tt.essence, tt.charset)
		}
	}
}
