package main

// The soak (issue 25 item 5), with -soak DURATION: one controller process under mixed load for the whole duration
// (up to three jobs every two seconds while fewer than -soak-queue of them wait or run; one in ten cancelled as it
// waits),
// with juice-sim's faults, slurmrestd stopped for 15 s every ten minutes and PostgreSQL restarted half-way. The
// controller is not killed: what is watched is one process over time. Every -sample it records the controller's
// RSS, open files and goroutines (its /metrics), its PostgreSQL connections and the sessions open at the Juice side;
// at the end it checks as the chaos run does (no session leaked or doubled, every job completed or cancelled on
// purpose), writes the series with each one's slope, and fails unless each is flat.

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

var (
	soakFor    time.Duration // -soak
	soakSample time.Duration // -sample
	soakQueue  int           // -soak-queue
)

// soakBatch is how many jobs the soak submits at most every two seconds.
const soakBatch = 3

// A sample is one look at the controller and its surroundings.
type sample struct {
	at                                 time.Duration // since the soak began
	rssMiB                             float64
	fds, goroutines, pgConns, sessions int
	queued                             int // the soak's jobs Slurm still lists as pending or running
}

func (c *chaos) soak(ctx context.Context, out string) error {
	if legacy != nil {
		return fmt.Errorf("-soak runs against juice-sim (its sessions are sampled through its admin API)")
	}
	env := c.env
	start := time.Now()
	metrics, err := metricsURL(hookAddr)
	if err != nil {
		return err
	}
	db, err := pgx.Connect(ctx, c.dbURL)
	if err != nil {
		return err
	}
	defer func() { db.Close(context.Background()) }()
	c.cancelled, c.ended = map[uint32]bool{}, map[uint32]*slurmrest.Job{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	restRun := filepath.Join(env.RunDir(), "slurmrestd.pid")
	var (
		ids         []uint32
		samples     []sample
		pgRestarted bool
		restStops   int
		restBack    time.Time
		lastEnds    time.Time
	)
	nextSample, nextRest := start, start.Add(10*time.Minute)
	logf("soak for %s: up to %d jobs every 2 s while fewer than %d wait or run; a sample every %s", soakFor, soakBatch, soakQueue, soakSample)
	for time.Since(start) < soakFor && ctx.Err() == nil {
		queued := countQueued(ctx, env)
		if time.Since(lastEnds) > 10*time.Second {
			c.recordEnds(ctx)
			lastEnds = time.Now()
		}
		if !time.Now().Before(nextSample) {
			s, err := c.takeSample(ctx, metrics, &db, time.Since(start))
			if err != nil {
				return err
			}
			s.queued = queued
			samples = append(samples, s)
			logf("sample %d: RSS %.1f MiB, %d files, %d goroutines, %d PostgreSQL connections, %d sessions, %d jobs queued",
				len(samples), s.rssMiB, s.fds, s.goroutines, s.pgConns, s.sessions, s.queued)
			nextSample = nextSample.Add(soakSample)
		}
		for i := 0; i < soakBatch && queued >= 0 && queued+i < soakQueue; i++ {
			args := []string{"--parsable", "--requeue", "-o", "/dev/null", "--job-name", "soak", "--juice-pool=test"}
			switch rng.IntN(3) {
			case 0:
				args = append(args, "--juice-gpu-count=2")
			case 1:
				args = append(args, "--juice-vram=1.5")
			}
			cancel := rng.IntN(10) == 0
			if cancel {
				args = append(args, "--begin=now+30") // it waits: cancelled while pending
			}
			args = append(args, "--wrap", fmt.Sprintf("test -n \"$JUICE_SESSION_ID\" || exit 42; sleep %d", 1+rng.IntN(5)))
			id, err := sbatch(ctx, env, args)
			if err != nil {
				logf("%v (slurmrestd or slurmctld busy: tried again)", err)
			} else {
				ids = append(ids, id)
				if cancel {
					c.cancelled[id] = true
					wait := time.Duration(500+rng.IntN(3000)) * time.Millisecond
					go func() {
						time.Sleep(wait)
						_ = env.Command(ctx, "scancel", strconv.Itoa(int(id))).Run()
					}()
				}
			}
		}
		if !pgRestarted && legacy == nil && time.Since(start) > soakFor/2 {
			logf("restarting PostgreSQL")
			if err := c.restartPostgres(); err != nil {
				return err
			}
			pgRestarted = true
		}
		if restBack.IsZero() && time.Now().After(nextRest) {
			logf("stopping slurmrestd for 15s")
			testbed.StopPidFile(restRun)
			restStops++
			restBack, nextRest = time.Now().Add(15*time.Second), nextRest.Add(10*time.Minute)
		}
		if !restBack.IsZero() && time.Now().After(restBack) {
			if err := c.bedUp("slurmrestd again"); err != nil {
				return err
			}
			restBack = time.Time{}
		}
		time.Sleep(2 * time.Second)
	}
	if !restBack.IsZero() {
		time.Sleep(time.Until(restBack))
		if err := c.bedUp("slurmrestd again"); err != nil {
			return err
		}
	}
	logf("soak load over after %s: %d jobs (%d cancelled on purpose)", time.Since(start).Round(time.Second), len(ids), len(c.cancelled))
	states, err := c.waitJobs(ctx, ids, start)
	if err != nil {
		return err
	}
	// A last sample with nothing left to do: what stays when the load is gone.
	s, err := c.takeSample(ctx, metrics, &db, time.Since(start))
	if err != nil {
		return err
	}
	samples = append(samples, s)
	verr := c.verify(ctx, ids, states, start, pgRestarted, restStops > 0, 15*time.Second, c.errRate, c.latency, "")
	report, flat := soakReport(samples, soakFor, restStops, pgRestarted)
	fmt.Print("\n" + report)
	if out != "" {
		if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
			return err
		}
	}
	if verr != nil {
		return verr
	}
	if len(flat) > 0 {
		return fmt.Errorf("not flat: %s", strings.Join(flat, "; "))
	}
	fmt.Println("\nsoak: PASS: every series flat, 0 leaked sessions, 0 runs with two sessions")
	return nil
}

