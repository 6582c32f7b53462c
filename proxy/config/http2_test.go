package config

import (
	"errors"
	"strings"
	"testing"
)

// TestTLSHTTP2: [tls] http2 is on by default, false turns it off, and
// anything but a boolean is an error naming its line.
func TestTLSHTTP2(t *testing.T) {
	for _, tc := range []struct {
		file string
		want bool
		err  string
	}{
		{"", true, ""},
		{"[tls]\nmode = \"mitm\"\n", true, ""},
		{"[tls]\nhttp2 = false\n", false, ""},
		{"[tls]\nhttp2 = true\n", true, ""},
		{"[tls]\nhttp2 = \"no\"\n", false, "x.toml:2: tls.http2: want true or false"},
		{"[tls]\nhttp2 = 0\n", false, "x.toml:2: tls.http2: want true or false"},
	} {
		cfg, err := Parse("x.toml", []byte(tc.file))
		if tc.err != "" {
			var e *Error
			if err == nil || !errors.As(err, &e) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) = %v; want an error %q", tc.file, err, tc.err)
			}
			continue
		}
		if err != nil || cfg.TLS.HTTP2 != tc.want {
			t.Errorf("Parse(%q): http2 %v, %v; want %v", tc.file, cfg != nil && cfg.TLS.HTTP2, err, tc.want)
		}
	}
}
