package licenses

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

var _ Sacctmgr = Exec{}

var _ Metrics = (*fakeMetrics)(nil)

// juice is a Juice Controller of pools of agents (with their sessions); a pool not in it cannot be named.
type juice struct {
	juiceapi.Client
	mu    sync.Mutex
	pools map[string][]juiceapi.Agent
	fail  error // every listing fails with it
}

func (j *juice) ListAgents(_ context.Context, pool string) ([]juiceapi.Agent, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fail != nil {
		return nil, j.fail
	}
	agents, ok := j.pools[pool]
	if !ok {
		// As the HTTP client against juice-sim: "pool P not found" (TestUnknownPoolAtJuiceSimIsZero).
		return nil, fmt.Errorf("list agents of pool %q: %w", pool, &juiceapi.APIError{Method: "GET",
			Path: "/v1/agents?pool_id=" + pool, StatusCode: 500, Kind: juiceapi.ErrNotFound, Message: "pool " + pool + " not found"})
	}
	return agents, nil
}

func (j *juice) GetAgent(_ context.Context, id string) (*juiceapi.Agent, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, agents := range j.pools {
		for _, a := range agents {
			if a.ID == id {
				return &a, nil
			}
		}
	}
	return nil, juiceapi.ErrNotFound
}

func agent(id string, gpus int, sessions ...juiceapi.Session) juiceapi.Agent {
	return juiceapi.Agent{ID: id, State: juiceapi.AgentActive, GPUs: make([]juiceapi.GPU, gpus), Sessions: sessions}
}

// session is an active session on the GPUs of indexes, under key ("" none).
func session(id, key string, indexes ...int) juiceapi.Session {
	s := juiceapi.Session{ID: id, State: juiceapi.StateActive, IdempotencyKey: key}
	for _, i := range indexes {
		s.GPUs = append(s.GPUs, juiceapi.SessionGPU{Index: i})
	}
	return s
}

// reservations holds this cluster's reservations in memory, and counts the reads.
type reservations struct {
	rows        map[uuid.UUID]reconcile.Reservation
	gets, lists int
}

func (m *reservations) Get(_ context.Context, id uuid.UUID) (reconcile.Reservation, error) {
	m.gets++
	r, ok := m.rows[id]
	if !ok {
		return r, reconcile.ErrNotFound
	}
	return r, nil
}

func (m *reservations) Holding(_ context.Context, sid string) (reconcile.Reservation, error) {
	m.gets++
	for _, r := range m.rows {
		if r.Status.SessionID == sid && !r.Status.State.Final() {
			return r, nil
		}
	}
	return reconcile.Reservation{}, reconcile.ErrNotFound
}

func (m *reservations) Ready(context.Context) ([]reconcile.ReadyRun, error) {
	m.lists++
	var out []reconcile.ReadyRun
	for _, r := range m.rows {
		if r.Status.State == reconcile.StateReady {
			out = append(out, reconcile.ReadyRun{ID: r.ID, SessionID: r.Status.SessionID})
		}
	}
	return out, nil
}

// sacctmgr records its calls and keeps slurmdbd's licenses; fail makes every call fail.
type sacctmgr struct {
	mu       sync.Mutex
	calls    []string
	licenses map[string]int // name -> count, of cluster c1
	// qos are the QOS slurmdbd has and their MaxTRESPerUser, as sacctmgr shows it ("cpu=4,license/x@y=1").
	qos map[string]string
	// untracked are licenses slurm.conf's AccountingStorageTRES does not name: no TRES for limits.
	untracked map[string]bool
	fail      error
}

