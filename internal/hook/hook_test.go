package hook

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/reconcile/session/filename"
)

// fakeAPI is a scripted hook API: each call gets the next answer of the script (the last one repeats).
type fakeAPI struct {
	mu      sync.Mutex
	script  []func(w http.ResponseWriter)
	calls   int
	prologs []hookapi.PrologRequest
	epilogs []hookapi.EpilogRequest
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+testSecret {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	switch r.URL.Path {
	case "/v1/prolog":
		var in hookapi.PrologRequest
		_ = json.NewDecoder(r.Body).Decode(&in)
		f.prologs = append(f.prologs, in)
	case "/v1/epilog":
		var in hookapi.EpilogRequest
		_ = json.NewDecoder(r.Body).Decode(&in)
		f.epilogs = append(f.epilogs, in)
	}
	step := f.script[min(f.calls, len(f.script)-1)]
	f.calls++
	step(w)
}

func answer(v any) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) { _ = json.NewEncoder(w).Encode(v) }
}

func status(code int, msg string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) { http.Error(w, msg, code) }
}

const testSecret = "hook-secret-for-the-hook-tests"

// hookWorld is one hook run's surroundings: the API, the secret file, the state directory and slurmctld's
// environment for job 42, run 1, of cluster c1, a Juice job.
type hookWorld struct {
	api      *fakeAPI
	url      string
	ca       string
	secret   string
	stateDir string
	env      map[string]string
	stderr   bytes.Buffer
	// scontrol is the scontrol the hook runs: none unless a test gives one (see fakeScontrol).
	scontrol string
}

func newHookWorld(t *testing.T, script ...func(http.ResponseWriter)) *hookWorld {
	t.Helper()
	w := &hookWorld{api: &fakeAPI{script: script}, stateDir: t.TempDir()}
	srv := httptest.NewTLSServer(w.api)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	// The hook pins the test server's certificate (every httptest TLS server has the same one).
	w.ca = filepath.Join(t.TempDir(), "hook.crt")
	require.NoError(t, os.WriteFile(w.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644))
	w.secret = filepath.Join(t.TempDir(), "hook.secret")
	require.NoError(t, os.WriteFile(w.secret, []byte(testSecret+"\n"), 0o600))
	w.env = map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_RESTART_COUNT": "1", "SLURM_CLUSTER_NAME": "c1",
		"SPANK_JUICE_REQUEST": "juice:v1:pool=test,gpus=1", "SLURM_JOB_EXIT_CODE2": "0:0"}
	return w
}

func (w *hookWorld) run(which string, extra ...string) error {
	args := append([]string{"--config=", "--hook-url", w.url, "--hook-ca", w.ca, "--hook-secret", w.secret, "--state-dir", w.stateDir,
		"--prolog-wait", "2s", "--epilog-wait", "1s", "--scontrol", w.scontrol}, extra...)
	return Main(context.Background(), which, args, func(k string) string { return w.env[k] }, &w.stderr)
}

func exitStatus(err error) int {
	var ec Exit
	if errors.As(err, &ec) {
		return int(ec)
	}
	if err != nil {
		return -1
	}
	return 0
}

var sealed = []byte("JUICE-SESSION v2 cluster=c1 job=42 run=1 reservation=7c2b9e4a-1d3f-4b6a-8e5c-0a1b2c3d4e5f key=0123456789abcdef\nsealed bytes")

