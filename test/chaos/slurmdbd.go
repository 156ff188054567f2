package main

// slurmdbd's part of a chaos run (issue 23): on a bed with accounting the controller keeps the pools' Slurm
// licenses, and slurmdbd, which serves them, is restarted after the first kill of the controller and, once
// slurmrestd is back from its outage, stopped for -dbd-outage. Another Juice
// client's session holds GPUs of pool test from the start, so the license starts below the pool's size; it is
// cancelled as slurmdbd stops, so the controller must write the new count while slurmdbd cannot take it, and
// the license must reach the pool's full size once slurmdbd is back.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// licensePool is the pool the chaos jobs use, and the one whose license is checked.
const licensePool = "test"

type dbdChaos struct {
	outage    time.Duration
	juice     *juiceapi.HTTPClient
	full      int    // the GPUs of the pool's active agents
	foreign   string // the other client's session, until cancelled
	held      int    // the GPUs it holds
	start     int    // the license while it held them
	restarted bool
	stopped   bool
	back      time.Time     // when slurmdbd is to be started again; zero when it runs
	cameBack  time.Time     // when it was started again after the outage (the bed's "up" waits until it answers)
	settled   time.Duration // from slurmdbd's return to the license's full size
	failures  int           // license sync failures the controller logged
	recovered int           // and times it logged that the sync works again
}

// accounting reports whether the bed has slurmdbd (JUICE_TESTBED_ACCOUNTING): every bed has, since issue 23.
func (c *chaos) accounting() bool { return c.env.Get("JUICE_TESTBED_ACCOUNTING") == "1" }

// licenseArgs are the controller's flags that keep the licenses, as the bed's own controller does.
func (c *chaos) licenseArgs() []string {
	if !c.accounting() {
		return nil
	}
	return []string{"--licenses=on", "--sacctmgr", c.env.Get("JUICE_TESTBED_SACCTMGR")}
}

// holdForeign has another Juice client take GPUs of the pool before the controller starts, and waits until the
// session holds them: the controller's first license sync must leave them out.
func (c *chaos) holdForeign(ctx context.Context, juiceURL, tokenFile string) error {
	cfg := juiceapi.HTTPConfig{BaseURL: juiceURL, TokenFile: tokenFile, IdempotentRequests: legacy == nil}
	if legacy != nil {
		pools, err := juiceapi.ParsePools(legacy.Get("JUICE_LEGACY_POOLS"))
		if err != nil {
			return fmt.Errorf("JUICE_LEGACY_POOLS: %w", err)
		}
		cfg.Pools = pools
	}
	cl, err := juiceapi.NewHTTPClient(cfg)
	if err != nil {
		return err
	}
	c.dbd.juice = cl
	key := uuid.New()
	err = retry(ctx, time.Minute, "another client's session in pool "+licensePool, func() error {
		id, err := cl.RequestSession(ctx, key, juiceapi.SessionRequest{PoolID: licensePool, GPUs: 2})
		c.dbd.foreign = id
		return err
	})
	if err != nil {
		return err
	}
	return retry(ctx, time.Minute, "the other client's session "+c.dbd.foreign+" holds its GPUs", func() error {
		view, err := juiceapi.WalkPool(ctx, cl, licensePool, time.Now())
		if err != nil {
			return err
		}
		full := 0
		for i, a := range view.Agents {
			if a.State == juiceapi.AgentActive {
				full += view.AgentGPUs[i]
			}
		}
		s, _ := view.Find(c.dbd.foreign)
		if s == nil || s.State != juiceapi.StateActive || len(s.GPUs) == 0 {
			return errors.New("not active on an agent yet")
		}
		gpus := map[int]bool{}
		for _, g := range s.GPUs {
			gpus[g.Index] = true
		}
		c.dbd.full, c.dbd.held = full, len(gpus)
		logf("another Juice client holds %d of pool %s's %d GPUs (session %s)", c.dbd.held, licensePool, full, c.dbd.foreign)
		return nil
	})
}

// cancelForeign ends the other client's session (at the end too, should the run stop before the outage).
func (c *chaos) cancelForeign(ctx context.Context) error {
	if c.dbd.juice == nil || c.dbd.foreign == "" {
		return nil
	}
	err := retry(ctx, time.Minute, "cancel the other client's session "+c.dbd.foreign, func() error {
		return c.dbd.juice.CancelSession(ctx, c.dbd.foreign)
	})
	if err == nil {
		c.dbd.foreign = ""
	}
	return err
}