func (f *sacctmgr) Run(_ context.Context, args ...string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	call := strings.Join(args, " ")
	f.calls = append(f.calls, call)
	if f.fail != nil {
		return "", f.fail
	}
	arg := func(key string) string {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, key+"="); ok {
				return v
			}
		}
		return ""
	}
	count := func() int {
		var n int
		fmt.Sscan(arg("count"), &n)
		return n
	}
	switch {
	case strings.HasPrefix(call, "-n -P show resource"):
		var b strings.Builder
		for name, n := range f.licenses {
			fmt.Fprintf(&b, "%s|%d|c1\n", name, n)
		}
		b.WriteString("juice_elsewhere|9|c2\nmatlab|5|c1\n") // another cluster's, and no Juice license
		return b.String(), nil
	case strings.HasPrefix(call, "-i add resource"):
		if _, ok := f.licenses[arg("name")]; ok {
			return " Nothing new added.\n", nil
		}
		f.licenses[arg("name")] = count()
		return " Adding Resource(s)\n", nil
	case strings.HasPrefix(call, "-n -P show qos where name="):
		q := arg("name")
		if tres, ok := f.qos[q]; ok {
			return q + "|" + tres + "\n", nil
		}
		return "", nil // sacctmgr shows nothing for a QOS it does not have, and exits 0
	case strings.HasPrefix(call, "-i modify qos where name="):
		return f.modifyQOS(arg("name"), arg("MaxTRESPerUser"))
	case strings.HasPrefix(call, "-i modify resource"):
		if _, ok := f.licenses[arg("name")]; !ok {
			return " Nothing modified\n", nil
		}
		f.licenses[arg("name")] = count()
		return " Modified server resource ...\n", nil
	}
	return "", fmt.Errorf("unexpected sacctmgr %s", call)
}

// modifyQOS merges set into q's MaxTRESPerUser as slurmdbd does: an entry replaces the same TRES's, -1 removes it,
// the others stay. A license TRES is known once its license exists (slurmctld registered it from
// AccountingStorageTRES).
func (f *sacctmgr) modifyQOS(q, set string) (string, error) {
	cur, ok := f.qos[q]
	if !ok {
		return "", fmt.Errorf("exit status 1:  Nothing modified")
	}
	have := map[string]string{}
	var order []string
	for _, e := range strings.Split(cur, ",") {
		if k, v, ok := strings.Cut(e, "="); ok {
			have[k] = v
			order = append(order, k)
		}
	}
	for _, e := range strings.Split(set, ",") {
		k, v, _ := strings.Cut(e, "=")
		if lic, ok := strings.CutPrefix(k, "license/"); ok {
			if _, known := f.licenses[strings.TrimSuffix(lic, "@juice")]; !known || f.untracked[strings.TrimSuffix(lic, "@juice")] {
				return "", fmt.Errorf("exit status 1: sacctmgr: error: slurmdb_format_tres_str: no TRES known by type %s", k)
			}
		}
		if _, ok := have[k]; !ok {
			order = append(order, k)
		}
		have[k] = v
	}
	slices.Sort(order)
	var out []string
	for _, k := range order {
		if have[k] != "-1" {
			out = append(out, k+"="+have[k])
		}
	}
	f.qos[q] = strings.Join(out, ",")
	return " Modified qos...\n  " + q + "\n", nil
}

// writes are the calls that changed something.
func (f *sacctmgr) writes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if !strings.HasPrefix(c, "-n ") {
			out = append(out, c)
		}
	}
	return out
}

func (f *sacctmgr) reset() {
	f.mu.Lock()
	f.calls = nil
	f.mu.Unlock()
}

type fakeMetrics struct {
	mu      sync.Mutex
	counts  map[string]int
	updates map[string]int
}

func (m *fakeMetrics) SetLicense(pool string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts == nil {
		m.counts = map[string]int{}
	}
	m.counts[pool] = n
}

func (m *fakeMetrics) ObserveLicenseUpdate(result string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.updates == nil {
		m.updates = map[string]int{}
	}
	m.updates[result]++
}

type world struct {
	juice    *juice
	st       *reservations
	sacctmgr *sacctmgr
	metrics  *fakeMetrics
	syncer   *Syncer
}

