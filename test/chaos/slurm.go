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

// slurmEvent runs the Slurm event due after kill k (0-based) of kills, if any, and notes it for the report.
func (c *chaos) slurmEvent(ctx context.Context, k, kills int) error {
	if !slurmEvents {
		return nil
	}
	run := c.env.RunDir()
	switch {
	case k == 1:
		logf("scontrol reconfigure")
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if out, err := c.env.Command(ctx, "scontrol", "reconfigure").CombinedOutput(); err != nil {
			return fmt.Errorf("scontrol reconfigure: %v: %s", err, out)
		}
		c.events = append(c.events, "scontrol reconfigure")
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

// eventsLine is the report's row for Slurm's own failures.
func (c *chaos) eventsLine() string {
	if !slurmEvents {
		return "| Slurm's own failures | none (-slurm-events off) |\n"
	}
	return fmt.Sprintf("| Slurm's own failures | %s |\n", strings.Join(c.events, ", "))
}
