package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestSampleConfigIsDefault proves that config.toml, uncommented, equals
// the built-in defaults.
func TestSampleConfigIsDefault(t *testing.T) {
	t.Parallel()
	cfg, err := Load(filepath.Join("..", "..", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Source, cfg.lines = "", nil
	if want := Default(); !reflect.DeepEqual(cfg, want) {
		t.Errorf("config.toml = %+v\nwant the defaults %+v", cfg, want)
	}
}

// TestLocalConfig proves that local.toml, the config for trying robotsgate
// on one's own machine, is the defaults but for what its comment says.
func TestLocalConfig(t *testing.T) {
	t.Parallel()
	cfg, err := Load(filepath.Join("..", "..", "local.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Source, cfg.lines = "", nil
	want := Default()
	want.TLS.StateDir = ".robotsgate"
	want.Upstream.BlockPrivate = false
	want.Audit.File, want.Audit.LogAllowed = ".robotsgate/audit.log", true
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("local.toml = %+v\nwant %+v", cfg, want)
	}
}

func TestConfigSyntaxError(t *testing.T) {
	t.Parallel()
	_, err := Parse("x.toml", []byte("listen = \"a:1\"\nmode = \n"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Line != 2 {
		t.Errorf("Parse(syntax error) = %v; want a *Error on line 2", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	names, err := filepath.Glob("testdata/messages/*.toml")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range append(names, "../../config.toml", "testdata/bad.toml") {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("[[agents]]\nuser_agent = \"*\"\ntoken = \"X\"\n[[sites]]\nhost = \"*.a.b\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.toml", data)
		if cfg == nil && err == nil {
			t.Fatal("Parse = nil, nil")
		}
		// Every problem is an *Error that names where it is.
		var walk func(error)
		walk = func(err error) {
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					walk(e)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "fuzz.toml" {
				t.Fatalf("Parse: %v (%T); want *Error of fuzz.toml", err, err)
			}
			// What Parse finds is in the file: its line is known.
			if ce.Line < 1 || ce.Line > bytes.Count(data, []byte("\n"))+1 {
				t.Fatalf("Parse(%q): %v: want the line it is on", data, err)
			}
		}
		if err != nil {
			walk(err)
		}
	})
}