func newWorld(pools ...string) *world {
	w := &world{juice: &juice{pools: map[string][]juiceapi.Agent{}}, st: &reservations{rows: map[uuid.UUID]reconcile.Reservation{}},
		sacctmgr: &sacctmgr{licenses: map[string]int{}}, metrics: &fakeMetrics{}}
	w.syncer = &Syncer{Cluster: "c1", Pools: pools, Juice: w.juice, Store: w.st, Sacctmgr: w.sacctmgr,
		Log: logr.Discard(), Metrics: w.metrics}
	return w
}

// ours adds a reservation of this cluster in state holding session sid, and returns its key.
func (w *world) ours(state reconcile.State, sid string) string {
	id := uuid.New()
	w.st.rows[id] = reconcile.Reservation{ID: id, Status: reconcile.Status{State: state, SessionID: sid}}
	return id.String()
}

// The count is the GPUs of the pool's active agents: an agent that is not active gives none.
func TestCountIsTheActiveAgentsGPUs(t *testing.T) {
	w := newWorld("test")
	closed := agent("a3", 8)
	closed.State = juiceapi.AgentClosed
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 4), agent("a2", 2), closed}
	require.NoError(t, w.syncer.Sync(context.Background()))
	require.Equal(t, []string{"-i add resource name=juice_test server=juice type=license count=6 cluster=c1 percentallowed=100"},
		w.sacctmgr.writes(), "a missing license is added")
	require.Equal(t, 6, w.sacctmgr.licenses["juice_test"])
	require.Equal(t, 6, w.metrics.counts["test"])
	require.Equal(t, 1, w.metrics.updates["ok"])
}

// Sessions that serve none of our runs (another client's, another cluster's, our orphans) take their GPUs off
// the count; the sessions of our live runs do not, a pending job's reservation included.
func TestForeignSessionsAreTakenOffOursAreNot(t *testing.T) {
	w := newWorld("test")
	ready := w.ours(reconcile.StateReady, "s-ready")
	waiting := w.ours(reconcile.StateWaiting, "") // a pending job's reservation, its session just placed
	released := w.ours(reconcile.StateReleased, "s-gone")
	moved := w.ours(reconcile.StateReady, "s-new") // a run that was given a second session (a lost answer)
	ended := session("s-ended", "", 7)
	ended.State = juiceapi.StateClosed
	w.juice.pools["test"] = []juiceapi.Agent{
		agent("a1", 8,
			session("s-ready", ready, 0, 1),
			session("s-waiting", waiting, 2, 3),
			session("s-other-client", "", 4),
			session("s-other-cluster", uuid.NewString(), 5),
			session("s-gone", released, 6), // an orphan of ours: the sweep cancels it, Slurm no longer counts it
			ended),
		agent("a2", 4,
			session("slice-1", "", 0), session("slice-2", "", 0), // two slices of another client on one GPU
			session("s-legacy", uuid.NewString(), 0, 1)), // a legacy grant of more GPUs, one of them shared
		agent("a3", 2, session("s-new", moved, 0), session("s-old", moved, 1)),
	}
	require.NoError(t, w.syncer.Sync(context.Background()))
	// a1: 8 less GPUs 4, 5 and 6; a2: 4 less GPUs 0 and 1; a3: 2 less the orphan s-old's GPU 1.
	require.Equal(t, 5+2+1, w.sacctmgr.licenses["juice_test"])
}

// Two pending jobs each holding a reservation for half the pool: the license keeps the whole pool, so both start.
func TestPendingReservationsNeverBlockTheirJobs(t *testing.T) {
	w := newWorld("test")
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 4,
		session("s1", w.ours(reconcile.StateWaiting, "s1"), 0, 1),
		session("s2", w.ours(reconcile.StateReady, "s2"), 2, 3))}
	require.NoError(t, w.syncer.Sync(context.Background()))
	require.Equal(t, 4, w.sacctmgr.licenses["juice_test"])
}

