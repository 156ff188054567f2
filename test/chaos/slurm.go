package main

// Slurm's own failures during a chaos run (issue 25 item 2), with -slurm-events: `scontrol reconfigure` after the
// second kill of the controller, munge restarted after the third and slurmctld restarted after the last, each while
// reservations are being made and prologs wait. The bed's "up" brings back what was stopped.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// slurmEvents turns Slurm's own failures on (-slurm-events).
var slurmEvents bool

// slurmEventsSkip names the events of -slurm-events left out (-slurm-events-skip): on Slurm 26.05 `scontrol
// reconfigure` SIGKILLs the waiting PrologSlurmctld processes, takes each job's configuration for complete and
// recovers a batch step it never launched: the jobs stay RUNNING with nothing on their nodes (Slurm's own, docs/
// admin.md section 7). The report says what was left out.
var slurmEventsSkip string

// skipped reports whether -slurm-events-skip names the event.
func skipped(event string) bool {
	for _, e := range strings.Split(slurmEventsSkip, ",") {
		if strings.TrimSpace(e) == event {
			return true
		}
	}
	return false
}

// checkSkip refuses a -slurm-events-skip that names an event there is not.
func checkSkip() error {
	for _, e := range strings.Split(slurmEventsSkip, ",") {
		switch e = strings.TrimSpace(e); e {
		case "", "reconfigure", "munged", "slurmctld":
		default:
			return fmt.Errorf("-slurm-events-skip: no event %q (reconfigure, munged, slurmctld)", e)
		}
	}
	return nil
}

// slurmFailover turns the failover to a backup slurmctld on (-slurm-failover): the bed has two SlurmctldHost lines
// and the backup runs (test/slurmfailover/failover.sh sets both up).
var slurmFailover bool

// slurmEvent runs the Slurm event due after kill k (0-based) of kills, if any, and notes it for the report.
func (c *chaos) slurmEvent(ctx context.Context, k, kills int) error {
	if slurmFailover {
		if err := c.failoverEvent(ctx, k); err != nil {
			return err
		}
	}
	if !slurmEvents {
		return nil
	}
	run := c.env.RunDir()
	switch {
	case k == 1 && skipped("reconfigure"):
		logf("scontrol reconfigure: left out (-slurm-events-skip)")
		c.events = append(c.events, "scontrol reconfigure left out (-slurm-events-skip)")
	case k == 2 && skipped("munged"):
		logf("munged's restart: left out (-slurm-events-skip)")
		c.events = append(c.events, "munged's restart left out (-slurm-events-skip)")
	case k == kills-1 && skipped("slurmctld"):
		logf("slurmctld's restart: left out (-slurm-events-skip)")
		c.events = append(c.events, "slurmctld's restart left out (-slurm-events-skip)")
	case k == 1:
		logf("scontrol reconfigure")
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		out, err := c.env.Command(ctx, "scontrol", "reconfigure").CombinedOutput()
		switch {
		case err != nil && strings.Contains(string(out), "Socket timed out"):
			// 26.05: slurmctld goes ahead with the reconfigure (a restart) but waits for its running scripts first,
			// longer than scontrol waits for its answer. What counts is that it serves again.
			logf("scontrol reconfigure: %s: waiting for slurmctld to answer", strings.TrimSpace(string(out)))
			if err := c.untilSlurmctldServes(ctx, 2*time.Minute); err != nil {
				return fmt.Errorf("scontrol reconfigure timed out (%s) and %w", strings.TrimSpace(string(out)), err)
			}
			c.events = append(c.events, "scontrol reconfigure (scontrol timed out; slurmctld served again)")
		case err != nil:
			return fmt.Errorf("scontrol reconfigure: %v: %s", err, out)
		default:
			c.events = append(c.events, "scontrol reconfigure")
		}
	case k == 2:
		logf("restarting munged")
		testbed.StopPidFile(filepath.Join(run, "munged.pid"))
		if err := c.bedUp("munged after its restart"); err != nil {
			return err
		}
		c.events = append(c.events, "munged restarted")
	case k == kills-1:
		logf("restarting slurmctld")
		testbed.StopPidFile(filepath.Join(run, "slurmctld.pid"))
		if err := c.bedUp("slurmctld after its restart"); err != nil {
			return err
		}
		c.events = append(c.events, "slurmctld restarted")
	}
	return nil
}

// untilSlurmctldServes waits, up to limit, until a slurmctld in control answers squeue (a backup in standby, or a
// slurmctld still restarting, refuses it).
func (c *chaos) untilSlurmctldServes(ctx context.Context, limit time.Duration) error {
	t0 := time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		out, err := c.env.Command(cctx, "squeue", "-h", "-o", "%i").CombinedOutput()
		cancel()
		if err == nil {
			return nil
		}
		if time.Since(t0) > limit {
			return fmt.Errorf("no slurmctld serves %s later: squeue: %v: %s", limit, err, out)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Second)
	}
}

// failoverEvent, after the second kill of the controller (k is 0-based), stops the primary slurmctld (its host shut down: it saves
// its state and exits) and waits until the backup serves, which it does once SlurmctldTimeout has passed without
// an answer from the primary; after the fourth kill, it starts the primary again (the bed's "up"), which takes
// control back from the backup. Reservations are being made and prologs wait throughout.
//
// Not kill -9: a primary killed loses what it did since it last saved its state, and the backup starts from that
// (seen on 22.05: a job that had ended stayed RUNNING, one whose batch script the primary had launched was launched
// again, failed and was held). That is Slurm's to answer for; what this run asks is that the bridge loses nothing
// when Slurm does not.
func (c *chaos) failoverEvent(ctx context.Context, k int) error {
	run := c.env.RunDir()
	switch k {
	case 1:
		logf("stopping the primary slurmctld: the backup takes over")
		t0 := time.Now()
		testbed.StopPidFile(filepath.Join(run, "slurmctld.pid"))
		// Clients pass over the primary that is gone; the backup answers them only once it has taken control
		// (before, it refuses: in standby mode).
		if err := c.untilSlurmctldServes(ctx, 3*time.Minute); err != nil {
			return fmt.Errorf("the backup slurmctld did not take over after the primary's stop: %w", err)
		}
		c.backupTook = time.Since(t0)
		logf("the backup slurmctld serves, %s after the primary stopped", c.backupTook.Round(time.Second))
		c.events = append(c.events, fmt.Sprintf("primary slurmctld stopped, backup in control after %s", c.backupTook.Round(time.Second)))
	case 3:
		if err := c.bedUp("the primary slurmctld again (it takes control back from the backup)"); err != nil {
			return err
		}
		c.events = append(c.events, "primary slurmctld back in control")
	}
	return nil
}

// eventsLine is the report's row for Slurm's own failures.
func (c *chaos) eventsLine() string {
	if !slurmEvents && !slurmFailover {
		return "| Slurm's own failures | none (-slurm-events and -slurm-failover off) |\n"
	}
	return fmt.Sprintf("| Slurm's own failures | %s |\n", strings.Join(c.events, ", "))
}
