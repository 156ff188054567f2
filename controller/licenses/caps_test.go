package licenses

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// What a QOS must be told for the pools to carry their caps: a cap set or changed, a cap a pool no longer has
// removed (-1), nothing for a QOS already right; names compared without case, as slurmdbd stores them.
func TestCapWrites(t *testing.T) {
	caps := Caps{PerUser: map[string]int{"lab": 1, "test": 4}}
	for _, tc := range []struct {
		name  string
		have  qosCaps
		pools []string
		want  []string
	}{
		{"none set yet", qosCaps{}, []string{"test", "lab", "demo"},
			[]string{"license/juice_lab@juice=1", "license/juice_test@juice=4"}},
		{"already right", qosCaps{"juice_lab@juice": 1, "juice_test@juice": 4}, []string{"lab", "test", "demo"}, nil},
		{"changed", qosCaps{"juice_lab@juice": 2, "juice_test@juice": 4}, []string{"lab", "test"},
			[]string{"license/juice_lab@juice=1"}},
		{"a pool without a cap loses its old one", qosCaps{"juice_demo@juice": 3}, []string{"demo"},
			[]string{"license/juice_demo@juice=-1"}},
		{"a cap of a pool not served is left", qosCaps{"juice_gone@juice": 3}, []string{"lab"},
			[]string{"license/juice_lab@juice=1"}},
		{"case", qosCaps{"juice_lab@juice": 1}, []string{"Lab", "lab"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, capWrites(tc.have, tc.pools, caps))
		})
	}
}

// Only the Juice licenses' entries of a MaxTRESPerUser are ours: the site's other TRES are not read.
func TestParseQOSCaps(t *testing.T) {
	got, err := parseQOSCaps("cpu=4,license/juice_lab@juice=1,license/matlab@flex=2,license/JUICE_Test@juice=3,gres/gpu=1")
	require.NoError(t, err)
	require.Equal(t, qosCaps{"juice_lab@juice": 1, "juice_test@juice": 3}, got)
	got, err = parseQOSCaps("")
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = parseQOSCaps("license/juice_lab@juice=x")
	require.ErrorContains(t, err, `"license/juice_lab@juice=x"`)
}

// The sync keeps each pool's cap on the QOS as MaxTRESPerUser, beside the site's own limits: written once, not
// again while nothing changes, put back when changed by hand, removed when the policy drops it.
func TestCapsAreKeptOnTheQOS(t *testing.T) {
	ctx := context.Background()
	w := newWorld("lab", "test")
	w.juice.pools["lab"] = []juiceapi.Agent{agent("a1", 2)}
	w.juice.pools["test"] = []juiceapi.Agent{agent("a2", 4)}
	w.sacctmgr.qos = map[string]string{"normal": "cpu=4"}
	w.syncer.Caps = Caps{QOS: []string{"normal"}, PerUser: map[string]int{"lab": 1}}

	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, "cpu=4,license/juice_lab@juice=1", w.sacctmgr.qos["normal"])
	require.Contains(t, w.sacctmgr.writes(), "-i modify qos where name=normal set MaxTRESPerUser=license/juice_lab@juice=1")

	w.sacctmgr.reset()
	require.NoError(t, w.syncer.Sync(ctx))
	require.Empty(t, w.sacctmgr.writes(), "nothing changed, nothing written")

	w.sacctmgr.qos["normal"] = "cpu=4,license/juice_lab@juice=5" // an administrator's sacctmgr
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, "cpu=4,license/juice_lab@juice=1", w.sacctmgr.qos["normal"], "put back within a period")

	w.syncer.Caps.PerUser = map[string]int{"test": 2}
	w.sacctmgr.reset()
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, []string{"-i modify qos where name=normal set MaxTRESPerUser=license/juice_lab@juice=-1,license/juice_test@juice=2"},
		w.sacctmgr.writes(), "one call for every change of the QOS")
	require.Equal(t, "cpu=4,license/juice_test@juice=2", w.sacctmgr.qos["normal"])
}

// A QOS slurmdbd does not have, or a pool whose license is not a TRES Slurm accounts for, is an error naming it;
// the counts are written all the same, and the next sync tries again.
func TestCapErrorsNameWhatFailed(t *testing.T) {
	ctx := context.Background()
	w := newWorld("lab")
	w.juice.pools["lab"] = []juiceapi.Agent{agent("a1", 2)}
	w.sacctmgr.qos = map[string]string{"normal": ""}
	w.syncer.Caps = Caps{QOS: []string{"gpu"}, PerUser: map[string]int{"lab": 1}}
	err := w.syncer.Sync(ctx)
	require.ErrorContains(t, err, "read the caps of QOS gpu: slurmdbd has no such QOS")
	require.Equal(t, 2, w.sacctmgr.licenses["juice_lab"], "the count is written all the same")
	require.Equal(t, 1, w.metrics.updates["error"])

	w.syncer.Caps = Caps{QOS: []string{"normal"}, PerUser: map[string]int{"lab": 1, "ghost": 1}}
	w.syncer.Pools = []string{"lab", "ghost"}
	w.sacctmgr.untracked = map[string]bool{"juice_ghost": true}
	err = w.syncer.Sync(ctx)
	require.ErrorContains(t, err, "caps on QOS normal:")
	require.ErrorContains(t, err, "no TRES known by type license/juice_ghost@juice")
	require.ErrorContains(t, err, "AccountingStorageTRES")
	require.Equal(t, "", w.sacctmgr.qos["normal"], "nothing half written")

	w.syncer.Caps.PerUser = map[string]int{"lab": 1}
	require.NoError(t, w.syncer.Sync(ctx))
	require.Equal(t, "license/juice_lab@juice=1", w.sacctmgr.qos["normal"])
}
