package config

import "strings"

// suggest returns the key of fs nearest to k by spelling, as Suggest
// does.
func suggest(k string, fs fields) string {
	known := make([]string, 0, len(fs))
	for f := range fs {
		known = append(known, f)
	}
	return Suggest(k, known...)
}

// Suggest returns the word of known nearest to k by spelling, when it is
// near enough to be what was meant: at most a third of k's length apart
// (and at least one edit), counting a swap of two neighbouring letters as
// one edit ("crawl_dealy" is one from "crawl_delay"), letter case aside.
// Of words as near, the first in alphabetical order; "" when none is
// near. Config keys, a key's allowed values and the command's names are
// all suggested with it.
func Suggest(k string, known ...string) string {
	limit := max(1, len(k)/3)
	best, bestDist := "", limit+1
	for _, w := range known {
		dist := editDistance(strings.ToLower(k), strings.ToLower(w))
		if dist < bestDist || dist == bestDist && w < best {
			best, bestDist = w, dist
		}
	}
	if bestDist > limit {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b,
// byte by byte (config keys are ASCII): the edits (insert, delete,
// substitute, or swap two neighbours) that turn one into the other.
func editDistance(a, b string) int {
	// Three rows of the table: two back (for swaps), the last, this one.
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