func TestPrologWritesTheSessionAtomically(t *testing.T) {
	w := newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"}))
	require.Equal(t, 0, exitStatus(w.run("prolog")))
	got, err := os.ReadFile(filepath.Join(w.stateDir, "42.1.session"))
	require.NoError(t, err)
	require.Equal(t, sealed, got)
	st, err := os.Stat(filepath.Join(w.stateDir, "42.1.session"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	entries, err := os.ReadDir(w.stateDir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{filename.HooksMark, "42.1.session"}, names,
		"no temporary file is left; the mark that tells the controller this is the hooks' directory is")
	require.Equal(t, []hookapi.PrologRequest{{Cluster: "c1", JobID: 42, Run: 1, WaitSeconds: 2}},
		roundWaits(w.api.prologs), "the hook names its run, and nothing else")
}

func roundWaits(in []hookapi.PrologRequest) []hookapi.PrologRequest {
	out := append([]hookapi.PrologRequest(nil), in...)
	for i := range out {
		if out[i].WaitSeconds > 1.5 {
			out[i].WaitSeconds = 2
		}
	}
	return out
}

// Failures that another call may cure are retried until the deadline; a ready answer then ends the wait.
func TestPrologRetriesTransientFailures(t *testing.T) {
	w := newHookWorld(t, status(http.StatusServiceUnavailable, "not ready"), status(http.StatusBadGateway, "proxy"),
		answer(hookapi.PrologReply{Outcome: hookapi.OutcomeWaiting, State: "waiting", Reason: "queued"}),
		answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"}))
	require.Equal(t, 0, exitStatus(w.run("prolog")))
	require.Equal(t, 4, w.api.calls)
	require.Contains(t, w.stderr.String(), "retrying")
	require.Contains(t, w.stderr.String(), "still waiting (waiting: queued)")
}

// An answer that no retry can change fails the prolog at once, not at the deadline.
func TestPrologFailsAtOnceOnAPermanentRefusal(t *testing.T) {
	for _, code := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusForbidden} {
		w := newHookWorld(t, status(code, "no such thing"))
		require.Equal(t, 1, exitStatus(w.run("prolog")), "HTTP %d", code)
		require.Equal(t, 1, w.api.calls, "HTTP %d: asked once", code)
		require.Contains(t, w.stderr.String(), "refused")
	}
	w := newHookWorld(t)
	require.NoError(t, os.WriteFile(w.secret, []byte("another-secret-of-enough-length\n"), 0o600))
	require.Equal(t, 1, exitStatus(w.run("prolog")))
	require.Equal(t, 0, w.api.calls, "a wrong secret is turned away before any script step")
	require.Contains(t, w.stderr.String(), "HTTP 401")
}

// A state directory of many files, read in several batches of records: every leftover of the job id goes, wherever
// it lies among them, and nothing else.
func TestLeftoversAmongManyFiles(t *testing.T) {
	w := newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeNone}))
	const others = 3000 // about 100 KiB of directory records: more than one read
	for i := 0; i < others; i++ {
		require.NoError(t, os.WriteFile(filepath.Join(w.stateDir, fmt.Sprintf("%d.%d.session", 1000+i, i%3)), nil, 0o600))
		if i%1000 == 500 {
			require.NoError(t, os.WriteFile(filepath.Join(w.stateDir, fmt.Sprintf("42.%d.session", i)), nil, 0o600))
		}
	}
	require.Equal(t, 0, exitStatus(w.run("prolog")), w.stderr.String())
	entries, err := os.ReadDir(w.stateDir)
	require.NoError(t, err)
	require.Len(t, entries, others)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), "42."), e.Name())
	}
	require.Equal(t, 3, strings.Count(w.stderr.String(), "removed a leftover"), w.stderr.String())
}

func TestPrologOutcomes(t *testing.T) {
	w := newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeFailed, Reason: "the pool can never fit 9 GPUs\nforged line"}))
	require.Equal(t, 1, exitStatus(w.run("prolog")))
	require.Contains(t, w.stderr.String(), "cannot be served: the pool can never fit 9 GPUs?forged line")
	require.Equal(t, 2, strings.Count(w.stderr.String(), "\n"), "a newline in a reason cannot forge a line")

	// Leftover files of this job id (an earlier job's, whose epilog never ran), whatever their run, go at the start
	// of every prolog, Juice job or not: the plugin would otherwise open one (it cannot know the reservation, and
	// takes the newest run at or above the one it knows). Other jobs' files stay.
	for name, tc := range map[string]struct {
		rep   hookapi.PrologReply
		plain bool
	}{
		"none": {rep: hookapi.PrologReply{Outcome: hookapi.OutcomeNone}}, "failed": {rep: hookapi.PrologReply{Outcome: hookapi.OutcomeFailed, Reason: "no"}},
		"ready": {rep: hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"}}, "plain job": {plain: true},
	} {
		w = newHookWorld(t, answer(tc.rep))
		if tc.plain {
			delete(w.env, "SPANK_JUICE_REQUEST")
		}
		for _, f := range []string{"42.0.session", "42.1.session", "42.7.session", "43.1.session", "420.1.session", ".42.1.session.tmp5"} {
			require.NoError(t, os.WriteFile(filepath.Join(w.stateDir, f), []byte("leftover"), 0o600))
		}
		w.run("prolog")
		entries, _ := os.ReadDir(w.stateDir)
		var left []string
		for _, e := range entries {
			left = append(left, e.Name())
		}
		want := []string{".42.1.session.tmp5", "420.1.session", "43.1.session"}
		if name == "ready" {
			want = []string{".42.1.session.tmp5", filename.HooksMark, "42.1.session", "420.1.session", "43.1.session"}
			got, err := os.ReadFile(filepath.Join(w.stateDir, "42.1.session"))
			require.NoError(t, err)
			require.Equal(t, sealed, got, "the run's own file replaces the leftover")
		}
		require.Equal(t, want, left, name)
		if tc.plain {
			require.Equal(t, 0, w.api.calls, "a plain job makes no call")
		}
	}
	w = newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeNone}))
	require.Equal(t, 0, exitStatus(w.run("prolog")))
	entries, _ := os.ReadDir(w.stateDir)
	require.Empty(t, entries)

	// A file name that is not this run's is refused: nothing is written anywhere.
	for _, name := range []string{"../42.1.session", "43.1.session", ""} {
		w = newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: name}))
		require.Equal(t, 1, exitStatus(w.run("prolog")), name)
		entries, _ = os.ReadDir(w.stateDir)
		require.Empty(t, entries, name)
		_, err := os.Stat(filepath.Join(filepath.Dir(w.stateDir), "42.1.session"))
		require.True(t, os.IsNotExist(err), name)
	}
}

