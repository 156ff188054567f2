//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// The pools as Slurm licenses (issue 23): a job the pool cannot serve now waits in Slurm's queue, PENDING with
// Reason=Licenses, instead of being given nodes that sit in CONFIGURING while its prolog waits and then fail. Each
// test fails (never skips) on a bed without accounting: every release's bed has slurmdbd.

func requireLicensed(t *testing.T) {
	t.Helper()
	require.True(t, licensed(), "the test bed has no accounting (JUICE_TESTBED_ACCOUNTING): the pools are no Slurm licenses")
}

// licenseTotal is the Total slurmctld shows for pool's license (-1 when it shows none).
func licenseTotal(t *testing.T, pool string) int {
	t.Helper()
	out, _ := slurm(t, 10*time.Second, "scontrol", "show", "lic", "juice_"+pool+"@juice")
	m := regexp.MustCompile(`\bTotal=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// staleLicense sets pool's license count in slurmdbd to count behind the controller's back, as when an agent died
// since the last sync, and puts back the count the controller keeps when the test ends (the controller writes
// only when its own figure changes, so it does not undo this meanwhile). Slurm then starts a job the pool cannot
// serve, and the prolog's wait, the second line, is what the user meets.
func staleLicense(t *testing.T, pool string, count int) {
	t.Helper()
	requireLicensed(t)
	was := licenseTotal(t, pool)
	set := func(n int) {
		out, code := sh(t, 30*time.Second, world.env.Get("JUICE_TESTBED_SACCTMGR"), "-i", "modify", "resource",
			"name=juice_"+pool, "server=juice", "set", fmt.Sprintf("count=%d", n))
		require.Equal(t, 0, code, "sacctmgr: %s", out)
		waitFor(t, 30*time.Second, fmt.Sprintf("slurmctld shows juice_%s@juice with %d", pool, n), func() bool { return licenseTotal(t, pool) == n })
	}
	set(count)
	t.Cleanup(func() { set(was) })
}

// grepLog returns the last 20 lines of the file at path that contain word.
func grepLog(path, word string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var hits []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, word) {
			hits = append(hits, l)
		}
	}
	return strings.Join(hits[max(len(hits)-20, 0):], "\n")
}

// pendsFor waits until job is PENDING for reason.
func pendsFor(t *testing.T, job uint32, reason string, within time.Duration) {
	t.Helper()
	var last *slurmrest.Job
	waitFor(t, within, fmt.Sprintf("job %d pending for %s", job, reason), func() bool {
		last = getJob(t, job)
		return last.State == slurmrest.StatePending && last.StateReason == reason
	})
}

// (a) and (b): an srun whose pool is full waits in Slurm's queue for the pool's license (squeue says Licenses), is
// never cancelled, lets a plain job run on the nodes meanwhile, and runs with its session once the holder ends.
func TestSrunWaitsForItsPoolsLicense(t *testing.T) {
	requireLicensed(t)
	s := openStore(t)
	waitFor(t, 60*time.Second, "pool small's license counts its one GPU", func() bool { return licenseTotal(t, "small") == 1 })
	// The holder runs until the test lets it go (scancel): the srun must not start before.
	holder := sbatch(t, "--juice-pool=small", "-o", "/dev/null", "--wrap", "sleep 300")
	defer slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(holder)))
	waitFor(t, 60*time.Second, "the holder runs", func() bool { return getJob(t, holder).State == slurmrest.StateRunning })

	name := fmt.Sprintf("e2e-lic-%d", time.Now().UnixNano()%1e6)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srun := world.env.Command(ctx, "srun", "--job-name="+name, "--juice-pool=small", "printenv", "JUICE_SESSION_ID")
	srun.Dir = os.TempDir()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() { out, err := srun.CombinedOutput(); done <- result{string(out), err} }()

	var id uint32
	waitFor(t, 60*time.Second, "the srun pends for its license", func() bool {
		q, _ := slurm(t, 10*time.Second, "squeue", "-h", "-n", name, "-o", "%i %T %r")
		f := strings.Fields(q)
		if len(f) != 3 {
			return false
		}
		n, _ := strconv.ParseUint(f[0], 10, 32)
		id = uint32(n)
		return f[1] == "PENDING" && f[2] == "Licenses"
	})
	// A plain job is not held up: the nodes are free for it.
	out, code := slurm(t, 60*time.Second, "srun", "-n1", "true")
	require.Equal(t, 0, code, "a plain srun while the Juice one waits: %s", out)
	require.Equal(t, slurmrest.StatePending, getJob(t, id).State, "the Juice srun started while its pool was full")
	slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(holder)))

	r := <-done
	require.NoError(t, r.err, "the srun once the holder ended: %s", r.out)
	require.Regexp(t, `(?m)^[0-9a-f-]{36}$`, r.out)
	j := waitJobDone(t, id, time.Minute)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.Equal(t, 0, j.Run, "the srun's job was requeued")
	waitFor(t, 30*time.Second, "its reservation ends", func() bool { return stateOf(t, s, run(id, 0)).Final() })
	noLiveSession(t, s, id)
}

// (e): two pending jobs, each holding a ready reservation for half the pool, both start: the license counts the
// sessions of this cluster's runs as the pool's, so a pending job's own reservation never keeps it from starting.
// Their begin time is past one sync of the licenses (every 30 s) after both sessions are ready.
func TestTwoHalfPoolReservationsBothStart(t *testing.T) {
	requireLicensed(t)
	s := openStore(t)
	waitFor(t, 60*time.Second, "pool test's license counts its 8 GPUs", func() bool { return licenseTotal(t, "test") == 8 })
	var jobs []uint32
	for i := 0; i < 2; i++ {
		jobs = append(jobs, sbatch(t, "--begin=now+45", "--juice-pool=test", "--juice-gpu-count=4", "-o", "/dev/null", "--wrap", "sleep 2"))
	}
	for _, job := range jobs {
		defer slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(job)))
		waitFor(t, 40*time.Second, fmt.Sprintf("job %d reserved while it waits for its begin time", job), func() bool {
			return stateOf(t, s, run(job, 0)) == reconcile.StateReady
		})
	}
	require.Equal(t, 8, licenseTotal(t, "test"), "our own reservations were taken off the license")
	for _, job := range jobs {
		j := waitJobDone(t, job, 2*time.Minute)
		require.Equal(t, slurmrest.StateCompleted, j.State, "job %d", job)
		require.Equal(t, 0, j.Run, "job %d was requeued", job)
		noLiveSession(t, s, job)
	}
	require.Equal(t, 8, licenseTotal(t, "test"))
}

// (d): sessions another Juice client holds in the pool lower what Slurm starts: its GPU comes off the license, a
// Juice job waits for the license meanwhile, and runs once that session ends.
func TestSessionsOfOthersLowerTheLicense(t *testing.T) {
	requireLicensed(t)
	if legacyMode() {
		t.Fatal("run against juice-sim: the legacy controller's whole-agent grants are another test")
	}
	s := openStore(t)
	waitFor(t, 60*time.Second, "pool small's license counts its one GPU", func() bool { return licenseTotal(t, "small") == 1 })
	other, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: world.juiceURL, TokenFile: world.juiceToken})
	require.NoError(t, err)
	ctx := context.Background()
	// Another client's key: no reservation of ours has it.
	sid, err := other.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "small", GPUs: 1})
	require.NoError(t, err)
	cancelled := false
	defer func() {
		if !cancelled {
			_ = other.CancelSession(ctx, sid)
		}
	}()
	waitFor(t, 30*time.Second, "the other client's session is active", func() bool {
		sess, err := other.GetSession(ctx, sid)
		return err == nil && sess.State == juiceapi.StateActive
	})
	// The next sync (every 30 s) sees it.
	for deadline := time.Now().Add(75 * time.Second); licenseTotal(t, "small") != 0; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 75 s: the other client's GPU comes off pool small's license (Total=%d); the controller on licenses:\n%s",
				licenseTotal(t, "small"), grepLog(world.ctlLog, "licens"))
		}
	}
	job := sbatch(t, "--juice-pool=small", "-o", "/dev/null", "--wrap", "true")
	defer slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(job)))
	pendsFor(t, job, "Licenses", 30*time.Second)
	require.NoError(t, other.CancelSession(ctx, sid))
	cancelled = true
	j := waitJobDone(t, job, 2*time.Minute)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.Equal(t, 0, j.Run, "the job was requeued")
	require.Equal(t, 1, licenseTotal(t, "small"))
	noLiveSession(t, s, job)
}

// (g), Slurm's side: sacct records each Juice job's license use, the GPUs its request takes (a VRAM slice 1).
func TestSacctShowsTheLicenseUse(t *testing.T) {
	requireLicensed(t)
	for _, c := range []struct {
		ask  []string
		want string
	}{
		{[]string{"--juice-pool=test", "--juice-gpu-count=2"}, "license/juice_test@juice=2"},
		{[]string{"--juice-pool=test", "--juice-vram=8"}, "license/juice_test@juice=1"},
	} {
		job := sbatch(t, append(c.ask, "-o", "/dev/null", "--wrap", "true")...)
		require.Equal(t, slurmrest.StateCompleted, waitJobDone(t, job, 90*time.Second).State)
		var out string
		waitFor(t, 30*time.Second, "sacct knows the job", func() bool {
			out, _ = slurm(t, 10*time.Second, "sacct", "-n", "-X", "-P", "-j", strconv.Itoa(int(job)), "-o", "alloctres")
			return strings.Contains(out, "license/")
		})
		require.Contains(t, strings.Split(strings.TrimSpace(out), ","), c.want, "job %d (%v): %s", job, c.ask, out)
	}
}

// (g): juice-slurm report charges what sacct shows: for each run Slurm ran, the license count (its GPUs, a VRAM
// slice 1) × its elapsed time in Slurm, summed per account. The controller records each run's start and end as
// slurmrestd gives them (the poller), and sacct's Elapsed is the same end less the same start, so the two agree to
// the second. (sreport reads the same job records after slurmdbd's hourly rollup, which a test cannot wait for.)
// Account chem is this test's alone.
func TestReportChargesWhatSacctShows(t *testing.T) {
	requireLicensed(t)
	since := time.Now().Add(-2 * time.Second).Truncate(time.Second)
	var jobs []uint32
	for _, ask := range [][]string{
		{"--juice-pool=test", "--juice-gpu-count=2", "--wrap", "sleep 3"},
		{"--juice-pool=test", "--juice-vram=8", "--wrap", "sleep 2"},
		{"--juice-pool=test", "--wrap", "sleep 1"},
	} {
		jobs = append(jobs, sbatch(t, append([]string{"--account=chem", "-o", "/dev/null"}, ask...)...))
	}
	for _, job := range jobs {
		require.Equal(t, slurmrest.StateCompleted, waitJobDone(t, job, 2*time.Minute).State, "job %d", job)
	}

	// sacct: license/juice_test@juice=N in AllocTRES × ElapsedRaw (seconds), per job.
	var sacctSeconds float64
	for _, job := range jobs {
		var out string
		waitFor(t, 30*time.Second, fmt.Sprintf("sacct knows job %d's end", job), func() bool {
			out, _ = slurm(t, 10*time.Second, "sacct", "-n", "-X", "-P", "-j", strconv.Itoa(int(job)), "-o", "alloctres,elapsedraw,state")
			return strings.Contains(out, "license/") && strings.Contains(out, "COMPLETED")
		})
		fields := strings.Split(strings.TrimSpace(out), "|")
		require.Len(t, fields, 3, out)
		elapsed, err := strconv.Atoi(fields[1])
		require.NoError(t, err, out)
		m := regexp.MustCompile(`license/juice_test@juice=(\d+)`).FindStringSubmatch(fields[0])
		require.NotNil(t, m, out)
		n, _ := strconv.Atoi(m[1])
		require.Positive(t, elapsed, "job %d: %s", job, out)
		sacctSeconds += float64(n * elapsed)
	}

	// sreport's job report (from the job table, not the hourly rollup the cluster reports wait for) charges the same,
	// where it reports the current hour at all.
	if secs, window, ok := sreportSeconds(t, since, jobs); ok {
		require.Equal(t, sacctSeconds, secs, "sacct against sreport (%s)", window)
	} else {
		require.True(t, strings.HasPrefix(world.env.Release(), "24.11"),
			"only sreport of 24.11 is known to end its window before the current hour: %s, window %s", world.env.Release(), window)
		t.Logf("Slurm %s: sreport's job report ends at the last full hour (%s): compared with sacct only", world.env.Release(), window)
	}

	// The poller records each run's end once it sees the job ended (often after the epilog released the run).
	s := openStore(t)
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = int64(j)
	}
	waitFor(t, 60*time.Second, "the controller has Slurm's end of each run", func() bool {
		var n int
		require.NoError(t, s.Pool().QueryRow(context.Background(),
			`SELECT count(DISTINCT job_id) FROM juice_reservations WHERE job_id = ANY($1) AND job_end IS NOT NULL`, ids).Scan(&n))
		return n == len(jobs)
	})
	type row struct {
		Key             string  `json:"key"`
		ChargedRuns     int     `json:"charged_runs"`
		ChargedGPUHours float64 `json:"charged_gpu_hours"`
	}
	var chem row
	var out string
	waitFor(t, 60*time.Second, "juice-slurm report charges the three runs", func() bool {
		var code int
		out, code = slurmless(t, filepath.Join(world.repo, "bin/juice-slurm"), "report", "--config=", "--database-url", world.dbURL,
			"--cluster", world.env.Cluster(), "--policy", world.env.PolicyFile(), "--since", since.UTC().Format(time.RFC3339),
			"--by", "account", "--format", "json")
		require.Equal(t, 0, code, out)
		var rep struct{ Rows []row }
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		chem = row{}
		for _, r := range rep.Rows {
			if r.Key == "chem" {
				chem = r
			}
		}
		return chem.ChargedRuns == len(jobs)
	})
	require.InDelta(t, sacctSeconds, chem.ChargedGPUHours*3600, 1e-6, "sacct: %v GPU-seconds; juice-slurm report: %s", sacctSeconds, out)
}

// (c): a burst of 30 Juice jobs on a pool of one GPU. Slurm starts them one at a time as the pool's license
// frees, so none waits in its prolog for GPUs another job holds: every one completes at its first run (no prolog
// gave up, none requeued) and no reservation fails. With the licenses off, 16 start at once and the test bed's
// 15 s prolog wait requeues those the pool cannot serve in time.
func TestBurstOnAFullPoolNeverRequeues(t *testing.T) {
	requireLicensed(t)
	s := openStore(t)
	waitFor(t, 60*time.Second, "pool small's license counts its one GPU", func() bool { return licenseTotal(t, "small") == 1 })
	const n = 30
	ids := make([]uint32, n)
	outs := make([]string, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() { // at once, as users do; no t.Fatal off the test's goroutine: each outcome is checked below
			defer wg.Done()
			for i := range next {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				out, err := world.env.Command(ctx, "sbatch", "--parsable", "--juice-pool=small", "-o", "/dev/null", "--wrap", "true").CombinedOutput()
				cancel()
				outs[i] = string(out)
				if id, perr := strconv.ParseUint(strings.TrimSpace(strings.Split(string(out), ";")[0]), 10, 32); err == nil && perr == nil {
					ids[i] = uint32(id)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Cleanup(func() {
		for _, id := range ids {
			if id != 0 {
				slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(id)))
			}
		}
	})
	for i, id := range ids {
		require.NotZero(t, id, "sbatch %d of %d failed: %s", i+1, n, outs[i])
	}
	for _, id := range ids {
		j := waitJobDone(t, id, 5*time.Minute)
		require.Equal(t, slurmrest.StateCompleted, j.State, "job %d", id)
		require.Zero(t, j.Run, "job %d was requeued: its prolog gave up waiting for the pool", id)
		rs, err := s.ForJob(context.Background(), id)
		require.NoError(t, err)
		for _, r := range rs {
			require.NotEqual(t, reconcile.StateFailed, r.Status.State, "job %d: %s", id, r.Status.FailReason)
		}
	}
}

// sreportSeconds is what sreport's job report charged pool test's license for jobs, submitted since: its
// TRES-seconds summed over the job-size columns (those columns group by CPUs; every job here has one). ok is false
// when sreport's window ends before the jobs ran: sreport of 24.11 ends a job report that starts in an earlier hour
// at the last full hour, whatever end= says (seen on the chroot bed at 03:16: start=02:00 gave 02:00-02:59:59, and
// start=03:00 a minute later 03:00-03:59:59); 22.05 and 26.05 end it at the end of the current hour. So on 24.11 a
// test that began in the hour before is compared with sacct only.
//
// sreport of 22.05 (seen on the host bed) leaves the last id of a Jobs= list of two or more out, and a list of one
// out altogether (the report then covers every job): the list ends with its first id again, which is harmless where
// sreport reads the whole list.
func sreportSeconds(t *testing.T, since time.Time, jobs []uint32) (seconds float64, window string, ok bool) {
	t.Helper()
	ids := make([]string, 0, len(jobs)+1)
	for _, j := range append(jobs, jobs[0]) {
		ids = append(ids, strconv.Itoa(int(j)))
	}
	const layout = "2006-01-02T15:04:05"
	out, code := slurm(t, 30*time.Second, "sreport", "-P", "-t", "seconds", "-T", "license/juice_test@juice",
		"job", "SizesByAccount", "start="+since.UTC().Truncate(time.Hour).Format(layout),
		"end="+time.Now().UTC().Add(time.Hour).Format(layout), "jobs="+strings.Join(ids, ","))
	require.Equal(t, 0, code, out)
	m := regexp.MustCompile(`Job Sizes (\S+) - (\S+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "sreport's window: %s", out)
	end, err := time.ParseInLocation(layout, m[2], time.UTC)
	require.NoError(t, err, out)
	if end.Before(time.Now().UTC().Truncate(time.Second).Add(-time.Second)) { // the jobs ended moments ago
		return 0, m[1] + " - " + m[2], false
	}
	var head []string
	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "|")
		switch {
		case len(f) < 3:
		case f[0] == "Cluster":
			head = f
		default:
			require.Len(t, f, len(head), "a row as long as the header: %s", out)
			rows++
			for i, v := range f {
				if !strings.HasSuffix(head[i], " TRES") { // the size groups; not Total nor % of cluster
					continue
				}
				n, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err, out)
				seconds += n
			}
		}
	}
	require.Equal(t, 1, rows, "one account's row: %s", out)
	return seconds, m[1] + " - " + m[2], true
}
