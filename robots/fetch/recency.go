package fetch

// recency is a list of T, most recently used first, linked through the
// recencyLinks each T holds (see links): an LRU list that costs an
// element two pointers and no allocation of its own. The zero value with
// links set is an empty list.
type recency[T any] struct {
	newest, oldest *T
	links          func(*T) *recencyLinks[T]
}

// recencyLinks are an element's links in a recency list.
type recencyLinks[T any] struct{ newer, older *T }

// pushNewest puts e, not in the list, at its front.
func (l *recency[T]) pushNewest(e *T) {
	le := l.links(e)
	le.older, le.newer = l.newest, nil
	if l.newest != nil {
		l.links(l.newest).newer = e
	} else {
		l.oldest = e
	}
	l.newest = e
}

// unlink takes e out of the list.
func (l *recency[T]) unlink(e *T) {
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

// touch moves e, in the list, to its front.
func (l *recency[T]) touch(e *T) {
	l.unlink(e)
	l.pushNewest(e)
}

// single reports whether the list holds at most one element: the one a
// trim never removes.
func (l *recency[T]) single() bool { return l.oldest == l.newest }