// The wait is bounded: a run that stays waiting fails the prolog at its deadline, so Slurm requeues the job.
func TestPrologDeadline(t *testing.T) {
	w := newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeWaiting, State: "waiting", Reason: "pool full"}))
	require.Equal(t, 1, exitStatus(w.run("prolog", "--prolog-wait", "300ms")))
	require.GreaterOrEqual(t, w.api.calls, 2, "it asked again until the deadline")
	require.Contains(t, w.stderr.String(), "no session within 300ms")
	for _, p := range w.api.prologs {
		require.LessOrEqual(t, p.WaitSeconds, 0.3, "no call waits past the deadline")
	}
}

// The hook decides nothing: a job without a Juice request is not asked about, and a misconfigured environment
// fails the prolog but never the epilog.
func TestHookEnvironment(t *testing.T) {
	w := newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady}))
	delete(w.env, "SPANK_JUICE_REQUEST")
	require.Equal(t, 0, exitStatus(w.run("prolog")))
	require.Equal(t, 0, exitStatus(w.run("epilog")))
	require.Zero(t, w.api.calls)

	w.env["SLURM_JOB_COMMENT"] = "juice:v1:pool=test,gpus=1"
	require.Equal(t, 0, exitStatus(w.run("prolog")), "a comment is not a request unless trusted")
	require.Zero(t, w.api.calls)
	_ = w.run("prolog", "--trust-comment")
	require.Equal(t, 1, w.api.calls, "--trust-comment makes a commented job a Juice job")

	for _, bad := range []map[string]string{{"SLURM_JOB_ID": "x"}, {"SLURM_JOB_RESTART_COUNT": "-1"}, {"SLURM_CLUSTER_NAME": ""}} {
		w = newHookWorld(t)
		for k, v := range bad {
			w.env[k] = v
		}
		require.Equal(t, 1, exitStatus(w.run("prolog")), "%v", bad)
		require.Equal(t, 0, exitStatus(w.run("epilog")), "%v", bad)
		require.Zero(t, w.api.calls)
	}
	w = newHookWorld(t)
	require.NoError(t, os.Chmod(w.secret, 0o644))
	require.Equal(t, 1, exitStatus(w.run("prolog")))
	require.Contains(t, w.stderr.String(), "chmod 600")
	require.Zero(t, w.api.calls)
}

func TestEpilogRemovesTheSessionAndNeverFails(t *testing.T) {
	w := newHookWorld(t, answer(hookapi.EpilogReply{Outcome: hookapi.OutcomeReleased, Reason: "session cancelled"}))
	file := filepath.Join(w.stateDir, "42.1.session")
	require.NoError(t, os.WriteFile(file, sealed, 0o600))
	require.Equal(t, 0, exitStatus(w.run("epilog")))
	_, err := os.Stat(file)
	require.True(t, os.IsNotExist(err), "the session file is removed")
	require.Equal(t, []hookapi.EpilogRequest{{Cluster: "c1", JobID: 42, Run: 1, ExitCode: "0:0", WaitSeconds: 1}}, w.api.epilogs)
	require.Contains(t, w.stderr.String(), "session released")

	w = newHookWorld(t, status(http.StatusInternalServerError, "database down"))
	require.Equal(t, 0, exitStatus(w.run("epilog")))
	require.Contains(t, w.stderr.String(), "the controller releases the session when it sees the job end")
}

