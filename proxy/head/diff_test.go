package head

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/head/headtest"
	"github.com/robotsgate/robotsgate/usage"
)

// headFragments are the pieces generated pages are made of: what the
// tree builder reads in and around a head (elements the head holds,
// raw text that looks like markup, templates, noscript, text and
// character references, what starts a body) and meta elements that
// refuse a purpose.
var headFragments = [...]string{
	"", "<!DOCTYPE html>", "<!-- <body> -->", " \n", "\r\n", "\t", "<html>", "<html lang=en>", "<head>", "</head>",
	"<body>", "</body>", "</html>", "<p>x</p>", "x", "&#32;", "&#x20;&#9;&#10;", "&nbsp;", "&amp;", "\x00",
	"<title>t</title>", "<title></head><body></title>", "<title/>", "<script>var a = \"<body>\";</script>", "<script/>",
	"<style>/* </head> */</style>", "<noframes><body></noframes>", "<basefont>", "<bgsound src=a>", "<base href=/>",
	"<link rel=stylesheet href=a.css>", "<meta charset=utf-8>", "<br>", "</br>", "</p>", "<frameset>", "<img src=a>",
	"<noscript><meta name=robots content=noai></noscript>", "<noscript><link rel=x></noscript>", "<noscript><p>x</p></noscript>",
	"<noscript><!-- </noscript> --></noscript>", "<noscript>", "</noscript>",
	"<template><meta name=robots content=noai></template>", "<template><template></template><body></template>",
	"<template>", "</template>", "<template><script></template></script></template>",
	"<textarea></head></textarea>", "<svg><title></head></title></svg>", "<custom-el>",
	"<meta name=robots content=noai>", "<meta name=robots content=noindex>", `<meta name="tdm-reservation" content="1">`,
	"<meta name=GPTBot content=noai>", "<META NAME=ROBOTS CONTENT=NOAI>", "<meta name=robots content=noai name=x>",
	"<meta content=noai name=robots/>", "<meta name=robots content=\"noai", "<meta name=robots content=all>",
}

// genPage makes a page of up to 14 fragments.
func genPage(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(15) {
		b.WriteString(headFragments[r.IntN(len(headFragments))])
	}
	return b.String()
}

// headOracle is what x/net/html's html.Parse of the whole page says: the
// meta elements under its head element, with scripting on and off (as
// readHeadOf reads a page with a noscript), for tokens.
func headOracle(t testing.TB, page []byte, tokens []string) usage.Usage {
	t.Helper()
	u, err := parsedHeadUsage(page, true, tokens)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bytes.ToLower(page), []byte("<noscript")) {
		v, err := parsedHeadUsage(page, false, tokens)
		if err != nil {
			t.Fatal(err)
		}
		u.Combine(&v)
	}
	return u
}

// chunked reads r in pieces of random sizes, as a network does.
type chunked struct {
	r   io.Reader
	rnd *rand.Rand
}

func (c *chunked) Read(p []byte) (int, error) {
	return c.r.Read(p[:min(len(p), 1+c.rnd.IntN(64))])
}

// readPageHead is what robotsgate's head reader says of page, sent as
// a text/html body in pieces.
func readPageHead(page []byte, tokens []string, rnd *rand.Rand) usage.Usage {
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/html"}},
		Body: io.NopCloser(&chunked{r: bytes.NewReader(page), rnd: rnd})}
	return NewReader(10*time.Second).Read(resp, tokens)
}

// usageString prints u for a message.
func usageString(u usage.Usage) string {
	var b strings.Builder
	for _, p := range usage.Purposes() {
		fmt.Fprintf(&b, "%s=%v %q; ", p, u[p].State, u[p].Statement)
	}
	return b.String()
}

// TestHeadDifferential: robotsgate's head reader, which reads a page
// only until its head is complete, decides every page as x/net/html's
// parse of the whole page does: the testdata pages, a table of tricky
// ones, and pages generated from a seeded generator (a bounded count).
func TestHeadDifferential(t *testing.T) {
	t.Parallel()
	pages := []string{
		"<head></head><meta name=robots content=noai>",
		"<head></head> <meta name=robots content=noai><body>",
		"</head><meta name=robots content=noai>",
		"<meta name=robots content=noai>",
		"x<meta name=robots content=noai>",
		"<head><noscript><meta name=robots content=noai><p></noscript>",
		"<head><noscript><img><meta name=robots content=noai></noscript>",
		"<head><noscript></noscript><meta name=robots content=noai>",
		"<head><template><body><meta name=robots content=noai></template><meta name=tdm-reservation content=1>",
		"<head></head><template><meta name=robots content=noai></template><meta name=tdm-reservation content=1>",
		"<html><frameset><meta name=robots content=noai>",
		"<head><title>&lt;/title&gt;<meta name=robots content=noai></title>",
		"<head><script><!--<script></script><meta name=robots content=noai>--></script><meta name=tdm-reservation content=1>",
		"<!DOCTYPE html>\n<html>\n<head>\n</head>\n\n<meta name=robots content=noai>\n<body>",
		"<head><meta name=robots content=noindex><meta name=robots content=noai>",
		"<head><template><svg><title></template></title></svg></template><meta name=robots content=noai>",
	}
	for _, page := range headtest.Files(t, "*") {
		pages = append(pages, string(page))
	}
	rnd := rand.New(rand.NewPCG(34, 3))
	const generated = 3000
	for i := range generated {
		page := genPage(rnd)
		if i%100 == 0 {
			// Past the bound: the body's text, or comments that keep the
			// head open, then more of the page.
			pad := [...]string{"<p>text</p>\n", "<!-- comment -->\n", " "}[i/100%3]
			page += strings.Repeat(pad, maxHead/len(pad)+1) + genPage(rnd)
		}
		pages = append(pages, page)
	}
	tokens := []string{"GPTBot"}
	refused := 0
	for i, page := range pages {
		want := headOracle(t, []byte(page), tokens)
		got := readPageHead([]byte(page), tokens, rnd)
		if len(page) > maxHead && strings.HasPrefix(got[usage.AITrain].Statement, "html head: unreadable (the head did not end") {
			continue // a head still open at the bound is not known: refused
		}
		if got != want {
			t.Errorf("page %d %q:\nread head = %s\nhtml.Parse = %s", i, page, usageString(got), usageString(want))
		}
		if _, _, ok := want.Refuses([]usage.Purpose{usage.AITrain, usage.Search}); ok {
			refused++
		}
	}
	// Both answers are common, or the comparison proves little.
	if refused < len(pages)/5 || refused > len(pages)*4/5 {
		t.Errorf("%d of %d pages refused; want between a fifth and four fifths", refused, len(pages))
	}
}
