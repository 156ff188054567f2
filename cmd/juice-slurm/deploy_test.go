package main

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// The shipped units are rated "OK" (2.5 or better) by systemd's own exposure analysis: the controller's (it was 8.5
// EXPOSED) and the token renewal's (8.9 EXPOSED).
func TestUnitIsHardened(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testbed.Unavailable(t, "systemd-analyze is not installed (Debian package systemd)")
	}
	for _, unit := range []string{"juice-slurm-controller.service", "juice-slurm-token-renew.service"} {
		t.Run(unit, func(t *testing.T) {
			out, err := exec.Command(sa, "security", "--offline=true", "../../deploy/"+unit).CombinedOutput()
			require.NoError(t, err, "%s", out)
			m := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(unit) + `: ([0-9.]+) (\w+)`).FindSubmatch(out)
			require.NotNil(t, m, "%s", out)
			level, err := strconv.ParseFloat(string(m[1]), 64)
			require.NoError(t, err)
			require.LessOrEqual(t, level, 2.5, "exposure %s %s:\n%s", m[1], m[2], out)
			require.Equal(t, "OK", string(m[2]))
		})
	}
}
