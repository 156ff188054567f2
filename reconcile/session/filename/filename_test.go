package filename

import (
	"math"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Parse accepts exactly the names the regular expression it replaced (package session's, until issue 14) accepted
// and whose job fits 32 bits, and gives back what Of made.
func TestParseIsTheOldExpression(t *testing.T) {
	old := regexp.MustCompile(`^(0|[1-9][0-9]{0,9})\.(0|[1-9][0-9]{0,8})\.session$`)
	names := []string{"0.0.session", "42.1.session", "4294967295.999999999.session", "4294967296.0.session",
		"9999999999.0.session", "12345678901.0.session", "1.1234567890.session", "01.0.session", "1.00.session",
		"1.0.session.new", ".1.0.session.new123", "1..session", ".0.session", "1.0.0.session", "1.0session", "1-0.session",
		"+1.0.session", "1.-0.session", " 1.0.session", "1.0.session ", "x.0.session", "session", ".session", "",
		"1.0.Session", "１.0.session", "1.0.sessio", "00.0.session"}
	for _, job := range []uint64{0, 1, 9, 10, 99, 12345, math.MaxUint32} {
		for _, run := range []int{0, 1, 7, 10, 123456789} {
			names = append(names, strconv.FormatUint(job, 10)+"."+strconv.Itoa(run)+".session")
		}
	}
	for _, name := range names {
		job, run, ok := Parse(name)
		m := old.FindStringSubmatch(name)
		want := m != nil
		if want {
			_, err := strconv.ParseUint(m[1], 10, 32)
			want = err == nil
		}
		require.Equal(t, want, ok, "%q", name)
		if ok {
			require.Equal(t, name, Of(job, run), "%q", name)
		}
	}
}

func FuzzParse(f *testing.F) {
	old := regexp.MustCompile(`^(0|[1-9][0-9]{0,9})\.(0|[1-9][0-9]{0,8})\.session$`)
	f.Add("42.1.session")
	f.Add("4294967296.0.session")
	f.Fuzz(func(t *testing.T, name string) {
		job, run, ok := Parse(name)
		m := old.FindStringSubmatch(name)
		want := m != nil
		if want {
			_, err := strconv.ParseUint(m[1], 10, 32)
			want = err == nil
		}
		if ok != want {
			t.Fatalf("%q: Parse ok %v, the expression %v", name, ok, want)
		}
		if ok && Of(job, run) != name {
			t.Fatalf("%q: Of gives %q", name, Of(job, run))
		}
	})
}
