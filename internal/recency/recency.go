// Package recency is an intrusive LRU list: each element holds its own
// links, so that the list costs an element two pointers and no allocation
// of its own. The robots.txt cache orders its origins by it, and the file
// store its files.
package recency

// List is a list of T, most recently used first, linked through the Links
// each T holds. Made by New; not safe for concurrent use.
type List[T any] struct {
	newest, oldest *T
	links          func(*T) *Links[T]
}

// Links are an element's links in a List.
type Links[T any] struct{ newer, older *T }

// New returns an empty List whose elements' links links returns.
func New[T any](links func(*T) *Links[T]) List[T] { return List[T]{links: links} }

// PushNewest puts e, not in the list, at its front.
func (l *List[T]) PushNewest(e *T) {
	le := l.links(e)
	le.older, le.newer = l.newest, nil
	if l.newest != nil {
		l.links(l.newest).newer = e
	} else {
		l.oldest = e
	}
	l.newest = e
}

// Unlink takes e out of the list.
func (l *List[T]) Unlink(e *T) {
	le := l.links(e)
	if le.newer != nil {
		l.links(le.newer).older = le.older
	} else {
		l.newest = le.older
	}
	if le.older != nil {
		l.links(le.older).newer = le.newer
	} else {
		l.oldest = le.newer
	}
	le.newer, le.older = nil, nil
}

// Touch moves e, in the list, to its front.
func (l *List[T]) Touch(e *T) {
	l.Unlink(e)
	l.PushNewest(e)
}

// Single reports whether the list holds at most one element: the one a
// trim never removes.
func (l *List[T]) Single() bool { return l.oldest == l.newest }

// Oldest returns the least recently used element; nil if none.
func (l *List[T]) Oldest() *T { return l.oldest }

// Newest returns the most recently used element; nil if none.
func (l *List[T]) Newest() *T { return l.newest }
