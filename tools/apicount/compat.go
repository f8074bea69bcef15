package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// version is a semantic version vMAJOR.MINOR.PATCH.
type version struct{ major, minor, patch int }

var versionRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$`)

// parseVersion parses vMAJOR.MINOR.PATCH (no pre-release or build part).
func parseVersion(s string) (version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return version{}, fmt.Errorf("%q is not a version vMAJOR.MINOR.PATCH", s)
	}
	var v version
	v.major, _ = strconv.Atoi(m[1])
	v.minor, _ = strconv.Atoi(m[2])
	v.patch, _ = strconv.Atoi(m[3])
	return v, nil
}

func (v version) String() string { return fmt.Sprintf("v%d.%d.%d", v.major, v.minor, v.patch) }

func (v version) less(w version) bool {
	if v.major != w.major {
		return v.major < w.major
	}
	if v.minor != w.minor {
		return v.minor < w.minor
	}
	return v.patch < w.patch
}

// breaks reports whether going from v to next may break compatibility:
// a new major version, or, before v1 (Go's convention for v0), a new
// minor one.
func (v version) breaks(next version) bool {
	if next.major != v.major {
		return next.major > v.major
	}
	return v.major == 0 && next.minor > v.minor
}

// adds reports whether going from v to next may add to the API: any
// version above v before v1, a new minor or major one from v1 on.
func (v version) adds(next version) bool {
	if v.major == 0 {
		return v.less(next)
	}
	return next.major > v.major || (next.major == v.major && next.minor > v.minor)
}

// releases returns the versions whose API dir holds (files vX.Y.Z.txt),
// in increasing order.
func releases(dir string) ([]version, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []version
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".txt")
		if !ok || e.IsDir() {
			continue
		}
		v, err := parseVersion(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].less(out[j]) })
	return out, nil
}

// readDump reads an API dump: its lines but blank ones and # comments.
func readDump(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out, sc.Err()
}

// nextVersionRE is the line of the CHANGELOG's Unreleased section that
// declares the version the unreleased changes go into.
var nextVersionRE = regexp.MustCompile(`^Next version:\s*(\S+)`)

// declaredVersion returns the version the Unreleased section of a Keep a
// Changelog file declares on its "Next version: vX.Y.Z" line; ok is false
// when it declares none. A file without an Unreleased section is an error.
func declaredVersion(changelog string) (v version, ok bool, err error) {
	f, err := os.Open(changelog)
	if err != nil {
		return version{}, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in, found := false, false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "## ") {
			in = strings.HasPrefix(strings.ToLower(line), "## [unreleased]")
			found = found || in
			continue
		}
		if !in {
			continue
		}
		if m := nextVersionRE.FindStringSubmatch(line); m != nil {
			v, err := parseVersion(strings.Trim(m[1], "`*"))
			if err != nil {
				return version{}, false, fmt.Errorf("%s: Next version: %w", changelog, err)
			}
			return v, true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return version{}, false, err
	}
	if !found {
		return version{}, false, fmt.Errorf("%s: no \"## [Unreleased]\" section", changelog)
	}
	return version{}, false, nil
}

// diff is what changed between two API dumps.
type diff struct {
	removed []string // the older's lines the newer lacks: incompatible
	added   []string // the newer's lines the older lacks: compatible
}

// compareAPI compares a release's dump with the current one. A method of
// a pointer method set ("method *T.M ...") that is now in the value method
// set with the same signature ("method T.M ...") is still there.
func compareAPI(old, cur []string) diff {
	have := map[string]bool{}
	for _, l := range cur {
		have[l] = true
	}
	had := map[string]bool{}
	for _, l := range old {
		had[l] = true
	}
	var d diff
	for _, l := range old {
		if have[l] {
			continue
		}
		if pkg, rest, ok := strings.Cut(l, ": method *"); ok && have[pkg+": method "+rest] {
			continue
		}
		d.removed = append(d.removed, l)
	}
	for _, l := range cur {
		if !had[l] {
			d.added = append(d.added, l)
		}
	}
	return d
}

// objectKey is the part of a dump line that names its object: package,
// kind and name.
func objectKey(line string) string {
	f := strings.SplitN(line, " ", 4)
	if len(f) < 3 {
		return line
	}
	return strings.Join(f[:3], " ")
}

