package main

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// modulePath is the module's path: the prefix of robotsgate's own packages.
const modulePath = "github.com/robotsgate/robotsgate"

// importTableDoc is the file whose table of packages TestImportTable holds
// to the code.
const importTableDoc = "docs/development.md"

// TestImportTable holds the table of imports in docs/development.md
// ("Packages") to what go list says each package imports of robotsgate's
// own (non-test files): a package added, removed, or importing another
// one fails here with the row to write.
func TestImportTable(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH: the import table cannot be checked against go list")
	}
	cmd := exec.CommandContext(t.Context(), goCmd, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	got, err := parseGoList(out)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(importTableDoc)
	if err != nil {
		t.Fatal(err)
	}
	want, err := parseImportTable(doc)
	if err != nil {
		t.Fatalf("%s: %v", importTableDoc, err)
	}
	for _, msg := range diffImportTable(got, want) {
		t.Error(msg)
	}
}

// TestOfflineLinksNoRedis: the offline report command, and the packages
// it and the config checks stand on, do not link the Redis client: only
// the fleet's wiring (cluster, proxy, main) does.
func TestOfflineLinksNoRedis(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH: what report links cannot be listed")
	}
	for _, pkg := range []string{"./report", "./proxy/policy", "./proxy/audit", "./proxy/config"} {
		cmd := exec.CommandContext(t.Context(), goCmd, "list", "-deps", pkg)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.Bytes())
		}
		for dep := range strings.FieldsSeq(string(out)) {
			if strings.HasPrefix(dep, "github.com/redis/") {
				t.Errorf("go list -deps %s lists %s: it links the Redis client (a check of [cluster] belongs to cluster.CheckConfig, handed to policy.Compile)", pkg, dep)
				break
			}
		}
	}
}

// parseGoList reads go list's lines ("path import import ...") into each
// package's imports of this module, both named as the table names them
// (shortName).
func parseGoList(out []byte) (map[string][]string, error) {
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		pkg, ok := shortName(fields[0])
		if !ok {
			return nil, fmt.Errorf("go list named %q, outside %s", fields[0], modulePath)
		}
		imports := []string{}
		for _, imp := range fields[1:] {
			if name, ok := shortName(imp); ok {
				imports = append(imports, name)
			}
		}
		slices.Sort(imports)
		pkgs[pkg] = imports
	}
	return pkgs, sc.Err()
}

// shortName returns a package of this module as the table names it: its
// path below the module ("proxy/policy"), or "main" for the module's root.
func shortName(path string) (string, bool) {
	if path == modulePath {
		return "main", true
	}
	rest, ok := strings.CutPrefix(path, modulePath+"/")
	return rest, ok
}

// parseImportTable reads the table whose header is "| package | imports
// (of robotsgate's) |": one row per package, its imports in backquotes,
// comma-separated, or "none".
func parseImportTable(doc []byte) (map[string][]string, error) {
	const header = "| package | imports (of robotsgate's) |"
	pkgs := map[string][]string{}
	in := false
	for i, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == header:
			in = true
			continue
		case !in:
			continue
		case strings.HasPrefix(line, "|---"):
			continue
		case !strings.HasPrefix(line, "|"):
			if len(pkgs) == 0 {
				return nil, fmt.Errorf("line %d: no row after the table's header", i+1)
			}
			return pkgs, nil
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 2 {
			return nil, fmt.Errorf("line %d: %q: want two cells, | `package` | `import`, `import` |", i+1, line)
		}
		names, err := tableNames(cells[0])
		if err != nil || len(names) != 1 {
			return nil, fmt.Errorf("line %d: %q: want one package in backquotes", i+1, cells[0])
		}
		imports := []string{}
		if strings.TrimSpace(cells[1]) != "none" {
			if imports, err = tableNames(cells[1]); err != nil || len(imports) == 0 {
				return nil, fmt.Errorf("line %d: %q: want imports in backquotes, comma-separated, or none", i+1, cells[1])
			}
		}
		slices.Sort(imports)
		if _, dup := pkgs[names[0]]; dup {
			return nil, fmt.Errorf("line %d: %s has a row already", i+1, names[0])
		}
		pkgs[names[0]] = imports
	}
	if !in {
		return nil, fmt.Errorf("no table headed %q", header)
	}
	return pkgs, nil
}