// restartPostgres restarts the host test bed's PostgreSQL (as the chaos run does after its second kill).
func (c *chaos) restartPostgres() error {
	dir := c.env.Get("JUICE_TESTBED_DIR")
	if out, err := exec.Command("setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups",
		"/usr/lib/postgresql/15/bin/pg_ctl", "-D", filepath.Join(dir, "pg/data"),
		// -l: the restarted server must not inherit our pipe, or waiting for the output never ends.
		"-l", filepath.Join(dir, "log/pg/postgres.log"), "-m", "fast", "-w", "restart").CombinedOutput(); err != nil {
		return fmt.Errorf("restart PostgreSQL: %v: %s", err, out)
	}
	if out, err := exec.Command("bash", filepath.Join(c.repo, "test/testbed.sh"), "up").CombinedOutput(); err != nil {
		return fmt.Errorf("test bed after the PostgreSQL restart: %v: %s", err, out)
	}
	return nil
}

// metricsURL is the controller's /metrics: its default metrics listener, the hook API's port + 1000.
func metricsURL(hook string) (string, error) {
	host, port, err := net.SplitHostPort(hook)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", err
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(p+1000)) + "/metrics", nil
}

// takeSample samples; db is the sampling connection, dialled again when a restart of PostgreSQL broke it.
func (c *chaos) takeSample(ctx context.Context, metrics string, db **pgx.Conn, at time.Duration) (sample, error) {
	s := sample{at: at}
	m, err := scrape(ctx, metrics, "process_resident_memory_bytes", "process_open_fds", "go_goroutines")
	if err != nil {
		return s, fmt.Errorf("the controller's metrics: %w", err)
	}
	s.rssMiB, s.fds, s.goroutines = m[0]/(1<<20), int(m[1]), int(m[2])
	// The controller's connections: every other backend on its database (this one's own is left out; the run's
	// store is idle while the soak goes on). A restart of PostgreSQL broke this connection: dial again.
	q := `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`
	if err := (*db).QueryRow(ctx, q).Scan(&s.pgConns); err != nil {
		fresh, derr := pgx.Connect(ctx, c.dbURL)
		if derr != nil {
			return s, fmt.Errorf("count PostgreSQL connections: %v; dial again: %w", err, derr)
		}
		(*db).Close(ctx)
		*db = fresh
		if err := (*db).QueryRow(ctx, q).Scan(&s.pgConns); err != nil {
			return s, fmt.Errorf("count PostgreSQL connections: %w", err)
		}
	}
	sessions, err := simSessions()
	if err != nil {
		return s, fmt.Errorf("the simulator's sessions: %w", err)
	}
	for _, x := range sessions {
		if !x.Ended() {
			s.sessions++
		}
	}
	return s, nil
}

// scrape reads gauges from a Prometheus text page, in the order named.
func scrape(ctx context.Context, url string, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	got := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			got[name] = f
		}
	}
	out := make([]float64, len(names))
	for i, n := range names {
		v, ok := got[n]
		if !ok {
			return nil, fmt.Errorf("%s: no %s", url, n)
		}
		out[i] = v
	}
	return out, nil
}

