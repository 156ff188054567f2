// Package docs checks that the design documents name only what exists: a newcomer reads docs/architecture.md to
// find the one function that makes each decision, so a renamed or moved function, file or package must fail a test
// rather than leave the document pointing nowhere.
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is two levels up from this package (test/docs).
const repoRoot = "../.."

// goIndex holds what the Go code declares: packages by their import path below the module and by their last element,
// and for each package its top-level names and, per type, its methods and fields.
type goIndex struct {
	pkgs    map[string]map[string]bool            // "reconcile/store" and "store" -> top-level names
	members map[string]map[string]map[string]bool // package -> type -> methods and fields
	any     map[string]bool                       // every declared name anywhere (top level, method, field)
}

func (x *goIndex) add(pkg, name string) {
	if x.pkgs[pkg] == nil {
		x.pkgs[pkg] = map[string]bool{}
	}
	x.pkgs[pkg][name] = true
	x.any[name] = true
}

func (x *goIndex) member(pkg, typ, name string) {
	if x.members[pkg] == nil {
		x.members[pkg] = map[string]map[string]bool{}
	}
	if x.members[pkg][typ] == nil {
		x.members[pkg][typ] = map[string]bool{}
	}
	x.members[pkg][typ][name] = true
	x.any[name] = true
}

func receiverType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiverType(t.X)
	case *ast.IndexExpr:
		return receiverType(t.X)
	case *ast.IndexListExpr:
		return receiverType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}

