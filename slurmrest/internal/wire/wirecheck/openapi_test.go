package wirecheck_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/slurmrest/internal/wire/wirecheck"
)

// Every wire type field must exist, with a compatible kind, in the OpenAPI document of every version
// the real servers served (trimmed copies in slurmrest/testdata/openapi, made by record.sh).
func TestWireTypesMatchOpenAPI(t *testing.T) {
	files, err := filepath.Glob("../../../testdata/openapi/*.json")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 10)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		_, version, _ := strings.Cut(name, "-")
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			var doc wirecheck.Doc
			require.NoError(t, json.Unmarshal(b, &doc))
			_, problems := wirecheck.Walk(&doc, version)
			require.Empty(t, problems)
		})
	}
}