// A list of hook URLs is tried in turn: a replica that is down (nothing listens) or cannot serve (503) is
// passed over, and the next call starts at the replica that answered.
func TestHookURLListSkipsAReplicaThatIsDown(t *testing.T) {
	down := httptest.NewTLSServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close() // nothing listens there any more
	unready := &fakeAPI{script: []func(http.ResponseWriter){status(http.StatusServiceUnavailable, "not ready: database")}}
	us := httptest.NewTLSServer(unready)
	t.Cleanup(us.Close)
	w := newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeWaiting, State: "waiting", Reason: "queued"}),
		answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"}))
	w.url = downURL + "," + us.URL + ", " + w.url + "/"
	require.Equal(t, 0, exitStatus(w.run("prolog")), w.stderr.String())
	require.Len(t, w.api.prologs, 2, "the live replica served both calls")
	require.Equal(t, 1, unready.calls, "the second call went straight to the replica that answered")
	_, err := os.Stat(filepath.Join(w.stateDir, "42.1.session"))
	require.NoError(t, err)

	// A refusal is final: the next replica is not asked to overrule it.
	w = newHookWorld(t, status(http.StatusUnauthorized, "unauthorized"))
	other := &fakeAPI{script: []func(http.ResponseWriter){answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"})}}
	os2 := httptest.NewTLSServer(other)
	t.Cleanup(os2.Close)
	w.url = w.url + "," + os2.URL
	require.Equal(t, 1, exitStatus(w.run("prolog")))
	require.Zero(t, other.calls)

	// Every replica down: the prolog retries until its deadline and says which replicas failed.
	w = newHookWorld(t, status(http.StatusServiceUnavailable, "not ready"))
	w.url = downURL + "," + w.url
	require.Equal(t, 1, exitStatus(w.run("prolog", "--prolog-wait", "500ms")))
	require.Contains(t, w.stderr.String(), downURL)
}

// A job without a Juice request passes its prolog and epilog whatever is wrong with juice-slurm's settings; a
// Juice job's prolog fails on them.
func TestHookPassesPlainJobsWhenMisconfigured(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "juice-slurm.conf")
	require.NoError(t, os.WriteFile(broken, []byte("no-such-setting = 1\n"), 0o644))
	for name, extra := range map[string][]string{
		"broken settings file":  {"--config", broken},
		"missing settings file": {"--config", filepath.Join(dir, "absent.conf")},
		"bad flag value":        {"--prolog-wait", "soon"},
	} {
		t.Run(name, func(t *testing.T) {
			w := newHookWorld(t, status(http.StatusInternalServerError, "must not be called"))
			delete(w.env, "SPANK_JUICE_REQUEST")
			require.Equal(t, 0, exitStatus(w.run("prolog", extra...)), w.stderr.String())
			require.Equal(t, 0, exitStatus(w.run("epilog", extra...)), w.stderr.String())
			require.Contains(t, w.stderr.String(), "juice: job 42: ")
			require.Zero(t, w.api.calls)

			w = newHookWorld(t, status(http.StatusInternalServerError, "must not be called"))
			require.NotEqual(t, 0, exitStatus(w.run("prolog", extra...)), "a Juice job's prolog passed misconfigured")
			require.Equal(t, 0, exitStatus(w.run("epilog", extra...)), w.stderr.String())
		})
	}
	// Without SLURM_JOB_ID (not run by slurmctld): a plain job's prolog still passes.
	w := newHookWorld(t, status(http.StatusInternalServerError, "must not be called"))
	delete(w.env, "SPANK_JUICE_REQUEST")
	delete(w.env, "SLURM_JOB_ID")
	require.Equal(t, 0, exitStatus(w.run("prolog")))
}

// fakeScontrol is an scontrol that appends its arguments, one call a line, to a file.
func fakeScontrol(t *testing.T) (bin, calls string) {
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	bin = filepath.Join(dir, "scontrol")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\nprintf '%s|' \"$@\" >>"+calls+"\necho >>"+calls+"\n"), 0o755))
	return bin, calls
}

