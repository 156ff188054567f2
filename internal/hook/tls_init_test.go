package hook

import "github.com/juice-slurm/juice-slurm/controller/hookapi"

// The tests' hook reaches https: test servers as `juice-slurm hook` does.
func init() { TLS = hookapi.HookPost }