// tableNames splits a cell such as "`proxy`, `cluster`" into its names.
func tableNames(cell string) ([]string, error) {
	var names []string
	for part := range strings.SplitSeq(cell, ",") {
		part = strings.TrimSpace(part)
		n, ok := strings.CutPrefix(part, "`")
		if n, ok2 := strings.CutSuffix(n, "`"); ok && ok2 && n != "" && !strings.Contains(n, "`") {
			names = append(names, n)
			continue
		}
		return nil, fmt.Errorf("%q is not a name in backquotes", part)
	}
	return names, nil
}

// diffImportTable returns a message for each package whose row in the
// table (want) is not what go list says (got): missing, extra or wrong,
// each with the row to write.
func diffImportTable(got, want map[string][]string) []string {
	var msgs []string
	for _, pkg := range slices.Sorted(maps.Keys(got)) {
		imports := got[pkg]
		w, ok := want[pkg]
		switch {
		case !ok:
			msgs = append(msgs, fmt.Sprintf("%s: package %s has no row in the table; add:\n%s", importTableDoc, pkg, tableRow(pkg, imports)))
		case !slices.Equal(w, imports):
			missing, extra := setDiff(imports, w), setDiff(w, imports)
			var what []string
			if len(missing) > 0 {
				what = append(what, "imports "+strings.Join(missing, ", ")+" (not in its row)")
			}
			if len(extra) > 0 {
				what = append(what, "does not import "+strings.Join(extra, ", ")+" (in its row)")
			}
			msgs = append(msgs, fmt.Sprintf("%s: package %s %s; its row should be:\n%s", importTableDoc, pkg, strings.Join(what, " and "), tableRow(pkg, imports)))
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[pkg]; !ok {
			msgs = append(msgs, fmt.Sprintf("%s: the table has a row for %s, which go list does not know: remove it", importTableDoc, pkg))
		}
	}
	return msgs
}

// tableRow writes pkg's row of the table.
func tableRow(pkg string, imports []string) string {
	cell := "none"
	if len(imports) > 0 {
		cell = "`" + strings.Join(imports, "`, `") + "`"
	}
	return "| `" + pkg + "` | " + cell + " |"
}

// setDiff returns the names of a not in b (both sorted).
func setDiff(a, b []string) []string {
	var d []string
	for _, x := range a {
		if _, found := slices.BinarySearch(b, x); !found {
			d = append(d, x)
		}
	}
	return d
}

// TestDiffImportTable: each difference names the package and what to
// write, and the row written reads back as what go list said.
func TestDiffImportTable(t *testing.T) {
	t.Parallel()
	got := map[string][]string{
		"main":        {"proxy", "usage"},
		"proxy":       {"robots"},
		"usage":       {},
		"usage/rsl":   {"robots", "usage"},
		"robots":      {},
		"proxy/other": {},
	}
	want := map[string][]string{
		"main":   {"proxy", "report"},
		"proxy":  {"robots"},
		"robots": {},
		"report": {},
	}
	msgs := diffImportTable(got, want)
	for _, w := range []string{
		"package main imports usage (not in its row) and does not import report (in its row); its row should be:\n| `main` | `proxy`, `usage` |",
		"package proxy/other has no row in the table; add:\n| `proxy/other` | none |",
		"package usage has no row in the table; add:\n| `usage` | none |",
		"package usage/rsl has no row in the table; add:\n| `usage/rsl` | `robots`, `usage` |",
		"the table has a row for report, which go list does not know: remove it",
	} {
		if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, w) }) {
			t.Errorf("diffImportTable: no message with %q in:\n%s", w, strings.Join(msgs, "\n"))
		}
	}
	if len(msgs) != 5 {
		t.Errorf("diffImportTable: %d messages; want 5:\n%s", len(msgs), strings.Join(msgs, "\n"))
	}
	doc := "| package | imports (of robotsgate's) |\n|---|---|\n"
	for _, pkg := range slices.Sorted(maps.Keys(got)) {
		doc += tableRow(pkg, got[pkg]) + "\n"
	}
	back, err := parseImportTable([]byte(doc + "\ntext\n"))
	if err != nil {
		t.Fatalf("parseImportTable(rows tableRow wrote): %v", err)
	}
	if msgs := diffImportTable(got, back); len(msgs) > 0 {
		t.Errorf("the rows tableRow wrote read back otherwise:\n%s", strings.Join(msgs, "\n"))
	}
}
