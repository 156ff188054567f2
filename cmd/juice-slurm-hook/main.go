// Command juice-slurm-hook is what slurmctld's prolog and epilog exec (hooks/juice-prolog.sh, juice-epilog.sh):
//
//	juice-slurm-hook prolog|epilog [flags]
//
// the same code as `juice-slurm hook prolog|epilog` (internal/hook), in a binary that links only the standard
// library and the hook's own packages, so that a prolog whose session is ready costs little more than one process
// start and one round trip (issue 14: the 22 MB juice-slurm spent about 2 ms in package inits and page faults
// before it began). Its settings are the hook's, read as juice-slurm reads them: flags, JUICE_* variables, the
// file /etc/juice-slurm/juice-slurm.conf.
//
// Exit status: 0 done (and always for the epilog), 1 the prolog failed, 2 bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/juice-slurm/juice-slurm/internal/hook"
	"github.com/juice-slurm/juice-slurm/internal/settings"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || (args[0] != "prolog" && args[0] != "epilog") {
		fmt.Fprintln(os.Stderr, "usage: juice-slurm-hook prolog|epilog [flags]")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := hook.Main(ctx, args[0], args[1:], os.Getenv, os.Stderr)
	var e hook.Exit
	var u settings.UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &e):
		return int(e)
	case errors.As(err, &u):
		fmt.Fprintln(os.Stderr, "juice-slurm-hook:", err)
		return 2
	}
	fmt.Fprintln(os.Stderr, "juice-slurm-hook:", err)
	return 1
}
