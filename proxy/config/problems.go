package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// An Error is one problem of a config: where, which key, what.
type Error struct {
	File string
	Line int    // 0 when unknown
	Key  string // dotted key path, e.g. "robots.cache_ttl" or "agents[2].token"
	Msg  string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key == "" {
		return loc + ": " + e.Msg
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Msg)
}

// Problems collects the problems of one config, each as an *Error naming
// its key and the line of the config's file that key is on.
type Problems struct {
	c     *Config
	list  []*Error
	warns []*Error
}

// Problems returns an empty collection for c's problems.
func (c *Config) Problems() *Problems { return &Problems{c: c} }

// Line returns the line of key (a dotted path, "agents[2].token") in the
// file c was read from, or of the nearest enclosing table that has one;
// 0 when unknown.
func (c *Config) Line(key string) int { return c.lines.line(key) }

// Written reports whether key itself ("sites[1].policy") is written in the
// file c was read from, not only a table enclosing it; false for a key
// set in an inline table, whose keys are not indexed.
func (c *Config) Written(key string) bool {
	_, ok := c.lines[key]
	return ok
}

// Addf records a problem of key, unless reading the file already found
// one of key or of a table it is in: a value that could not be read kept
// its default, and a check of that default would only mislead.
func (p *Problems) Addf(key string, format string, args ...any) {
	for _, u := range p.c.unread {
		if key == u || inside(key, u) {
			return
		}
	}
	p.add(key, fmt.Sprintf(format, args...))
}

// AddfIfRead records a problem of key that a check of the keys reads
// found, unless reading the file found a problem with one of them: a
// table's check of several members ("agents[0]: needs token, also,
// purpose or block_style", when its token was an integer and kept its
// default) says nothing the reading's own error does not.
func (p *Problems) AddfIfRead(reads []string, key string, format string, args ...any) {
	for _, u := range p.c.unread {
		for _, r := range reads {
			if u == r || inside(r, u) {
				return
			}
		}
	}
	p.Addf(key, format, args...)
}

// add records a problem of key.
func (p *Problems) add(key, msg string) {
	p.list = append(p.list, p.newError(key, msg))
}

// newError is a problem or warning of key, with its file and line.
func (p *Problems) newError(key, msg string) *Error {
	file := p.c.Source
	if file == "" {
		file = "config"
	}
	return &Error{File: file, Line: p.c.Line(key), Key: key, Msg: msg}
}

// inside reports whether key k lies inside the table key table
// ("agents[0].purpose[1]" inside "agents[0]").
func inside(k, table string) bool {
	return len(k) > len(table) && strings.HasPrefix(k, table) && (k[len(table)] == '.' || k[len(table)] == '[')
}

// Warnf records a warning about key: a value that is valid, and may be
// meant, but likely is not (a rule no request reaches). A warning never
// makes a config invalid; it is said where the config is checked
// (validate) or put to use (the start, a reload).
func (p *Problems) Warnf(key string, format string, args ...any) {
	p.warns = append(p.warns, p.newError(key, fmt.Sprintf(format, args...)))
}

// Warnings returns the warnings recorded, in the order of their lines.
func (p *Problems) Warnings() []*Error {
	w := slices.Clone(p.warns)
	slices.SortStableFunc(w, func(a, b *Error) int { return a.Line - b.Line })
	return w
}

// Err joins the problems found, in the order of their lines; nil if none.
func (p *Problems) Err() error { return Join(toErrors(p.list)...) }

func toErrors(list []*Error) []error {
	errs := make([]error, len(list))
	for i, e := range list {
		errs[i] = e
	}
	return errs
}

// Join joins config errors (*Error, or errors that join them) into one,
// in the order of their lines; nil if there are none.
func Join(errs ...error) error {
	var flat []error
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		default:
			flat = append(flat, err)
		}
	}
	for _, err := range errs {
		walk(err)
	}
	line := func(err error) int {
		var ce *Error
		if errors.As(err, &ce) {
			return ce.Line
		}
		return 0
	}
	slices.SortStableFunc(flat, func(a, b error) int { return line(a) - line(b) })
	return errors.Join(flat...)
}
