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
// It links no HTTP or TLS package (their inits alone cost more than the rest of its start): it reaches the
// controller by its Unix socket (hook-url = unix:PATH, hookwire.DialUnix). A Juice job whose hook-url names an
// https: replica (a controller on another host) is handed to juice-slurm, from the same directory, which this
// process becomes (exec) with the same arguments: `juice-slurm hook prolog|epilog`.
//
// Exit status: 0 done (and always for the epilog), 1 the prolog failed, 2 bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
	// No signal handler (os/signal's set-up alone is a quarter of an empty program's start): slurmctld's SIGTERM
	// or SIGKILL ends the process at once, which fails the prolog as its exit would, and the controller sees the
	// connection close. A session file cut off while written is under a temporary name, which the plugin never
	// opens.
	err := hook.Main(context.Background(), args[0], args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, hook.ErrNeedsTLS) {
		err = execJuiceSlurm(args)
		if args[0] == "epilog" {
			// The epilog never fails: the controller releases the session when it sees the job end anyway.
			fmt.Fprintln(os.Stderr, "juice-slurm-hook:", err)
			return 0
		}
	}
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

// execJuiceSlurm becomes `juice-slurm hook args...`, juice-slurm taken from this binary's directory (as packaged:
// both in /usr/lib/juice-slurm). It returns only when it cannot.
func execJuiceSlurm(args []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%w; and cannot find juice-slurm: %v", hook.ErrNeedsTLS, err)
	}
	bin := filepath.Join(filepath.Dir(self), "juice-slurm")
	err = syscall.Exec(bin, append([]string{bin, "hook"}, args...), os.Environ())
	return fmt.Errorf("%w; and cannot run %s: %v", hook.ErrNeedsTLS, bin, err)
}