// loadGo parses every Go file of the module: of the test files only the test functions count (test helpers under
// test/ are not test files and count whole).
func loadGo(t *testing.T) *goIndex {
	x := &goIndex{pkgs: map[string]map[string]bool{}, members: map[string]map[string]map[string]bool{}, any: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "testdata" || n == "build" || n == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "_test.go") {
			// The document may name a test that shows a guarantee: only its test functions count.
			for _, decl := range f.Decls {
				if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") {
					x.any[fd.Name.Name] = true
				}
			}
			return nil
		}
		rel, _ := filepath.Rel(repoRoot, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		keys := []string{rel, filepath.Base(rel), f.Name.Name}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil && len(d.Recv.List) > 0 {
					for _, k := range keys {
						x.member(k, receiverType(d.Recv.List[0].Type), d.Name.Name)
					}
					continue
				}
				for _, k := range keys {
					x.add(k, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						for _, k := range keys {
							x.add(k, s.Name.Name)
						}
						var fields *ast.FieldList
						switch tt := s.Type.(type) {
						case *ast.StructType:
							fields = tt.Fields
						case *ast.InterfaceType:
							fields = tt.Methods
						}
						if fields != nil {
							for _, fl := range fields.List {
								for _, n := range fl.Names {
									for _, k := range keys {
										x.member(k, s.Name.Name, n.Name)
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							for _, k := range keys {
								x.add(k, n.Name)
							}
						}
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	return x
}

// otherSources is the text of the C, Lua, shell, SQL and Go sources, where a name the Go index lacks may be defined
// (a C or Lua function, an SQL index, a JSON field of Slurm's).
func otherSources(t *testing.T) string {
	var b strings.Builder
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "testdata" || n == "build" || n == "bin" || n == "results" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".c", ".h", ".lua", ".sh", ".sql", ".tsv", ".go":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			b.Write(data)
			b.WriteByte('\n')
		}
		return nil
	})
	require.NoError(t, err)
	return b.String()
}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	// A Go-like name: ident(.ident)* with an optional package path before it and optional ().
	nameLike = regexp.MustCompile(`^([a-z0-9_]+(?:/[a-z0-9_]+)*\.)?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?$`)
	pathLike = regexp.MustCompile(`^[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)+/?$`)
	// A file by its name: checked as a path, or by its base name anywhere in the tree.
	fileLike = regexp.MustCompile(`^(?:[A-Za-z0-9_.\-]+/)*[A-Za-z0-9_\-]+\.(?:go|c|h|lua|sh|md|tsv|sql|conf|service|timer|yaml|json|yml)$`)
	allCaps  = regexp.MustCompile(`^[A-Z0-9_]+$`)
)

// checkName says why the name n (a code span) names nothing, or "" when it names something.
func (x *goIndex) checkName(n, other string) string {
	n = strings.TrimSuffix(n, "()")
	pkgPath := ""
	if i := strings.LastIndex(n, "/"); i >= 0 {
		j := strings.Index(n[i:], ".")
		if j < 0 {
			return ""
		}
		pkgPath, n = n[:i+j], n[i+j+1:]
	}
	parts := strings.Split(n, ".")
	inPkg := func(pkg string, rest []string) bool {
		names, ok := x.pkgs[pkg]
		if !ok || !names[rest[0]] {
			return false
		}
		if len(rest) == 1 {
			return true
		}
		return len(rest) == 2 && x.members[pkg][rest[0]][rest[1]]
	}
	if pkgPath != "" {
		if !inPkg(pkgPath, parts) {
			return "no " + strings.Join(parts, ".") + " in package " + pkgPath
		}
		return ""
	}
	switch len(parts) {
	case 1:
		if x.any[parts[0]] || x.pkgs[parts[0]] != nil || wordIn(other, parts[0]) {
			return ""
		}
		return "declared nowhere (Go, C, Lua, shell, SQL)"
	case 2, 3:
		// pkg.Name, pkg.Type.Member, or Type.Member in any package.
		if inPkg(parts[0], parts[1:]) {
			return ""
		}
		if len(parts) == 2 {
			for _, types := range x.members {
				if types[parts[0]][parts[1]] {
					return ""
				}
			}
		}
		return "no such package member, method or field"
	}
	return "too many parts"
}

// fileExists: the path from the root, or a file of that base name anywhere in the tree.
func fileExists(p string) bool {
	if _, err := os.Stat(filepath.Join(repoRoot, p)); err == nil {
		return true
	}
	if strings.Contains(p, "/") {
		return false
	}
	found := false
	_ = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == p {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

func wordIn(text, w string) bool {
	return regexp.MustCompile(`\b` + regexp.QuoteMeta(w) + `\b`).MatchString(text)
}

// TestArchitectureNamesExist: every function, type, file and package that docs/architecture.md names in code spans
// exists. Plain lower-case words (event and state names), ALL_CAPS words (environment variables) and spans with
// spaces or punctuation (commands, requests) are prose, not names, and are not checked.
func TestArchitectureNamesExist(t *testing.T) {
	checkDoc(t, "docs/architecture.md")
}

func checkDoc(t *testing.T, doc string) {
	data, err := os.ReadFile(filepath.Join(repoRoot, doc))
	require.NoError(t, err)
	x := loadGo(t)
	other := otherSources(t)
	checked := 0
	for _, m := range codeSpan.FindAllStringSubmatch(string(data), -1) {
		span := m[1]
		switch {
		case fileLike.MatchString(span):
			checked++
			if !fileExists(span) {
				t.Errorf("%s names %q: no such file", doc, span)
			}
		case pathLike.MatchString(span) && !nameLike.MatchString(span):
			checked++
			p := strings.TrimSuffix(span, "/")
			if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
				t.Errorf("%s names %q: no such file or folder", doc, span)
			}
		case nameLike.MatchString(span) && !allCaps.MatchString(span):
			bare := strings.TrimSuffix(span, "()")
			if !strings.ContainsAny(bare, "./_") && strings.ToLower(bare) == bare {
				continue // a plain word: an event, a state, a setting
			}
			checked++
			if why := x.checkName(span, other); why != "" {
				t.Errorf("%s names %q: %s", doc, span, why)
			}
		}
	}
	// A document whose spans all fell through would pass for nothing.
	require.Greater(t, checked, 30, "%s: too few names checked; is the parser still reading its spans?", doc)
	t.Logf("%s: %d names checked", doc, checked)
}

// Every package of the module is in the document's package table (named in a code span), so that a new package
// cannot be added without a line saying what it holds.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs/architecture.md"))
	require.NoError(t, err)
	named := map[string]bool{}
	for _, m := range codeSpan.FindAllStringSubmatch(string(data), -1) {
		named[strings.TrimSuffix(m[1], "/")] = true
	}
	dirs := map[string]bool{}
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "build" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	for dir := range dirs {
		if !named[dir] {
			t.Errorf("docs/architecture.md's package table does not name the package %q", dir)
		}
	}
}
