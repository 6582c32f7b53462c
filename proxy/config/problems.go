package config

import (
	"errors"
	"fmt"
	"slices"
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
	c    *Config
	list []*Error
}

// Problems returns an empty collection for c's problems.
func (c *Config) Problems() *Problems { return &Problems{c: c} }

// Line returns the line of key (a dotted path, "agents[2].token") in the
// file c was read from, or of the nearest enclosing table that has one;
// 0 when unknown.
func (c *Config) Line(key string) int { return c.lines.line(key) }

// Addf records a problem of key.
func (p *Problems) Addf(key string, format string, args ...any) {
	file := p.c.Source
	if file == "" {
		file = "config"
	}
	p.list = append(p.list, &Error{File: file, Line: p.c.Line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
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
