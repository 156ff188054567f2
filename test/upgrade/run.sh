#!/bin/bash
# The upgrades make test and make chaos-upgrade run (test/upgrade/upgrade.sh, one per release upgraded from):
#
#   test/upgrade/run.sh short   from the first release and from the last release of the schema before this
#                               checkout's, 16 live runs each (make test-upgrade, in make test)
#   test/upgrade/run.sh long    from the last release of every schema, 200 live runs each (make chaos-upgrade)
#
# The releases come from the history, so that a new migration brings its own upgrade test without an edit here:
# the first release is e80d7ac (schema 2, the first on main); the last release of schema N-1 is the parent of
# the commit that added migration N. Needs the git history (a full clone).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
FIRST=e80d7ac
mode=${1:-short}
git -C "$REPO" cat-file -e "$FIRST^{commit}" 2>/dev/null ||
	{ echo "test/upgrade: the first release $FIRST is not in this clone (the upgrade test needs the history)" >&2; exit 1; }
# The last release of each schema since the first release's: the parents of the commits that added migrations 4
# and later (migrations 1 to 3 were added, or moved, by commits that come after the first release's).
lasts=()
for f in $(git -C "$REPO" ls-files 'reconcile/store/migrations/*.sql' | sort); do
	n=$(basename "$f" | sed 's/^0*\([0-9]*\)_.*/\1/')
	[ "$n" -ge 4 ] || continue
	added=$(git -C "$REPO" log --diff-filter=A --format=%H -1 -- "$f")
	[ -n "$added" ] || { echo "test/upgrade: $f: no commit added it (a shallow clone?)" >&2; exit 1; }
	lasts+=("$(git -C "$REPO" rev-parse --short=12 "$added^")")
done
case $mode in
short) refs=("$FIRST" "${lasts[-1]}") runs=16 ;;
long) refs=("$FIRST" "${lasts[@]}") runs=200 ;;
*) echo "usage: $0 short|long" >&2; exit 2 ;;
esac
echo "test/upgrade: upgrades from ${refs[*]}, $runs live runs each" >&2
rows=()
for ref in "${refs[@]}"; do
	rows+=("$(bash "$REPO/test/upgrade/upgrade.sh" "$ref" "$runs")")
done
# UPGRADE_OUT=FILE keeps the figures (make chaos-upgrade: test/results/upgrade.md).
table() {
	echo "| from | its schema | it migrated | its hook API | live runs | ended / running / reserved ahead / waiting in the prolog / pending / requesting / releasing at the upgrade | migrate to hooks switched | jobs after it, to the last end | old binary on the new schema | requeued | lost | doubled | left open |"
	echo "|---|---:|---|---|---:|---|---:|---:|---|---:|---:|---:|---:|"
	printf '%s\n' "${rows[@]}"
}
table >&2
if [ -n "${UPGRADE_OUT:-}" ]; then
	{
		echo "# Upgrades with live jobs (make chaos-upgrade)"
		echo
		echo "test/upgrade/run.sh $mode at $(git -C "$REPO" rev-parse --short=12 HEAD), $(date -u '+%Y-%m-%d %H:%M') UTC, on the 22.05 host test bed"
		echo "(2 cores): each release installed as it was, then this checkout's migrate, the two replicas restarted one at"
		echo "a time and the hooks switched (docs/admin.md section 8). Every job completed with exit 0 and its session;"
		echo "each running job's step after the upgrade saw the session the old release had sealed for it."
		echo
		table
	} >"$UPGRADE_OUT"
fi
