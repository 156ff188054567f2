package reconcile

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// TestOptionsVectors checks every row of the table the C plugin is tested against too.
func TestOptionsVectors(t *testing.T) {
	f, err := os.Open("../test/vectors/options.tsv")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	rows := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		cols := strings.Split(line, "\t")
		require.Len(t, cols, 5, "row %q", line)
		opt := func(s string) *string {
			if s == "-" {
				return nil
			}
			return &s
		}
		lim := DefaultLimits
		if cols[3] != "-" {
			for _, kv := range strings.Split(cols[3], ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "default_pool":
					lim.DefaultPool = v
				case "max_gpus":
					lim.MaxGPUs, err = strconv.Atoi(v)
					require.NoError(t, err)
				case "max_vram":
					lim.MaxVRAM, err = juiceapi.ParseVRAM(v)
					require.NoError(t, err)
				default:
					t.Fatalf("row %q: unknown limit %q", line, k)
				}
			}
		}
		rows++
		r, err := ParseOptions(opt(cols[0]), opt(cols[1]), opt(cols[2]), lim)
		want := cols[4]
		switch {
		case want == "none":
			assert.NoError(t, err, line)
			assert.Nil(t, r, line)
		case strings.HasPrefix(want, "ok "):
			if assert.NoError(t, err, line) && assert.NotNil(t, r, line) {
				assert.Equal(t, strings.TrimPrefix(want, "ok "), r.String(), line)
				back, err := ParseRequest(r.String())
				assert.NoError(t, err, line)
				assert.Equal(t, *r, back, line)
			}
		case strings.HasPrefix(want, "error "):
			var oe *OptionError
			if assert.Error(t, err, line) && assert.True(t, errors.As(err, &oe), line) {
				assert.Equal(t, strings.TrimPrefix(want, "error "), oe.Option, line)
				assert.Contains(t, err.Error(), "--"+oe.Option, line)
			}
		default:
			t.Fatalf("row %q: unknown expectation", line)
		}
	}
	require.NoError(t, sc.Err())
	require.Greater(t, rows, 40)
}

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Request
		err  string
	}{
		{in: "juice:v1:pool=test,gpus=2", want: Request{Pool: "test", GPUs: 2}},
		{in: "juice:v1:gpus=1,pool=a,vram=1610612736", want: Request{Pool: "a", GPUs: 1, VRAM: 1610612736}},
		{in: "smoke-123", err: "not a juice request"},
		{in: "", err: "not a juice request"},
		{in: "juice:v2:pool=test,gpus=1", err: "unknown version"},
		{in: "juice:v1:pool=test", err: "needs both pool and gpus"},
		{in: "juice:v1:pool=test,gpus=1,gpus=2", err: "gpus given twice"},
		{in: "juice:v1:pool=test,gpus=0", err: "at least 1"},
		{in: "juice:v1:pool=test,gpus=x", err: "at least 1"},
		{in: "juice:v1:pool=te st,gpus=1", err: "only letters"},
		{in: "juice:v1:pool=test,gpus=2,vram=5", err: "slice is for one GPU"},
		{in: "juice:v1:pool=test,gpus=1,vram=0", err: "between 1 and"},
		{in: "juice:v1:pool=test,gpus=1,vram=1.5", err: "not a whole number"},
		{in: "juice:v1:pool=test,gpus=1,color=red", err: `unknown key "color"`},
		{in: "juice:v1:pool=test,gpus=1,", err: "not key=value"},
		{in: "juice:v1:pool=test," + strings.Repeat("x", 1100), err: "longer than 1024"},
	} {
		got, err := ParseRequest(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	require.True(t, errors.Is(func() error { _, err := ParseRequest("hello"); return err }(), ErrNotARequest))
}

func TestDescribe(t *testing.T) {
	require.Equal(t, "2 GPUs from pool test", Request{Pool: "test", GPUs: 2}.Describe())
	require.Equal(t, "1 GPU from pool p", Request{Pool: "p", GPUs: 1}.Describe())
	require.Equal(t, "a 1.5GiB slice of 1 GPU from pool p", Request{Pool: "p", GPUs: 1, VRAM: 3 << 29}.Describe())
}

// FuzzParseRequest: parsing never panics, and whatever parses prints to a canonical form that parses back to
// the same request.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"juice:v1:pool=test,gpus=2", "juice:v1:gpus=1,pool=a,vram=1610612736", "juice:v1:", "juice:v1:pool=,gpus="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRequest(s)
		if err != nil {
			return
		}
		back, err := ParseRequest(r.String())
		if err != nil {
			t.Fatalf("%q parsed to %+v, whose form %q does not parse: %v", s, r, r.String(), err)
		}
		if back != r {
			t.Fatalf("%q: round trip %+v != %+v", s, back, r)
		}
	})
}
