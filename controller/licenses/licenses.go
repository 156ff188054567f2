// Package licenses keeps each Juice pool's Slurm license true to the pool. Every pool is a remote license served
// by slurmdbd, juice_<pool>@juice, and job_submit.lua gives each Juice job the license of its pool for the GPUs it
// asks (For; a VRAM slice takes 1): so Slurm keeps a job the pool cannot serve PENDING with Reason=Licenses,
// instead of giving it nodes that sit in the prolog waiting for a session and then fail.
//
// The Syncer, run by the leader only, sets each license's count to what the pool can give this cluster: the GPUs
// of its active agents less the GPUs held by sessions that serve none of this cluster's runs (other clusters',
// other Juice clients', and our own orphans, which the sweep cancels). The sessions of this cluster's runs are
// not taken off, a pending job's reservation included: Slurm counts a running job's licenses itself, and a
// pending job's own reservation must never keep that job from starting (two pending jobs each holding a
// reservation for half the pool must both start).
//
// Counts are written with sacctmgr (slurmdbd pushes them to slurmctld within seconds, without a reconfigure),
// only when they change. A license missing is added; the license of a pool no longer served goes to 0 and is
// never deleted (26.05 holds the pending jobs whose license vanished). A failure (sacctmgr missing, slurmdbd down)
// is logged, counted and retried with backoff; it never touches a reservation.
package licenses

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/controller/sweep"
	"github.com/juice-slurm/juice-slurm/internal/backoff"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// Server is the license server of every Juice license: jobs ask juice_<pool>@juice.
const Server = "juice"

// namePrefix starts the name of every Juice license.
const namePrefix = "juice_"

// Name is pool's license as slurmdbd names it (sacctmgr's name=); Slurm shows it as Name(pool)@Server.
func Name(pool string) string { return namePrefix + pool }

// For is the license a request takes, as job_submit.lua adds it to the job (test/vectors/licenses.tsv):
// juice_<pool>@juice:<GPUs>. A VRAM slice is asked with 1 GPU, so it takes 1, a whole GPU's worth: a count
// cannot share a GPU between slices.
func For(req request.Request) string {
	return fmt.Sprintf("%s@%s:%d", Name(req.Pool), Server, req.GPUs)
}

// Sacctmgr runs sacctmgr with args and returns what it printed; a failure names the command and what sacctmgr
// said (Exec).
type Sacctmgr interface {
	Run(ctx context.Context, args ...string) (string, error)
}

// Store is what the Syncer reads of this cluster's reservations (store.Store): whose each session is
// (sweep.Belongs), with the ready runs listed once per sync.
type Store interface {
	sweep.Reservations
	Ready(ctx context.Context) ([]reconcile.ReadyRun, error)
}

// Metrics counts what the Syncer does (controller.Metrics).
type Metrics interface {
	// SetLicense reports a pool's license count, as slurmdbd has it.
	SetLicense(pool string, count int)
	// ObserveLicenseUpdate counts one write (or the read at start): result "ok" or "error".
	ObserveLicenseUpdate(result string)
}

// Syncer keeps the licenses of the pools this cluster serves. Made for one term of leading: at its first Sync it
// reads what slurmdbd holds, then writes only what changes.
type Syncer struct {
	Cluster string
	// Pools are the pools jobs may name (the site policy's pools). With none, the Juice licenses slurmdbd holds
	// for this cluster are kept (an administrator adds one with sacctmgr). A license whose pool is not among
	// Pools goes to 0.
	Pools    []string
	Juice    juiceapi.Client
	Store    Store
	Sacctmgr Sacctmgr
	// Caps are the policy's per-user caps, kept on QOS as limits on the licenses (caps.go); none without QOS.
	Caps    Caps
	Log     logr.Logger
	Metrics Metrics // nil: none
	// Health hears the outcome of every Sync (nil when it worked).
	Health func(error)
	// Period is the time between two syncs. Default 30s (the ready check).
	Period time.Duration
	// Retry paces the syncs after a failure. Default 5s doubling to Period.
	Retry backoff.Policy

	mu     sync.Mutex
	loaded bool
	// counts are the licenses slurmdbd has, as read or last written, by their pool's name in lower case:
	// slurmdbd may store names in lower case, and MariaDB compares them without case.
	counts map[string]license
	// foreign are the keys the store did not know at the last sync: a session is asked for under a reservation's
	// id after the reservation exists, so a key not found stays so.
	foreign map[uuid.UUID]bool
}

