package config

import (
	"reflect"
	"strings"
	"unicode"
)

// Changed returns the keys whose values differ between a and b, as
// written in the file ("politeness.crawl_delay", "tls.ca_cert"); a list of
// tables ([[agents]], [[sites]], [[auth.users]]) is one key. Values are
// not returned: some are secrets.
func Changed(a, b *Config) []string {
	var keys []string
	changed(reflect.ValueOf(*a), reflect.ValueOf(*b), "", &keys)
	return keys
}

func changed(a, b reflect.Value, prefix string, keys *[]string) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Name == "Source" {
			continue
		}
		key := prefix + snake(f.Name)
		if k := f.Tag.Get("key"); k != "" { // a key snake cannot spell: "rfc9309-product-token"
			key = prefix + k
		}
		fa, fb := a.Field(i), b.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == t.PkgPath() {
			changed(fa, fb, key+".", keys)
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			*keys = append(*keys, key)
		}
	}
}

// snake turns a Go field name into its key: CrawlDelay is crawl_delay,
// CACert ca_cert, TLS tls.
func snake(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
