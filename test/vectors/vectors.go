// Package vectors reads the shared test vectors of this directory (README.md): the tables the Go packages, the C
// SPANK plugin and job_submit.lua are all tested against. The Go tests read them through here, so every table is
// read, and its escapes undone, one way.
package vectors

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Dir is this directory: the tables' home, wherever the test that reads them runs.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("vectors: no caller information to find test/vectors")
	}
	return filepath.Dir(file)
}

// Row is one row of a table: its line number in the file and its tab-separated columns, as written (see Unescape).
type Row struct {
	Line int
	Cols []string
}

// Read returns the rows of the table named name (blank lines and # comments left out). It fails the test when the
// file cannot be read or has fewer than min rows: a truncated table must not pass for a checked one.
func Read(t testing.TB, name string, min int) []Row {
	t.Helper()
	f, err := os.Open(filepath.Join(Dir(), name))
	if err != nil {
		t.Fatalf("open the shared vectors: %v", err)
	}
	defer f.Close()
	var rows []Row
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rows = append(rows, Row{Line: n, Cols: strings.Split(line, "\t")})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	if len(rows) < min {
		t.Fatalf("read only %d rows from %s (want at least %d)", len(rows), name, min)
	}
	return rows
}

// Unescape undoes the tables' escapes, for the values that hold what a row cannot: \\ \t \n \r and \xNN. An
// escape it does not know fails the test: a row must not pass half-read.
func Unescape(t testing.TB, s string) string {
	t.Helper()
	u, err := unescape(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 >= len(s) {
			return "", fmt.Errorf("dangling backslash in %q", s)
		}
		switch s[i+1] {
		case '\\':
			b.WriteByte('\\')
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'x':
			if i+4 > len(s) {
				return "", fmt.Errorf("short \\x escape in %q", s)
			}
			n, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
			if err != nil {
				return "", fmt.Errorf("bad \\x escape in %q", s)
			}
			b.WriteByte(byte(n))
			i += 2
		default:
			return "", fmt.Errorf("unknown escape \\%c in %q", s[i+1], s)
		}
		i++
	}
	return b.String(), nil
}