// countQueued is how many of the soak's jobs Slurm lists as pending or running; -1 when squeue cannot say.
func countQueued(ctx context.Context, env testbed.Env) int {
	out, err := env.Command(ctx, "squeue", "-h", "-n", "soak", "-t", "PD,CF,R,CG", "-o", "%i").Output()
	if err != nil {
		return -1
	}
	return len(strings.Fields(string(out)))
}

// soakReport writes the series and each one's slope (least squares, per hour), and names the series that are not
// flat: the mean of the last quarter of the load's samples against the first quarter's, past a warm-up sample,
// within a margin each (what a steady load may vary by, not a leak). The last sample, taken with the load gone,
// must show no session left open.
func soakReport(samples []sample, dur time.Duration, restStops int, pgRestarted bool) (string, []string) {
	var b strings.Builder
	fmt.Fprintf(&b, "## Soak (%s)\n\nOne controller process for %s under mixed load (juice-sim with 20%% errors and 200 ms latency; "+
		"slurmrestd stopped %d times for 15 s; PostgreSQL restarted: %v), a sample every %s; the last sample taken once "+
		"every job had ended.\n\n", time.Now().Format(time.DateTime), dur, restStops, pgRestarted, soakSample)
	b.WriteString("| minute | RSS MiB | open files | goroutines | PostgreSQL connections | Juice sessions open | jobs queued |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "| %.1f | %.1f | %d | %d | %d | %d | %d |\n", s.at.Minutes(), s.rssMiB, s.fds, s.goroutines, s.pgConns, s.sessions, s.queued)
	}
	load := samples
	if len(load) > 1 {
		load = load[:len(load)-1] // the last one is taken with the load gone
	}
	if len(load) > 2 {
		load = load[1:] // warm-up
	}
	type series struct {
		name   string
		get    func(sample) float64
		margin func(first float64) float64
	}
	all := []series{
		{"RSS MiB", func(s sample) float64 { return s.rssMiB }, func(f float64) float64 { return 0.25*f + 8 }},
		{"open files", func(s sample) float64 { return float64(s.fds) }, func(float64) float64 { return 10 }},
		{"goroutines", func(s sample) float64 { return float64(s.goroutines) }, func(f float64) float64 { return 0.25*f + 20 }},
		{"PostgreSQL connections", func(s sample) float64 { return float64(s.pgConns) }, func(float64) float64 { return 3 }},
		{"Juice sessions open", func(s sample) float64 { return float64(s.sessions) }, func(f float64) float64 { return 0.5*f + 5 }},
	}
	var notFlat []string
	b.WriteString("\n| series | slope per hour | first quarter mean | last quarter mean | allowed | flat |\n|---|---:|---:|---:|---:|---|\n")
	for _, sr := range all {
		q := max(len(load)/4, 1)
		first, last := mean(load[:q], sr.get), mean(load[len(load)-q:], sr.get)
		allowed := first + sr.margin(first)
		ok := last <= allowed
		if !ok {
			notFlat = append(notFlat, fmt.Sprintf("%s from %.1f to %.1f (allowed %.1f)", sr.name, first, last, allowed))
		}
		fmt.Fprintf(&b, "| %s | %+.2f | %.1f | %.1f | %.1f | %v |\n", sr.name, slope(load, sr.get), first, last, allowed, ok)
	}
	if end := samples[len(samples)-1]; end.sessions != 0 {
		notFlat = append(notFlat, fmt.Sprintf("%d sessions open with the load gone", end.sessions))
	}
	return b.String(), notFlat
}

func mean(ss []sample, get func(sample) float64) float64 {
	sum := 0.0
	for _, s := range ss {
		sum += get(s)
	}
	return sum / float64(len(ss))
}

// slope is the least-squares slope of the series, per hour.
func slope(ss []sample, get func(sample) float64) float64 {
	if len(ss) < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for _, s := range ss {
		x, y := s.at.Hours(), get(s)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	n := float64(len(ss))
	d := n*sxx - sx*sx
	if math.Abs(d) < 1e-12 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// recordEnds keeps the end of every job slurmctld lists as finished: over an hour slurmctld purges finished jobs
// (MinJobAge), so their ends are read while the load runs, not only after it. A listing that fails is skipped;
// the next one, 10 s later, sees the same ends.
func (c *chaos) recordEnds(ctx context.Context) {
	list, err := c.slurm.ListJobs(ctx, time.Time{})
	if err != nil {
		return
	}
	for i := range list.Jobs {
		if j := &list.Jobs[i]; j.State.IsFinished() {
			c.ended[j.ID] = j
		}
	}
}