// A figure is written only when it changes; what slurmdbd has is read once, at the first sync.
func TestWrittenOnlyOnChange(t *testing.T) {
	w := newWorld("test")
	w.sacctmgr.licenses["juice_test"] = 4 // from an earlier term
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 4)}
	ctx := context.Background()
	require.NoError(t, w.syncer.Sync(ctx))
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, []string{"-n -P show resource server=juice withclusters format=name,count,cluster"}, w.sacctmgr.calls,
		"the count slurmdbd has is right: read once, never written")
	require.Equal(t, 4, w.metrics.counts["test"], "what slurmdbd has is reported from the start")

	w.sacctmgr.reset()
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 4, session("x", "", 3))}
	require.NoError(t, w.syncer.Sync(ctx))
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, []string{"-i modify resource name=juice_test server=juice set count=3"}, w.sacctmgr.calls)
	require.Equal(t, 3, w.metrics.counts["test"])
}

// The license of a pool no longer served goes to 0 and is never deleted; nor is a pool the Juice Controller cannot
// name given any GPU. Another cluster's licenses and other licenses are left alone.
func TestVanishedPoolGoesToZero(t *testing.T) {
	w := newWorld("test", "gone")
	w.sacctmgr.licenses["juice_retired"] = 3 // a pool taken out of the policy
	w.sacctmgr.licenses["juice_gone"] = 5    // a pool the Juice Controller no longer knows
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 2)}
	require.NoError(t, w.syncer.Sync(context.Background()))
	require.ElementsMatch(t, []string{
		"-i modify resource name=juice_gone server=juice set count=0",
		"-i modify resource name=juice_retired server=juice set count=0",
		"-i add resource name=juice_test server=juice type=license count=2 cluster=c1 percentallowed=100",
	}, w.sacctmgr.writes())
	for _, c := range w.sacctmgr.calls {
		require.NotContains(t, c, "delete")
		require.NotContains(t, c, "elsewhere")
		require.NotContains(t, c, "matlab")
	}
}

// Against juice-sim over HTTP, as the controller runs: a pool the Juice Controller does not know ("pool P not
// found", a 500 the client reads as ErrNotFound) is given 0 and fails no sync; the test fake answered kinder
// (ErrNoCapacity) and hid that every sync of a site with such a pool failed and never wrote its 0.
func TestUnknownPoolAtJuiceSimIsZero(t *testing.T) {
	srv, err := juicesim.StartServer(juicesim.Config{Token: "m2m_licenses",
		Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 2, 4, 80*vram.GiB)}}, logr.Discard())
	require.NoError(t, err)
	defer srv.Close()
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("m2m_licenses\n"), 0o600))
	c, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: srv.URL, TokenFile: token, MaxAttempts: 1})
	require.NoError(t, err)
	w := newWorld("test", "gone")
	w.syncer.Juice = c
	w.sacctmgr.licenses["juice_gone"] = 5
	require.NoError(t, w.syncer.Sync(context.Background()))
	require.ElementsMatch(t, []string{
		"-i modify resource name=juice_gone server=juice set count=0",
		"-i add resource name=juice_test server=juice type=license count=8 cluster=c1 percentallowed=100",
	}, w.sacctmgr.writes())
}

// Without pools in the policy, the Juice licenses slurmdbd holds for this cluster are the pools kept.
func TestWithoutPoolsTheExistingLicensesAreKept(t *testing.T) {
	w := newWorld()
	w.sacctmgr.licenses["juice_a100"] = 1
	w.juice.pools["a100"] = []juiceapi.Agent{agent("a1", 8)}
	require.NoError(t, w.syncer.Sync(context.Background()))
	require.Equal(t, []string{"-i modify resource name=juice_a100 server=juice set count=8"}, w.sacctmgr.writes())
}

// slurmdbd may hold a name in another case than the policy's: the license is found, not added again.
func TestLicenseNamesCompareWithoutCase(t *testing.T) {
	w := newWorld("A100")
	w.sacctmgr.licenses["juice_a100"] = 1
	w.juice.pools["A100"] = []juiceapi.Agent{agent("a1", 8)}
	require.NoError(t, w.syncer.Sync(context.Background()))
	require.Equal(t, []string{"-i modify resource name=juice_a100 server=juice set count=8"}, w.sacctmgr.writes())
}

