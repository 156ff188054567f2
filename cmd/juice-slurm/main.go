// Command juice-slurm is the juice-slurm service and its tools, in one binary:
//
//	juice-slurm controller          the reconciler service (and the hook API every replica serves)
//	juice-slurm migrate             apply the database schema as the owner role; grant the runtime role
//	juice-slurm hook prolog|epilog  called by hooks/juice-prolog.sh and hooks/juice-epilog.sh from slurmctld
//	juice-slurm status              runs by state and pool, and who leads
//	juice-slurm describe job N      every transition of each run of job N (or array element N_T), with its reason
//	juice-slurm release job N       release job N's sessions now
//	juice-slurm key show|rotate|retire  the cluster key's rotation (current and previous key)
//	juice-slurm settings [COMMAND]  the settings a command runs with, and where each came from
//	juice-slurm version
//
// Exit status: 0 done, 1 failed, 2 bad usage (a bad flag, setting or argument), 3 not found.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/juice-slurm/juice-slurm/internal/settings"
)

// Version is set at build time (Makefile: -X main.Version=...).
var Version = "dev"

const usage = `juice-slurm: run Slurm jobs on remote GPUs from a Juice pool.

Usage:
  juice-slurm controller [flags]          run the reconciler service
  juice-slurm migrate [flags]             apply the database schema (as the owner role)
  juice-slurm hook prolog|epilog [flags]  called by the slurmctld prolog/epilog scripts
  juice-slurm status [flags]              runs by state and pool
  juice-slurm describe job N [flags]      the history of job N's reservations (N, or ARRAY_TASK such as 40_7)
  juice-slurm release job N [flags]       release job N's sessions now (N, or ARRAY_TASK)
  juice-slurm report --since WHEN --by user|account|pool [--format table|csv|json]
                                          GPU-hours and VRAM-GiB-hours from the database ('report --help')
  juice-slurm jobs [--events] [flags]     your own Juice jobs' runs and history (for users: MUNGE, no database;
                                          --json, and as squeue -u USER -p PARTITION -t STATE --noheader)
  juice-slurm key show|rotate|retire      the cluster key: its ids (show --json); a new one, keeping the old as previous; drop the previous
  juice-slurm settings [COMMAND] [flags]  the settings COMMAND (default controller) runs with, and their source
  juice-slurm version [flags]             the binary's version and schema (and the database's; --json)

Settings: every flag can also be given as an environment variable JUICE_<FLAG> (upper case, '-' as '_') or as
a 'flag = value' line in the configuration file, ` + DefaultConfig + ` (another with --config or
JUICE_CONFIG). One file serves every command. Precedence: command line, then environment, then file, then the
flag's default. The controller re-reads the file on SIGHUP (poll-interval, lookahead-*, sweep-interval,
log-level); other settings change at the next restart.

Exit status: 0 done, 1 failed, 2 bad usage, 3 not found.
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
		os.Exit(exitStatusOf(err))
	}
}

// Exit statuses a script can tell apart.
const (
	exitFailed   = 1
	exitUsage    = 2
	exitNotFound = 3
)

// usageError is a bad flag, setting or argument: exit status 2 (as is settings.UsageError, the settings
// reader's).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// notFoundError is an object that does not exist (a job without a reservation): exit status 3.
type notFoundError struct{ error }

func (e notFoundError) Unwrap() error { return e.error }

func exitStatusOf(err error) int {
	var u usageError
	var su settings.UsageError
	var nf notFoundError
	switch {
	case errors.As(err, &nf):
		return exitNotFound
	case errors.As(err, &u), errors.As(err, &su):
		return exitUsage
	}
	return exitFailed
}

// isHelp says whether arg asks for a command's help, as the flag package reads it.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" || arg == "--h" }

// helpAt is the index of the first help argument in args, or -1.
func helpAt(args []string) int {
	for i, a := range args {
		if isHelp(a) {
			return i
		}
	}
	return -1
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
	case "migrate":
		return runMigrate(ctx, rest)
	case "hook":
		if len(rest) == 0 || (rest[0] != "prolog" && rest[0] != "epilog") {
			return usageError{fmt.Errorf("usage: juice-slurm hook prolog|epilog [flags]")}
		}
		return runHook(ctx, rest[0], rest[1:])
	case "status":
		return runStatus(ctx, os.Stdout, rest)
	case "jobs":
		return runJobs(ctx, os.Stdout, rest)
	case "report":
		return runReport(ctx, os.Stdout, rest)
	case "describe", "release":
		if i := helpAt(rest); i >= 0 && (i < 2 || rest[0] != "job") {
			// `describe --help`, `describe job --help`: the flags, before any job id.
			return runJobCommand(ctx, os.Stdout, cmd, "", rest[i:i+1])
		}
		if len(rest) < 2 || rest[0] != "job" {
			return usageError{fmt.Errorf("usage: juice-slurm %s job N|ARRAY_TASK [flags]", cmd)}
		}
		return runJobCommand(ctx, os.Stdout, cmd, rest[1], rest[2:])
	case "key":
		return runKey(ctx, os.Stdout, rest)
	case "settings":
		return runSettings(os.Stdout, rest)
	case "version", "--version":
		return runVersion(ctx, os.Stdout, rest)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	default:
		fmt.Fprint(os.Stderr, usage)
		return usageError{fmt.Errorf("unknown command %q", cmd)}
	}
}
