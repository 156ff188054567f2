package vram

import (
	"github.com/juice-slurm/juice-slurm/test/vectors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestParseVRAMVectors checks the shared table row by row, so Go and the C plugin agree.
func TestParseVRAMVectors(t *testing.T) {
	for _, row := range vectors.Read(t, "vram.tsv", 30) {
		// Inputs may hold spaces (and be empty), never tabs.
		line := row.Line
		if len(row.Cols) != 2 {
			t.Fatalf("vram.tsv:%d: want input and expectation, got %q", line, row.Cols)
		}
		input, want := row.Cols[0], row.Cols[1]
		got, err := Parse(input)
		switch {
		case want == "error":
			if err == nil {
				t.Errorf("vram.tsv:%d: Parse(%q) = %d, want an error", line, input, got)
			} else if !strings.Contains(err.Error(), strconv.Quote(input)) {
				t.Errorf("vram.tsv:%d: error %q does not name the value %q", line, err, input)
			}
		case strings.HasPrefix(want, "ok "):
			wantBytes, perr := strconv.ParseUint(strings.TrimPrefix(want, "ok "), 10, 64)
			if perr != nil {
				t.Fatalf("vram.tsv:%d: bad expectation %q", line, want)
			}
			if err != nil || got != wantBytes {
				t.Errorf("vram.tsv:%d: Parse(%q) = %d, %v; want %d", line, input, got, err, wantBytes)
			}
		default:
			t.Fatalf("vram.tsv:%d: bad expectation %q", line, want)
		}
	}
}

func TestParseVRAMMessages(t *testing.T) {
	for in, want := range map[string]string{
		"1.5xyz":       `invalid VRAM size "1.5xyz": unknown unit "xyz" (use B, MB, GB, MiB or GiB; a bare number is GiB)`,
		"":             `invalid VRAM size "": empty`,
		"-1":           `invalid VRAM size "-1": must start with a digit`,
		"1.":           `invalid VRAM size "1.": expected digits after the decimal point`,
		"1.0000000001": `invalid VRAM size "1.0000000001": at most 9 digits`,
		"17179869184":  `invalid VRAM size "17179869184": too large`,
	} {
		_, err := Parse(in)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Parse(%q) error = %v, want prefix %q", in, err, want)
		}
	}
}

func TestFormatVRAM(t *testing.T) {
	for _, c := range []struct {
		in   uint64
		want string
	}{
		{0, "0B"}, {123, "123B"}, {1023, "1023B"},
		{512 * MiB, "512MiB"}, {GiB, "1GiB"}, {GiB + GiB/2, "1.5GiB"}, {80 * GiB, "80GiB"},
		{2560 * MiB, "2.5GiB"}, {GiB + GiB/8, "1.125GiB"}, {GiB + 2*MiB, "1026MiB"},
		{MiB / 2, "524288B"}, {1500 * MB, "1.5GB"}, {512 * MB, "512MB"}, {107374182, "107374182B"},
		{1<<64 - 1, "18446744073709551615B"}, {math.MaxUint64 - GiB + 1, "17179869183GiB"},
	} {
		got := Format(c.in)
		if got != c.want {
			t.Errorf("Format(%d) = %q, want %q", c.in, got, c.want)
		}
		back, err := Parse(got)
		if err != nil || back != c.in {
			t.Errorf("Parse(Format(%d)=%q) = %d, %v", c.in, got, back, err)
		}
	}
}

func FuzzParseVRAM(f *testing.F) {
	for _, s := range []string{"1", "1.5", "2.5GiB", "2560MiB", "1GB", "512mb", "0.000000001", "18446744073709551615B", "1.5xyz", "", "-1", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s) // must never panic
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("error %q does not name %q", err, s)
			}
			return
		}
		back, err := Parse(Format(v))
		if err != nil || back != v {
			t.Fatalf("Parse(Format(%d)=%q) = %d, %v", v, Format(v), back, err)
		}
	})
}

func FuzzFormatVRAM(f *testing.F) {
	for _, x := range []uint64{0, 1, 1023, MiB, GiB, math.MaxUint64, 1500 * MB} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x uint64) {
		s := Format(x)
		back, err := Parse(s)
		if err != nil || back != x {
			t.Fatalf("Parse(Format(%d)=%q) = %d, %v", x, s, back, err)
		}
	})
}

// TestReadableVectors: the sizes users read in messages, shared with hooks/juice_submit.lua (issue 26, finding 9:
// "85899345921 bytes asked for" for a user who typed 80.000000001). A size a user typed as a bare number of GiB
// reads back as they typed it.
func TestReadableVectors(t *testing.T) {
	for _, row := range vectors.Read(t, "sizes.tsv", 10) {
		if len(row.Cols) != 2 {
			t.Fatalf("sizes.tsv:%d: bad row %q", row.Line, row.Cols)
		}
		in, want := row.Cols[0], row.Cols[1]
		n, err := strconv.ParseUint(in, 10, 64)
		if err != nil {
			t.Fatalf("sizes.tsv:%d: bad row %q", row.Line, row.Cols)
		}
		if got := Readable(n); got != want {
			t.Errorf("sizes.tsv:%d: Readable(%d) = %q, want %q", row.Line, n, got, want)
		}
	}
	for _, typed := range []string{"80.000000001", "0.1", "1.5", "79.999999999", "0.000000001", "1234.567891234"} {
		n, err := Parse(typed)
		if err != nil {
			t.Fatal(err)
		}
		if got := Readable(n); got != typed+"GiB" && n >= MiB {
			t.Errorf("typed %s (%d bytes), read %s", typed, n, got)
		}
	}
}
