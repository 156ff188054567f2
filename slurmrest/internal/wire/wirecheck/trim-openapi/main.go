// Command trim-openapi checks the wire types against a full OpenAPI document served by slurmrestd
// (GET /openapi/v3) and writes the trimmed schemas of each API version it holds to
// OUTDIR/RELEASE-VERSION.json, for the offline test. See slurmrest/testdata/record.sh.
//
//	go run ./slurmrest/internal/wire/wirecheck/trim-openapi -in openapi.json -release 24.11 -out slurmrest/testdata/openapi
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/juice-slurm/juice-slurm/slurmrest/internal/wire/wirecheck"
)

func main() {
	in := flag.String("in", "", "full OpenAPI document (JSON)")
	release := flag.String("release", "", "Slurm release that served it, e.g. 24.11")
	out := flag.String("out", "", "output directory")
	versions := flag.String("versions", "", "comma-separated API versions (default: every supported one in the document)")
	flag.Parse()
	if *in == "" || *release == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	b, err := os.ReadFile(*in)
	check(err)
	var doc wirecheck.Doc
	check(json.Unmarshal(b, &doc))

	want := map[string]bool{}
	if *versions != "" {
		for _, v := range strings.Split(*versions, ",") {
			want[v] = true
		}
	} else {
		for name := range doc.Components.Schemas {
			if v, _, ok := strings.Cut(name, "_"); ok && strings.HasPrefix(v, "v0.0.") {
				want[v] = true
			}
		}
	}
	var list []string
	for v := range want {
		if v >= "v0.0.36" && v != "v0.0.39" {
			list = append(list, v)
		}
	}
	sort.Strings(list)
	failed := false
	for _, v := range list {
		trimmed, problems := wirecheck.Walk(&doc, v)
		for _, p := range problems {
			fmt.Fprintf(os.Stderr, "%s %s: %s\n", *release, v, p)
			failed = true
		}
		var td wirecheck.Doc
		td.Components.Schemas = trimmed
		ob, err := json.MarshalIndent(td, "", " ")
		check(err)
		path := filepath.Join(*out, *release+"-"+v+".json")
		check(os.MkdirAll(*out, 0o755))
		check(os.WriteFile(path, append(ob, '\n'), 0o644))
		fmt.Printf("%s (%d bytes)\n", path, len(ob))
	}
	if failed {
		os.Exit(1)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
