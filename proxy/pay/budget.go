package pay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/internal/statefile"
)

// A Budget holds what was spent each UTC day, in each currency, against a
// daily limit: this process's (Local), or a fleet's (the proxy keeps it in
// a cluster.Counter).
type Budget interface {
	// Reserve adds a to day's spending if that stays within limit (of
	// a's currency), and reports whether it did, with what is spent after
	// (or before, when it did not).
	Reserve(ctx context.Context, day string, a, limit Amount) (spent Amount, ok bool, err error)
	// Refund takes back a reservation that was not charged (or the part
	// of it that was not).
	Refund(ctx context.Context, day string, a Amount) error
	// Spent returns day's spending in currency.
	Spent(ctx context.Context, day, currency string) (Amount, error)
}

// ErrCounterRewound is wrapped by a Budget's errors once the spending it
// keeps was found lower than it had been, or gone, within its day (a
// fleet's counter reset by whoever can write to Redis, or a failover
// that lost its last writes): spending that may have been paid already
// is not paid again, so nothing more is paid that day. Its words are
// cluster.ErrCounterRewound's (proxy's TestRewoundIsPays holds them
// equal).
var ErrCounterRewound = errors.New("the day's spending went backwards")

// Unbounded is a limit no spending reaches: for a charge that must be
// counted whatever the budget says (a site that charged more than the
// price accepted).
func Unbounded(currency string) Amount {
	return Amount{Currency: currency, Nanos: 4 * maxAmount * 1000}
}

// Day is the UTC day of t, as budgets are kept: "2026-11-27".
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Local is a Budget of this process alone, kept in a file (when it has a
// path) so that a restart does not spend the day's budget again. It keeps
// the two newest days it was asked of (a request that began before
// midnight UTC may settle after it). It is safe for concurrent use.
type Local struct {
	path string

	mu    sync.Mutex
	spent map[string]map[string]int64 // billionths, by day, then currency
}

// maxBudgetFile bounds what is read of a Local's file.
const maxBudgetFile = 64 << 10

// keptDays is how many days a Local keeps.
const keptDays = 2

// NewLocal returns the Local budget kept at path ("" keeps it in memory
// only), reading what it holds. A file that does not read as one is an
// error: spending that cannot be known is not started from nothing. So
// is what is not a regular file within maxBudgetFile (statefile.ReadFile:
// a symbolic link, which is not followed, a FIFO, which is not waited
// on, a device or a larger file, which is not read).
func NewLocal(path string) (*Local, error) {
	l := &Local{path: path, spent: map[string]map[string]int64{}}
	if path == "" {
		return l, nil
	}
	// As the other state files are read: a symbolic link is not followed,
	// a FIFO not waited on, nothing read past the bound.
	b, err := statefile.ReadFile(path, maxBudgetFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return l, nil
	case err != nil:
		return nil, fmt.Errorf("read the pay-per-crawl budget: %w: remove it to start the day at nothing", err)
	}
	if err := json.Unmarshal(b, &l.spent); err != nil || l.spent == nil {
		return nil, fmt.Errorf("read the pay-per-crawl budget %s: not a budget file (%v): remove it to start the day at nothing", path, err)
	}
	return l, nil
}

// set records spent in currency on day, in memory and in the file,
// forgetting days older than the keptDays newest. l.mu is held.
func (l *Local) set(day, currency string, spent int64) error {
	next := map[string]map[string]int64{}
	for d, m := range l.spent {
		next[d] = maps.Clone(m)
	}
	if next[day] == nil {
		next[day] = map[string]int64{}
	}
	next[day][currency] = spent
	days := slices.Sorted(maps.Keys(next)) // ISO dates sort as days do
	for _, d := range days[:max(len(days)-keptDays, 0)] {
		delete(next, d)
	}
	if l.path != "" {
		b, _ := json.Marshal(next) // strings and integers: cannot fail
		if err := replaceFile(l.path, b); err != nil {
			return fmt.Errorf("keep the pay-per-crawl budget: %w", err)
		}
	}
	l.spent = next
	return nil
}

// Reserve implements Budget.
func (l *Local) Reserve(_ context.Context, day string, a, limit Amount) (Amount, bool, error) {
	if a.Currency != limit.Currency {
		return Amount{}, false, fmt.Errorf("reserve %s against a limit in %s: %w", a, limit.Currency, ErrCurrency)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	spent := l.spent[day][a.Currency]
	if spent+a.Nanos > limit.Nanos {
		return Amount{Currency: a.Currency, Nanos: spent}, false, nil
	}
	if err := l.set(day, a.Currency, spent+a.Nanos); err != nil {
		return Amount{}, false, err
	}
	return Amount{Currency: a.Currency, Nanos: spent + a.Nanos}, true, nil
}

// Refund implements Budget.
func (l *Local) Refund(_ context.Context, day string, a Amount) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.spent[day]; !ok {
		return nil // a day forgotten: nothing to give back
	}
	return l.set(day, a.Currency, max(l.spent[day][a.Currency]-a.Nanos, 0))
}

// Spent implements Budget.
func (l *Local) Spent(_ context.Context, day, currency string) (Amount, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Amount{Currency: currency, Nanos: l.spent[day][currency]}, nil
}

// replaceFile writes data to path whole, mode 0600: to a new file beside
// it, then renamed over it.
func replaceFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".new-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