// license is a pool's license as slurmdbd has it.
type license struct {
	pool  string
	count int
}

// Run syncs now, then every Period (sooner, with backoff, after a failure) until ctx ends.
func (s *Syncer) Run(ctx context.Context) {
	if len(s.Pools) == 0 {
		s.Log.Info("license sync started; the policy names no pools, so only the Juice licenses slurmdbd holds for the cluster are kept",
			"period", s.period().String())
	} else {
		s.Log.Info("license sync started", "pools", s.Pools, "period", s.period().String())
	}
	failures := 0
	for {
		err := s.Sync(ctx)
		if ctx.Err() != nil {
			return
		}
		if s.Health != nil {
			s.Health(err)
		}
		wait := s.period()
		switch {
		case err != nil:
			if failures == 0 || failures%10 == 9 {
				s.Log.Error(err, "license sync failed; retrying with backoff (reservations are not affected)",
					"failuresInARow", failures+1)
			}
			if d := s.retry().Delay(failures); d < wait {
				wait = d
			}
			failures++
		case failures > 0:
			s.Log.Info("license sync works again", "after", failures)
			failures = 0
		}
		if backoff.SleepFor(ctx, wait) != nil {
			return
		}
	}
}

// Sync brings every served pool's license to what the pool can give now: one walk of each pool, and a sacctmgr
// call for each count that changed. A pool whose walk fails keeps its count (and is an error); a pool the Juice
// Controller cannot name is given 0.
func (s *Syncer) Sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded {
		counts, err := s.read(ctx)
		if err != nil {
			s.observe("error")
			return err
		}
		s.counts, s.loaded = counts, true
		for _, l := range counts {
			s.setMetric(l.pool, l.count)
		}
	}
	served := map[string]bool{}
	for _, p := range s.Pools {
		served[strings.ToLower(p)] = true
	}
	pools := slices.Clone(s.Pools)
	for key, l := range s.counts {
		if !served[key] {
			pools = append(pools, l.pool)
		}
	}
	sort.Strings(pools)
	look := &lookup{st: s.Store, known: s.foreign, foreign: map[uuid.UUID]bool{}}
	defer func() { s.foreign = look.foreign }()
	var errs []error
	for _, pool := range pools {
		want := 0
		if len(s.Pools) == 0 || served[strings.ToLower(pool)] {
			n, err := s.capacity(ctx, look, pool)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			want = n
		}
		if err := s.write(ctx, pool, want); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.syncCaps(ctx, pools); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// capacity is what pool can give this cluster now: the GPUs of its active agents less the distinct GPUs held by
// sessions that serve none of our runs (sweep.Belongs). 0 when the Juice Controller cannot name the pool.
func (s *Syncer) capacity(ctx context.Context, look *lookup, pool string) (int, error) {
	view, err := juiceapi.WalkPool(ctx, s.Juice, pool, time.Now())
	// A pool the Juice Controller does not know: juice-sim (as the hosted controller) answers the listing "pool P
	// not found" (ErrNotFound; WalkPool leaves out an agent that vanished, so it is the pool's), and the client
	// refuses a name the legacy controller's pool map lacks (ErrNoCapacity). Either way the pool has no GPUs: a
	// pool removed at the Juice side goes to 0, and a sync is not failed for ever by one pool.
	if errors.Is(err, juiceapi.ErrNoCapacity) || errors.Is(err, juiceapi.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("license of pool %s: %w", pool, err)
	}
	total := 0
	for i := range view.Agents {
		a := &view.Agents[i]
		if a.State != juiceapi.AgentActive {
			continue
		}
		gpus := view.AgentGPUs[i]
		held := map[int]bool{}
		for j := range a.Sessions {
			sess := &a.Sessions[j]
			if sess.Ended() || len(sess.GPUs) == 0 {
				continue
			}
			whose, _, err := sweep.Belongs(ctx, look, sess.Key(), sess.ID)
			if err != nil {
				return 0, fmt.Errorf("license of pool %s: %w", pool, err)
			}
			if whose == sweep.Live {
				continue
			}
			for _, g := range sess.GPUs {
				held[g.Index] = true
			}
		}
		total += max(gpus-len(held), 0)
	}
	return total, nil
}

// lookup answers sweep.Belongs for one sync without a query per session: at 100,000 ready runs a read of each
// session's reservation every period would be 100,000 queries. A ready run's reservation comes from one listing
// of the ready runs (the liveness watch's), a key the store did not know at the last sync from memory, and any
// other from the store.
type lookup struct {
	st      Store
	ready   map[uuid.UUID]string // reservation -> its session, listed at the first Get
	holders map[string]uuid.UUID // session -> the ready reservation that holds it, from the same listing
	known   map[uuid.UUID]bool   // the keys not found at the last sync
	foreign map[uuid.UUID]bool   // those not found at this one
}

// list reads the ready runs once per sync.
func (l *lookup) list(ctx context.Context) error {
	if l.ready != nil {
		return nil
	}
	runs, err := l.st.Ready(ctx)
	if err != nil {
		return err
	}
	l.ready, l.holders = make(map[uuid.UUID]string, len(runs)), make(map[string]uuid.UUID, len(runs))
	for _, r := range runs {
		l.ready[r.ID] = r.SessionID
		l.holders[r.SessionID] = r.ID
	}
	return nil
}

// Holding answers from the ready runs' listing, and asks the store only of a session no ready run holds: one
// handed on whose run is releasing it.
func (l *lookup) Holding(ctx context.Context, sessionID string) (reconcile.Reservation, error) {
	if err := l.list(ctx); err != nil {
		return reconcile.Reservation{}, err
	}
	if id, ok := l.holders[sessionID]; ok {
		return reconcile.Reservation{ID: id, Status: reconcile.Status{State: reconcile.StateReady, SessionID: sessionID}}, nil
	}
	return l.st.Holding(ctx, sessionID)
}

func (l *lookup) Get(ctx context.Context, id uuid.UUID) (reconcile.Reservation, error) {
	if err := l.list(ctx); err != nil {
		return reconcile.Reservation{}, err
	}
	if sid, ok := l.ready[id]; ok {
		return reconcile.Reservation{ID: id, Status: reconcile.Status{State: reconcile.StateReady, SessionID: sid}}, nil
	}
	if l.known[id] || l.foreign[id] {
		l.foreign[id] = true
		return reconcile.Reservation{}, reconcile.ErrNotFound
	}
	r, err := l.st.Get(ctx, id)
	if errors.Is(err, reconcile.ErrNotFound) {
		l.foreign[id] = true
	}
	return r, err
}

// write sets pool's license to count when slurmdbd has another figure, adding the license when it has none.
func (s *Syncer) write(ctx context.Context, pool string, count int) error {
	l, known := s.counts[strings.ToLower(pool)]
	if known && l.count == count {
		return nil
	}
	if known {
		pool = l.pool // as slurmdbd names it
	}
	n := strconv.Itoa(count)
	args := []string{"-i", "modify", "resource", "name=" + Name(pool), "server=" + Server, "set", "count=" + n}
	// The count carries the GPUs others hold, on every release: 22.05's sacctmgr has no lastconsumed, and on 23.02+
	// slurmctld holds back lastconsumed less what its own jobs use when it applies it, a figure that moves between
	// our read and its update, and our look-ahead sessions (for jobs still pending) would count as outside use and
	// block the jobs they were made for (docs/admin.md, section 3).
	if !known {
		args = []string{"-i", "add", "resource", "name=" + Name(pool), "server=" + Server, "type=license",
			"count=" + n, "cluster=" + s.Cluster, "percentallowed=100"}
	}
	out, err := s.Sacctmgr.Run(ctx, args...)
	if err == nil && (strings.Contains(out, "Nothing modified") || strings.Contains(out, "Nothing new added")) {
		// sacctmgr says so and exits 0: the license is not (or no longer, or already) what we took it for.
		err = fmt.Errorf("sacctmgr %s: %s", strings.Join(args, " "), strings.TrimSpace(out))
	}
	if err != nil {
		s.observe("error")
		// What slurmdbd holds is read again before the next write: the license may have been removed or added
		// by hand meanwhile.
		s.loaded = false
		return fmt.Errorf("license %s@%s to %d: %w", Name(pool), Server, count, err)
	}
	s.observe("ok")
	s.counts[strings.ToLower(pool)] = license{pool: pool, count: count}
	s.setMetric(pool, count)
	verb := "set"
	if !known {
		verb = "added"
	}
	s.Log.Info("license "+verb, "license", Name(pool)+"@"+Server, "count", count, "was", l.count)
	return nil
}

// read returns the counts of this cluster's Juice licenses in slurmdbd, by pool.
func (s *Syncer) read(ctx context.Context) (map[string]license, error) {
	return read(ctx, s.Sacctmgr, s.Cluster)
}

func read(ctx context.Context, m Sacctmgr, cluster string) (map[string]license, error) {
	out, err := m.Run(ctx, "-n", "-P", "show", "resource", "server="+Server, "withclusters",
		"format=name,count,cluster")
	if err != nil {
		return nil, fmt.Errorf("read the Juice licenses: %w", err)
	}
	return parseShow(out, cluster)
}

// Counts reads the counts of cluster's Juice licenses in slurmdbd (juice-slurm status), by pool as slurmdbd
// names it.
func Counts(ctx context.Context, m Sacctmgr, cluster string) (map[string]int, error) {
	ls, err := read(ctx, m, cluster)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(ls))
	for _, l := range ls {
		out[l.pool] = l.count
	}
	return out, nil
}