// report writes a diff for a person: each object whose line changed, with
// its old and new line, each removed object, and (when verbose) each added
// line.
func (d diff) report(verbose bool) string {
	var b strings.Builder
	now := map[string]string{}
	for _, l := range d.added {
		now[objectKey(l)] = l
	}
	changed := map[string]bool{}
	for _, l := range d.removed {
		if n, ok := now[objectKey(l)]; ok {
			fmt.Fprintf(&b, "  changed: %s\n       to: %s\n", l, n)
			changed[objectKey(l)] = true
		} else {
			fmt.Fprintf(&b, "  removed: %s\n", l)
		}
	}
	if verbose {
		for _, l := range d.added {
			if !changed[objectKey(l)] {
				fmt.Fprintf(&b, "  added:   %s\n", l)
			}
		}
	}
	return b.String()
}

// verdict decides whether the API may go from release base to next with
// diff d: an incompatible change needs next to break compatibility with
// base (a new major version, a new minor one before v1), an addition needs
// next to add to it (any higher version before v1, a new minor or major
// one from v1 on). declared is false when no next version was declared:
// then only an API equal to the release's passes, or one that adds to it
// before v1. It returns nil when the change is allowed.
func verdict(base version, next version, declared bool, d diff) error {
	if declared && !base.less(next) {
		return fmt.Errorf("the next version %s is not above the last release %s", next, base)
	}
	switch {
	case len(d.removed) > 0 && !declared:
		return fmt.Errorf("%d incompatible changes since %s, and the CHANGELOG's Unreleased section declares no next version (a breaking one: %s)",
			len(d.removed), base, breakingAfter(base))
	case len(d.removed) > 0 && !base.breaks(next):
		return fmt.Errorf("%d incompatible changes since %s need a breaking version (%s or later), not %s",
			len(d.removed), base, breakingAfter(base), next)
	case len(d.added) > 0 && base.major > 0 && (!declared || !base.adds(next)):
		return fmt.Errorf("%d additions since %s need a new minor version (v%d.%d.0), not %s",
			len(d.added), base, base.major, base.minor+1, nextOr(next, declared))
	}
	return nil
}

func nextOr(v version, declared bool) string {
	if !declared {
		return "no declared version"
	}
	return v.String()
}

// breakingAfter is the smallest version that may break base's API.
func breakingAfter(base version) version {
	if base.major == 0 {
		return version{0, base.minor + 1, 0}
	}
	return version{base.major + 1, 0, 0}
}

// checkAPI holds the module in dir to the last release whose API apiDir
// records: the release below next when a next version is given (make
// release), else the newest one, with the next version the CHANGELOG's
// Unreleased section declares. It writes what it compared and found to
// out, and returns an error when the change is not allowed.
func checkAPI(dir, apiDir, changelog, nextFlag string, verbose bool, out *strings.Builder) error {
	var next version
	declared := false
	if nextFlag != "" {
		v, err := parseVersion(nextFlag)
		if err != nil {
			return err
		}
		next, declared = v, true
	} else if changelog != "" {
		v, ok, err := declaredVersion(changelog)
		if err != nil {
			return err
		}
		next, declared = v, ok
	}
	vs, err := releases(apiDir)
	if err != nil {
		return err
	}
	// make release compares with the newest release below the one it
	// makes (whose API it may have recorded already); make apicheck with
	// the newest, which the declared version must be above.
	var base *version
	for i := range vs {
		if nextFlag == "" || vs[i].less(next) {
			base = &vs[i]
		}
	}
	if base == nil {
		fmt.Fprintf(out, "apicheck: no release before %s in %s: nothing to compare with\n", nextOr(next, declared), apiDir)
		return nil
	}
	old, err := readDump(filepath.Join(apiDir, base.String()+".txt"))
	if err != nil {
		return err
	}
	cur, err := dumpAPI(dir)
	if err != nil {
		return err
	}
	d := compareAPI(old, cur)
	fmt.Fprintf(out, "apicheck: the API against %s (%s): %d incompatible changes, %d additions; next version %s\n",
		base, filepath.Join(apiDir, base.String()+".txt"), len(d.removed), len(d.added), nextOr(next, declared))
	out.WriteString(d.report(verbose))
	return verdict(*base, next, declared, d)
}