func readCalls(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// When the prolog fails, the job's user is told why: scontrol notify (srun and salloc print it) and, in place of
// job_submit.lua's copy of the request, the job's comment (scontrol show job, squeue %k). A user's own comment is
// never replaced; once a later run is served, the comment holds the request again.
func TestPrologTellsTheUserWhy(t *testing.T) {
	bin, calls := fakeScontrol(t)
	w := newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeFailed, Reason: "unknown pool \"nope\"\nforged"}))
	w.scontrol = bin
	w.env["SLURM_JOB_COMMENT"] = "juice:v1:pool=nope,gpus=1"
	require.Equal(t, 1, exitStatus(w.run("prolog")))
	msg := `juice: cannot get GPUs: unknown pool "nope" forged`
	require.Equal(t, []string{"notify|42|" + msg + "|", "update|jobid=42|comment=" + msg + "|"}, readCalls(t, calls))

	// The wait runs out while the pool is full: the reason says so, and for how long.
	bin, calls = fakeScontrol(t)
	w = newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeWaiting, State: "waiting", Reason: "session s1 queued at the Juice Controller"}))
	w.scontrol = bin
	require.Equal(t, 1, exitStatus(w.run("prolog", "--prolog-wait", "300ms")))
	got := readCalls(t, calls)
	require.Len(t, got, 2)
	require.Equal(t, "notify|42|juice: no GPUs within 300ms: session s1 queued at the Juice Controller (the pool has no free GPU that fits)|", got[0])

	// The controller unreachable: said so.
	bin, calls = fakeScontrol(t)
	w = newHookWorld(t, status(http.StatusServiceUnavailable, "not ready"))
	w.scontrol = bin
	require.Equal(t, 1, exitStatus(w.run("prolog", "--prolog-wait", "300ms")))
	require.Contains(t, readCalls(t, calls)[0], "notify|42|juice: no GPUs within 300ms: the juice-slurm controller is unreachable")

	// The user's own comment stays; so does every comment when the controller trusts comments.
	for _, tc := range []struct {
		comment string
		extra   []string
	}{{"my own words", nil}, {"", []string{"--trust-comment"}}} {
		bin, calls = fakeScontrol(t)
		w = newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeFailed, Reason: "no"}))
		w.scontrol = bin
		w.env["SLURM_JOB_COMMENT"] = tc.comment
		require.Equal(t, 1, exitStatus(w.run("prolog", tc.extra...)))
		got := readCalls(t, calls)
		require.Len(t, got, 1, "only the notify: %v", got)
		require.True(t, strings.HasPrefix(got[0], "notify|"))
	}

	// Served after a failed run: the comment is the request again; a served first run changes nothing.
	bin, calls = fakeScontrol(t)
	w = newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"}))
	w.scontrol = bin
	w.env["SLURM_JOB_COMMENT"] = "juice: no GPUs within 4m0s: ..."
	require.Equal(t, 0, exitStatus(w.run("prolog")))
	require.Equal(t, []string{"update|jobid=42|comment=juice:v1:pool=test,gpus=1|"}, readCalls(t, calls))
	bin, calls = fakeScontrol(t)
	w = newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"}))
	w.scontrol = bin
	w.env["SLURM_JOB_COMMENT"] = "juice:v1:pool=test,gpus=1"
	require.Equal(t, 0, exitStatus(w.run("prolog")))
	require.Empty(t, readCalls(t, calls))
}

// The hook reads the one settings file every command shares, knowing the file's names from settings.Names (it
// does not link the other commands): the controller's settings in it are left alone, the hook's are taken, and a
// name no command knows fails a Juice job's prolog.
func TestHookReadsTheSharedSettingsFile(t *testing.T) {
	w := newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"}))
	conf := filepath.Join(t.TempDir(), "juice-slurm.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`# the controller's, then the hook's
cluster = c9
database-url = postgres://juice@db1/juice
poll-interval = 5s
hook-url = %s
hook-ca = %s
hook-secret = %s
state-dir = %s
prolog-wait = 2s
`, w.url, w.ca, w.secret, w.stateDir)), 0o644))
	err := Main(context.Background(), "prolog", []string{"--config", conf, "--scontrol="}, func(k string) string { return w.env[k] }, &w.stderr)
	require.NoError(t, err, w.stderr.String())
	got, err := os.ReadFile(filepath.Join(w.stateDir, "42.1.session"))
	require.NoError(t, err)
	require.Equal(t, sealed, got)

	require.NoError(t, os.WriteFile(conf, []byte("hook-urll = https://x\n"), 0o644))
	err = Main(context.Background(), "prolog", []string{"--config", conf, "--scontrol="}, func(k string) string { return w.env[k] }, &w.stderr)
	require.ErrorContains(t, err, `unknown setting "hook-urll"`)
	require.Equal(t, 1, w.api.calls, "no call with a broken settings file")
}
