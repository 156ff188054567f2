package vectors

import "testing"

// Unescape reads every escape the tables use and refuses what it does not know, rather than pass a row through
// half-read.
func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`a\tb`: "a\tb", `\n\r`: "\n\r", `\\x`: `\x`, `\x00\x7f`: "\x00\x7f", "plain": "plain"} {
		got, err := unescape(in)
		if err != nil || got != want {
			t.Errorf("Unescape(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`\`, `\q`, `\x`, `\x0`, `\xzz`} {
		if got, err := unescape(in); err == nil {
			t.Errorf("Unescape(%q) = %q, want an error", in, got)
		}
	}
}

func TestReadSkipsCommentsAndKeepsLines(t *testing.T) {
	rows := Read(t, "sizes.tsv", 10)
	if rows[0].Line < 2 || len(rows[0].Cols) != 2 {
		t.Fatalf("first row %+v: comments not skipped, or columns not split", rows[0])
	}
}
