package licenses

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Exec runs the sacctmgr at Path. sacctmgr talks to slurmdbd: run it as SlurmUser or root (slurmdbd's
// administrators), or as a user with AdminLevel=Admin.
type Exec struct {
	Path string
	// Timeout bounds one call (sacctmgr waits for a slurmdbd that does not answer). Default 30s.
	Timeout time.Duration
}

// Run implements Sacctmgr: a non-zero exit is an error naming the command and carrying what sacctmgr said.
func (e Exec) Run(ctx context.Context, args ...string) (string, error) {
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, e.Path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		said := strings.TrimSpace(stderr.String())
		if said == "" {
			said = strings.TrimSpace(stdout.String())
		}
		if said != "" {
			return "", fmt.Errorf("%s %s: %w: %s", e.Path, strings.Join(args, " "), err, said)
		}
		return "", fmt.Errorf("%s %s: %w", e.Path, strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}