// A failing sacctmgr (missing, slurmdbd down) is an error naming what failed, counted, and retried: the figure
// is written once it works again.
func TestSacctmgrFailureIsCountedAndRetried(t *testing.T) {
	w := newWorld("test")
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 4)}
	w.sacctmgr.fail = errors.New("exit status 1: sacctmgr: error: Sending PersistInit msg: Connection refused")
	ctx := context.Background()
	err := w.syncer.Sync(ctx)
	require.ErrorContains(t, err, "read the Juice licenses")
	require.ErrorContains(t, err, "Connection refused")
	require.Equal(t, 1, w.metrics.updates["error"])

	w.sacctmgr.fail = nil
	w.sacctmgr.licenses["juice_test"] = 1
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, 4, w.sacctmgr.licenses["juice_test"])

	// A write that fails is tried again at the next sync, after reading slurmdbd again.
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 2)}
	w.sacctmgr.fail = errors.New("exit status 1: slurmdbd down")
	err = w.syncer.Sync(ctx)
	require.ErrorContains(t, err, "license juice_test@juice to 2")
	w.sacctmgr.fail = nil
	w.sacctmgr.reset()
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, []string{"-n -P show resource server=juice withclusters format=name,count,cluster",
		"-i modify resource name=juice_test server=juice set count=2"}, w.sacctmgr.calls)
	require.Equal(t, 2, w.metrics.updates["error"])
}

// A license deleted by hand (sacctmgr says "Nothing modified" and exits 0) is added again at the next sync.
func TestLicenseDeletedByHandIsAddedAgain(t *testing.T) {
	w := newWorld("test")
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 4)}
	ctx := context.Background()
	require.NoError(t, w.syncer.Sync(ctx))
	delete(w.sacctmgr.licenses, "juice_test")
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 3)}
	require.ErrorContains(t, w.syncer.Sync(ctx), "Nothing modified")
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, 3, w.sacctmgr.licenses["juice_test"])
}

// A pool whose walk fails keeps its figure; the other pools are still synced.
func TestFailedWalkKeepsTheFigure(t *testing.T) {
	w := newWorld("test")
	w.sacctmgr.licenses["juice_test"] = 4
	w.juice.fail = fmt.Errorf("list agents: %w", juiceapi.ErrUnavailable)
	err := w.syncer.Sync(context.Background())
	require.ErrorContains(t, err, "license of pool test")
	require.Empty(t, w.sacctmgr.writes())
	require.Equal(t, 4, w.sacctmgr.licenses["juice_test"])
}

// Run syncs at once and again after a failure, sooner than the period, and tells Health each outcome.
func TestRunRetriesWithBackoff(t *testing.T) {
	w := newWorld("test")
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 4)}
	w.sacctmgr.fail = errors.New("sacctmgr: not found")
	var mu sync.Mutex
	var outcomes []error
	w.syncer.Health = func(err error) { mu.Lock(); outcomes = append(outcomes, err); mu.Unlock() }
	w.syncer.Period = time.Hour
	w.syncer.Retry.Base, w.syncer.Retry.Max = time.Millisecond, 2*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.syncer.Run(ctx); close(done) }()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(outcomes) >= 3 }, 5*time.Second, time.Millisecond)
	w.sacctmgr.mu.Lock()
	w.sacctmgr.fail = nil
	w.sacctmgr.mu.Unlock()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return outcomes[len(outcomes)-1] == nil }, 5*time.Second, time.Millisecond)
	w.sacctmgr.mu.Lock()
	require.Equal(t, 4, w.sacctmgr.licenses["juice_test"])
	w.sacctmgr.mu.Unlock()
	cancel()
	<-done
	mu.Lock()
	require.ErrorContains(t, outcomes[0], "not found")
	mu.Unlock()
}

