package main

import (
	"context"
	"errors"
	"os"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/internal/hook"
)

// runHook is `juice-slurm hook prolog|epilog`: the same code as cmd/juice-slurm-hook, the small binary the hooks
// exec, kept for installations whose juice-config.sh names only this binary (JUICE_SLURM_BIN).
func runHook(ctx context.Context, which string, args []string) error {
	hook.TLS = hookapi.HookPost // https: replicas, which the small binary hands over to this one
	err := hook.Main(ctx, which, args, os.Getenv, os.Stderr)
	if e := hook.Exit(0); errors.As(err, &e) {
		return exitCode(e)
	}
	return err
}
