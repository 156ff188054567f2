package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every message docs/user.md lists exists in the code that says it (the SPANK plugin, job_submit.lua, the
// hooks, the controller), so the users' guide cannot drift: a reworded message fails here until the guide
// follows. A message is a list item's first `code span` under "## Every message"; <...> stands for a value, and
// each piece of text between values must appear in the sources, where C's and Lua's adjacent string pieces and
// Go's "a" + "b" are joined first.
func TestUserGuideMessagesExist(t *testing.T) {
	guide, err := os.ReadFile("../../docs/user.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(guide), "\n## Every message")
	require.True(t, ok, "docs/user.md has no section \"## Every message\"")
	section, _, _ = strings.Cut(section, "\n## ")

	var src strings.Builder
	for _, glob := range []string{"../../spank/*.c", "../../hooks/*.lua", "../../hooks/*.sh", "../../internal/*/*.go",
		"../../controller/*.go", "../../controller/*/*.go", "../../reconcile/*.go", "../../reconcile/*/*.go", "../../juiceapi/*.go"} {
		files, err := filepath.Glob(glob)
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			src.Write(b)
		}
	}
	joined := regexp.MustCompile(`"\s*(\.\.|\+)?\s*\n\s*"`).ReplaceAllString(src.String(), "")
	joined = strings.ReplaceAll(joined, `\"`, `"`)

	item := regexp.MustCompile("(?m)^- `([^`]+)`")
	value := regexp.MustCompile(`<[^>]*>`)
	n := 0
	for _, m := range item.FindAllStringSubmatch(section, -1) {
		n++
		longest := 0
		for _, piece := range value.Split(m[1], -1) {
			if len(strings.TrimSpace(piece)) < 6 {
				continue
			}
			longest = max(longest, len(piece))
			if !strings.Contains(joined, piece) {
				t.Errorf("docs/user.md lists the message %q, whose text %q no source says", m[1], piece)
			}
		}
		require.GreaterOrEqual(t, longest, 12, "docs/user.md: message %q has too little text to find", m[1])
	}
	require.GreaterOrEqual(t, n, 30, "docs/user.md: the messages listed")
}

// The users' man page, juice-slurm(1), carries the VERSION file's version and names the plugin's three options
// and every flag of `juice-slurm jobs` a user types (the settings jobs reads are named in ENVIRONMENT).
func TestUserManPage(t *testing.T) {
	page, err := os.ReadFile("../../docs/juice-slurm.1")
	require.NoError(t, err)
	version, err := os.ReadFile("../../VERSION")
	require.NoError(t, err)
	require.Contains(t, string(page), `.TH JUICE-SLURM 1 "`)
	require.Contains(t, string(page), `"juice-slurm `+strings.TrimSpace(string(version))+`"`, "docs/juice-slurm.1's .TH version")
	text := strings.ReplaceAll(string(page), `\-`, "-")
	shows := func(s string) {
		t.Helper()
		if !strings.Contains(text, s) {
			t.Errorf("docs/juice-slurm.1 does not show %s", s)
		}
	}
	for _, opt := range []string{"--juice-pool=", "--juice-gpu-count=", "--juice-vram="} {
		shows(opt)
	}
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	jobsFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !commandLineOnly[f.Name] {
			env := "JUICE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
			if f.Name != "munge" {
				shows(env)
			}
			return
		}
		if len(f.Name) == 1 {
			shows(`\fB-` + f.Name + `\fR`)
		} else {
			shows("--" + f.Name)
		}
	})
}