// Exec runs sacctmgr; a failure names the command and carries what it said.
func TestExec(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "sacctmgr")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\nif [ \"$1\" = ok ]; then echo \"juice_test|4|c1\"; exit 0; fi\n"+
		"echo 'sacctmgr: error: Problem talking to the database: Connection refused' >&2\nexit 1\n"), 0o755))
	out, err := Exec{Path: fake}.Run(context.Background(), "ok")
	require.NoError(t, err)
	require.Equal(t, "juice_test|4|c1\n", out)
	_, err = Exec{Path: fake}.Run(context.Background(), "-i", "modify", "resource")
	require.ErrorContains(t, err, fake+" -i modify resource: exit status 1: sacctmgr: error: Problem talking to the database")
	_, err = Exec{Path: filepath.Join(dir, "missing")}.Run(context.Background(), "show")
	require.ErrorContains(t, err, filepath.Join(dir, "missing"))
}

// The show output: this cluster's Juice licenses only, and a line that does not read is an error.
func TestParseShow(t *testing.T) {
	got, err := parseShow("juice_a|4|c1\njuice_B.x|0|C1\njuice_a|7|c2\nmatlab|3|c1\n\n", "c1")
	require.NoError(t, err)
	require.Equal(t, map[string]license{"a": {"a", 4}, "b.x": {"B.x", 0}}, got)
	_, err = parseShow("juice_a|four|c1\n", "c1")
	require.ErrorContains(t, err, `"four"`)
	_, err = parseShow("juice_a\n", "c1")
	require.ErrorContains(t, err, "name|count|cluster")
}

// test/vectors/licenses.tsv: a job without licenses of its own gets exactly For(request), the license the
// Syncer counts under Name(pool).
func TestForIsWhatJobSubmitGives(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "test", "vectors", "licenses.tsv"))
	require.NoError(t, err)
	defer f.Close()
	rows := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		cols := strings.Split(line, "\t")
		require.Len(t, cols, 4, line)
		if cols[1] != "-" || cols[2] != "ok" {
			continue
		}
		req, err := request.Parse(cols[0])
		require.NoError(t, err, line)
		require.Equal(t, cols[3], For(req), line)
		require.True(t, strings.HasPrefix(cols[3], Name(req.Pool)+"@"+Server+":"), line)
		rows++
	}
	require.NoError(t, sc.Err())
	require.GreaterOrEqual(t, rows, 5)
}

var _ Store = (*store.Store)(nil)

// A sync reads the ready runs once, not each ready session's reservation, and a key the store did not know is not
// asked again: at 100,000 ready runs a read per session each period would be 100,000 queries.
func TestSyncReadsFewReservations(t *testing.T) {
	w := newWorld("test")
	var sessions []juiceapi.Session
	for i := 0; i < 50; i++ {
		sid := fmt.Sprintf("s%d", i)
		sessions = append(sessions, session(sid, w.ours(reconcile.StateReady, sid), i))
	}
	stranger := uuid.NewString() // another cluster's run
	sessions = append(sessions, session("s-waiting", w.ours(reconcile.StateWaiting, ""), 60),
		session("s-stranger", stranger, 61), session("s-gone", w.ours(reconcile.StateReleased, "s-gone"), 62))
	// A session handed on: its key names the released run that ended, and a ready run holds it now.
	handed := w.ours(reconcile.StateReleased, "s-handed")
	w.ours(reconcile.StateReady, "s-handed")
	sessions = append(sessions, session("s-handed", handed, 63))
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 64, sessions...)}
	ctx := context.Background()
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, 64-2, w.sacctmgr.licenses["juice_test"], "the stranger's GPU and our orphan's are taken off, not the handed one's")
	require.Equal(t, 1, w.st.lists)
	require.Equal(t, 5, w.st.gets, "the waiting run, the stranger, the orphan and who holds it, the handed session's first run")
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, 2, w.st.lists)
	require.Equal(t, 5+4, w.st.gets, "the stranger is not asked again")
	// The stranger's session ended and the sweep cancelled our orphan: the stranger's key is forgotten.
	w.juice.pools["test"] = []juiceapi.Agent{agent("a1", 64, append(sessions[:51:51], sessions[53])...)}
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, 64, w.sacctmgr.licenses["juice_test"])
	require.Empty(t, w.syncer.foreign)
}
