// Package queue is the work queue of the controller's actors, in the manner of client-go's rate-limited queue.
package queue

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/juice-slurm/juice-slurm/internal/backoff"
)

// Queue is a work queue of keys (reservation ids) in the manner of client-go's rate-limited queue:
//
//   - a key is queued at most once, however often it is added: a burst of notifications for one
//     reservation becomes one reconcile;
//   - a key being processed is not handed to a second worker; added meanwhile, it is queued again when the
//     first worker is done, so no change is missed;
//   - AddAfter delays a key (requeue after a real interval), and AddRateLimited delays it by a per-key
//     exponential backoff with jitter, which Forget resets once the key reconciles cleanly.
type Queue[K comparable] struct {
	mu         sync.Mutex
	cond       *sync.Cond
	ready      []K
	queued     map[K]bool // in ready
	processing map[K]bool
	dirty      map[K]bool // added while processing
	delayed    delayHeap[K]
	waiting    map[K]time.Time // the one time each delayed key is due: the earliest asked for
	failures   map[K]int
	shutdown   bool
	wake       chan struct{}
	backoff    backoff.Policy
}

// New starts a queue whose failing keys back off by b; ctx ends its timer goroutine.
func New[K comparable](ctx context.Context, b backoff.Policy) *Queue[K] {
	q := &Queue[K]{
		queued: map[K]bool{}, processing: map[K]bool{}, dirty: map[K]bool{}, failures: map[K]int{}, waiting: map[K]time.Time{},
		wake: make(chan struct{}, 1), backoff: b,
	}
	q.cond = sync.NewCond(&q.mu)
	go q.timers(ctx)
	return q
}

// Add queues k now.
func (q *Queue[K]) Add(k K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(k)
}

func (q *Queue[K]) addLocked(k K) {
	if q.shutdown {
		return
	}
	if q.processing[k] {
		q.dirty[k] = true
		return
	}
	if q.queued[k] {
		return
	}
	q.queued[k] = true
	q.ready = append(q.ready, k)
	q.cond.Signal()
}

// AddAfter queues k once d has passed. A key waits once: asked again, it keeps the earlier of the two times, so
// periodic requeues from several paths (a pass, a resync, a notification) never multiply into several timers.
func (q *Queue[K]) AddAfter(k K, d time.Duration) {
	if d <= 0 {
		q.Add(k)
		return
	}
	at := time.Now().Add(d)
	q.mu.Lock()
	if prev, ok := q.waiting[k]; ok && !prev.After(at) {
		q.mu.Unlock()
		return
	}
	q.waiting[k] = at
	heap.Push(&q.delayed, delayed[K]{key: k, at: at})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// AddRateLimited queues k after its backoff: one more failure in a row (see backoff.Policy), so that many keys
// failing together do not retry in lock step.
func (q *Queue[K]) AddRateLimited(k K) {
	q.mu.Lock()
	n := q.failures[k]
	q.failures[k] = n + 1
	q.mu.Unlock()
	q.AddAfter(k, q.backoff.Delay(n))
}

// Failures is how many times in a row k has been rate-limited.
func (q *Queue[K]) Failures(k K) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failures[k]
}

// Forget resets k's backoff.
func (q *Queue[K]) Forget(k K) {
	q.mu.Lock()
	delete(q.failures, k)
	q.mu.Unlock()
}

// Get blocks until a key is ready or the queue shuts down (ok false). The caller must call Done(k).
func (q *Queue[K]) Get() (k K, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if q.shutdown {
		return k, false
	}
	k = q.ready[0]
	q.ready = q.ready[1:]
	delete(q.queued, k)
	q.processing[k] = true
	return k, true
}

// Done ends the processing of k, queueing it again if it was added meanwhile.
func (q *Queue[K]) Done(k K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, k)
	if q.dirty[k] {
		delete(q.dirty, k)
		q.addLocked(k)
	}
}

// Waiting is the number of keys delayed.
func (q *Queue[K]) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// Len is the number of keys ready now.
func (q *Queue[K]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready)
}

// ShutDown wakes every Get with ok false.
func (q *Queue[K]) ShutDown() {
	q.mu.Lock()
	q.shutdown = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// timers moves delayed keys to ready when their time comes.
func (q *Queue[K]) timers(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		q.mu.Lock()
		now := time.Now()
		for q.delayed.Len() > 0 && !q.delayed[0].at.After(now) {
			d := heap.Pop(&q.delayed).(delayed[K])
			// An entry superseded by an earlier time for the same key was already served.
			if at, ok := q.waiting[d.key]; ok && at.Equal(d.at) {
				delete(q.waiting, d.key)
				q.addLocked(d.key)
			}
		}
		wait := time.Hour
		if q.delayed.Len() > 0 {
			wait = q.delayed[0].at.Sub(now)
		}
		q.mu.Unlock()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			q.ShutDown()
			return
		case <-t.C:
		case <-q.wake:
		}
	}
}

type delayed[K comparable] struct {
	key K
	at  time.Time
}

type delayHeap[K comparable] []delayed[K]

func (h delayHeap[K]) Len() int           { return len(h) }
func (h delayHeap[K]) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h delayHeap[K]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap[K]) Push(x any)        { *h = append(*h, x.(delayed[K])) }
func (h *delayHeap[K]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
