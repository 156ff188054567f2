// Package fakeclock is the settable clock of the tests that drive time themselves (juicesim.Config.Now,
// reconcile.Liveness.Now, ...). It imports nothing of the product, so any package's own tests can use it;
// test/world, which imports the simulator, could not serve the simulator's.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a clock that moves only when told; safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock stopped at now.
func New(now time.Time) *Clock { return &Clock{now: now} }

// Now is the clock's time (a func() time.Time where one is asked for).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
