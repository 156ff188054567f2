// Command juice-slurm is the juice-slurm service and its tools, in one binary:
//
//	juice-slurm controller          the reconciler service (and the hook API every replica serves)
//	juice-slurm hook prolog|epilog  called by hooks/juice-prolog.sh and hooks/juice-epilog.sh from slurmctld
//	juice-slurm status              runs by state and pool, and who leads
//	juice-slurm describe job N      every transition of each run of job N, with its reason
//	juice-slurm release job N       release job N's sessions now
//	juice-slurm version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Version is set at build time (Makefile: -X main.Version=...).
var Version = "dev"

const usage = `juice-slurm: run Slurm jobs on remote GPUs from a Juice pool.

Usage:
  juice-slurm controller [flags]          run the reconciler service
  juice-slurm hook prolog|epilog [flags]  called by the slurmctld prolog/epilog scripts
  juice-slurm status [flags]              runs by state and pool
  juice-slurm describe job N [flags]      the history of job N's reservations
  juice-slurm release job N [flags]       release job N's sessions now
  juice-slurm version

Every flag can also be given as an environment variable JUICE_<FLAG> (upper case, '-' as '_'), or as a
'flag = value' line in the file named by --config; a flag on the command line wins over both.
Run 'juice-slurm COMMAND --help' for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		fmt.Fprintln(os.Stderr, "juice-slurm:", err)
		os.Exit(1)
	}
}

// exitCode ends the program with a code and no further message (the command printed its own).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitCode(2)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "controller":
		return runController(ctx, rest)
	case "hook":
		if len(rest) == 0 || (rest[0] != "prolog" && rest[0] != "epilog") {
			return fmt.Errorf("usage: juice-slurm hook prolog|epilog [flags]")
		}
		return runHook(ctx, rest[0], rest[1:])
	case "status":
		return runStatus(ctx, rest)
	case "describe", "release":
		if len(rest) < 2 || rest[0] != "job" {
			return fmt.Errorf("usage: juice-slurm %s job N [flags]", cmd)
		}
		return runJobCommand(ctx, cmd, rest[1], rest[2:])
	case "version", "--version":
		fmt.Println("juice-slurm", Version)
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