// parseShow reads `sacctmgr -n -P show resource ... withclusters format=name,count,cluster`: one line per
// license and cluster, name|count|cluster. The lines of other clusters are passed over.
func parseShow(out, cluster string) (map[string]license, error) {
	counts := map[string]license{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) < 3 {
			return nil, fmt.Errorf("read the Juice licenses: sacctmgr printed %q, want name|count|cluster", line)
		}
		if !strings.EqualFold(f[2], cluster) || !strings.HasPrefix(strings.ToLower(f[0]), namePrefix) {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("read the Juice licenses: license %s has count %q", f[0], f[1])
		}
		pool := f[0][len(namePrefix):]
		counts[strings.ToLower(pool)] = license{pool: pool, count: n}
	}
	return counts, nil
}

func (s *Syncer) observe(result string) {
	if s.Metrics != nil {
		s.Metrics.ObserveLicenseUpdate(result)
	}
}

func (s *Syncer) setMetric(pool string, n int) {
	if s.Metrics != nil {
		s.Metrics.SetLicense(pool, n)
	}
}

func (s *Syncer) period() time.Duration {
	if s.Period <= 0 {
		return 30 * time.Second
	}
	return s.Period
}

func (s *Syncer) retry() backoff.Policy {
	if s.Retry.Base <= 0 {
		return backoff.Policy{Base: 5 * time.Second, Max: s.period()}
	}
	return s.Retry
}