// licenseTotal is slurmctld's Total of the pool's license, -1 when it has none.
func (c *chaos) licenseTotal(ctx context.Context) int {
	out, err := c.env.Command(ctx, "scontrol", "show", "lic", "juice_"+licensePool+"@juice").CombinedOutput()
	m := regexp.MustCompile(`\bTotal=(\d+)`).FindSubmatch(out)
	if err != nil || m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// waitLicense waits until slurmctld shows the pool's license at want.
func (c *chaos) waitLicense(ctx context.Context, want int, within time.Duration, what string) error {
	deadline := time.Now().Add(within)
	for lastLog := time.Now(); ; time.Sleep(500 * time.Millisecond) {
		got := c.licenseTotal(ctx)
		if got == want {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: license juice_%s@juice is %d, not %d, after %s", what, licensePool, got, want, within)
		}
		if time.Since(lastLog) > 10*time.Second {
			logf("waiting for license juice_%s@juice to be %d (%s): it is %d", licensePool, want, what, got)
			lastLog = time.Now()
		}
	}
}

// restartSlurmdbd restarts slurmdbd (after the first kill of the controller).
func (c *chaos) restartSlurmdbd() error {
	if !c.accounting() || c.dbd.outage <= 0 || c.dbd.restarted {
		return nil
	}
	logf("restarting slurmdbd")
	testbed.StopPidFile(filepath.Join(c.env.RunDir(), "slurmdbd.pid"))
	c.dbd.restarted = true
	return c.bedUp("slurmdbd after its restart")
}

// stopSlurmdbd stops slurmdbd for the outage and cancels the other client's session, so the license must change
// while slurmdbd cannot take it. It runs once slurmrestd is back from its own outage: the bed's "up" that brings
// slurmrestd back starts whatever is not running, slurmdbd too.
func (c *chaos) stopSlurmdbd(ctx context.Context) error {
	if !c.accounting() || c.dbd.outage <= 0 || c.dbd.stopped {
		return nil
	}
	logf("stopping slurmdbd for %s; the other client's session ends meanwhile", c.dbd.outage)
	testbed.StopPidFile(filepath.Join(c.env.RunDir(), "slurmdbd.pid"))
	c.dbd.stopped, c.dbd.back = true, time.Now().Add(c.dbd.outage)
	return c.cancelForeign(ctx)
}

// slurmdbdBack starts slurmdbd again once its outage is over.
func (c *chaos) slurmdbdBack() error {
	if c.dbd.back.IsZero() {
		return nil
	}
	time.Sleep(time.Until(c.dbd.back))
	c.dbd.back, c.dbd.cameBack = time.Time{}, time.Now()
	return c.bedUp("slurmdbd after its outage")
}

// bedUp runs the bed's "up", which starts what is not running (slurmdbd here) and waits until it answers.
func (c *chaos) bedUp(what string) error {
	up := c.env.UpCommand(c.repo)
	logf("starting %s", what)
	if out, err := exec.Command(up[0], up[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s (%s): %v: %s", what, strings.Join(up, " "), err, out)
	}
	return nil
}

// checkLicense is the end of the run's slurmdbd part: the license reaches the pool's full size (the other
// client's GPUs given back while slurmdbd was down), and the controller logged the failed syncs of the outage.
func (c *chaos) checkLicense(ctx context.Context) []string {
	if !c.accounting() || c.dbd.outage <= 0 {
		return nil
	}
	var problems []string
	waitErr := c.waitLicense(ctx, c.dbd.full, 2*time.Minute, "after slurmdbd's outage")
	c.dbd.settled = time.Since(c.dbd.cameBack)
	log, err := os.ReadFile(filepath.Join(c.env.LogDir(), "chaos-controller.log"))
	if err != nil {
		return append(problems, err.Error())
	}
	if waitErr != nil {
		// What each side holds, and what the license sync said: the run is over, so this is all there is to
		// find the cause by.
		slurmdbd, _ := c.env.Command(ctx, "sacctmgr", "-n", "-P", "show", "resource", "withclusters").CombinedOutput()
		alive := "running"
		if !running(c.controller.Process.Pid) {
			alive = "not running (it exited on its own: nothing restarts it after the last kill)"
		}
		lines := strings.Split(strings.TrimSpace(string(log)), "\n")
		problems = append(problems, fmt.Sprintf("%v\nslurmdbd holds:\n%s\nthe controller process is %s; its license sync said:\n%s\nits last lines:\n%s",
			waitErr, strings.TrimSpace(string(slurmdbd)), alive, licenseLines(string(log)), strings.Join(lines[max(0, len(lines)-15):], "\n")))
	}
	c.dbd.failures = strings.Count(string(log), "license sync failed")
	c.dbd.recovered = strings.Count(string(log), "license sync works again")
	if c.dbd.stopped && c.dbd.failures == 0 {
		problems = append(problems, "slurmdbd was stopped while the license had to change, yet the controller logged no failed license sync")
	}
	return problems
}

// dbdLines are the report's rows for slurmdbd.
func (c *chaos) dbdLines() string {
	if !c.accounting() || c.dbd.outage <= 0 {
		return "| slurmdbd | left alone (no accounting on the bed, or -dbd-outage 0) |\n"
	}
	return fmt.Sprintf("| slurmdbd restarted, then stopped | %v, %v (%s) |\n"+
		"| license juice_%s@juice | %d with another client's %d GPUs, %d after (the pool's size), right %s after slurmdbd's return |\n"+
		"| license sync failures logged | %d (recovered %d times) |\n",
		c.dbd.restarted, c.dbd.stopped, c.dbd.outage, licensePool, c.dbd.start, c.dbd.held, c.dbd.full,
		c.dbd.settled.Round(time.Second), c.dbd.failures, c.dbd.recovered)
}

// retry calls f until it succeeds or within has passed, logging the last error every 10 s.
func retry(ctx context.Context, within time.Duration, what string, f func() error) error {
	deadline := time.Now().Add(within)
	for lastLog := time.Now(); ; {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if time.Since(lastLog) > 10*time.Second {
			logf("%s: %v; trying again", what, err)
			lastLog = time.Now()
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// licenseLines are the controller's log lines about licenses and leading, the last 40.
func licenseLines(log string) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"logger":"licenses"`) || strings.Contains(l, "lease") || strings.Contains(l, "leader") {
			keep = append(keep, l)
		}
	}
	if len(keep) > 40 {
		keep = keep[len(keep)-40:]
	}
	return strings.Join(keep, "\n")
}

// running reports whether process pid runs: not gone, and not a zombie (which a signal 0 would still reach: the
// runner never waits for a controller it did not kill).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}
