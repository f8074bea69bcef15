#!/usr/bin/env bash
# make release VERSION=vX.Y.Z (RELEASING.md): checks that CHANGELOG.md has
# the release's section and that its API may follow the last release's,
# records the API in api/VERSION.txt and dates the section (the release
# commit), tags that commit with an annotated tag (locally: pushing is
# yours), then names the commit in the section and opens the next patch
# version in Unreleased (a second commit: a commit cannot hold its own
# hash).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "release: $*" >&2; exit 1; }

version=${1:-}
[[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$ ]] ||
	die "usage: make release VERSION=vX.Y.Z (got '$version')"
number=${version#v}
next_patch="v${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.$((BASH_REMATCH[3] + 1))"
placeholder='Commit: (filled in by make release)'

[ -z "$(git status --porcelain)" ] || die "the worktree has changes: commit or stash them first"
if git rev-parse -q --verify "refs/tags/$version" >/dev/null; then
	die "tag $version exists already"
fi

# The release's section: "## [X.Y.Z]" (make release adds the date) or
# "## [X.Y.Z] - YYYY-MM-DD", with the placeholder line of its commit.
heading="^## \[${number//./\\.}\]( - [0-9]{4}-[0-9]{2}-[0-9]{2})?\$"
grep -Eq "$heading" CHANGELOG.md || die "CHANGELOG.md has no section '## [$number]' (move the Unreleased changes into it first)"
grep -Eq '^## \[Unreleased\]$' CHANGELOG.md || die "CHANGELOG.md has no '## [Unreleased]' section"
section() {
	awk -v n="$number" '
		index($0, "## [" n "]") == 1 { p = 1; print; next }
		p && /^## / { exit }
		p { print }' CHANGELOG.md
}
section | grep -qxF "$placeholder" || die "the section of $number has no line '$placeholder'"

# The API may go from the release before this one to this one.
go run ./tools/apicount -check api -version "$version"

# The release commit: the API and the section's date.
go run ./tools/apicount -dump >"api/$version.txt"
sed -i -E "s/^## \[${number//./\\.}\]\$/## [$number] - $(date -u +%F)/" CHANGELOG.md
git add "api/$version.txt" CHANGELOG.md
if ! git diff --cached --quiet; then
	git commit -q -m "release $version: its API in api/$version.txt, its date in CHANGELOG.md"
fi
commit=$(git rev-parse HEAD)

# The tag, whose message is the section (verbatim: its headings start
# with #, which git's default cleanup would strip as comments).
{ printf 'lsmstats %s\n\n' "$version"; section | grep -vxF "$placeholder"; } |
	git tag -a --cleanup=verbatim "$version" -F - "$commit"

# The commit named in the section, and the next version opened.
sed -i -E "/^## \[${number//./\\.}\] - /,/^## /s/^Commit: \(filled in by make release\)\$/Commit: $commit (tag $version)/" CHANGELOG.md
sed -i -E "/^## \[Unreleased\]\$/,/^## \[/s/^Next version: .*/Next version: $next_patch/" CHANGELOG.md
git add CHANGELOG.md
git commit -q -m "CHANGELOG: $version is commit ${commit:0:12}; Unreleased opens $next_patch"

echo "release: tagged $version at $commit; CHANGELOG.md names it in $(git rev-parse --short HEAD)."
echo "release: push both: git push origin HEAD $version"
