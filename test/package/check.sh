#!/usr/bin/env bash
# test/package/check.sh VERSION DEB RPM: what `make test-package` asserts of the packages. Each holds every
# artefact at its place with the version in its metadata; the binary in the .deb prints the version; the
# plugin carries it; the man page renders. Then the .deb is installed on this host (dpkg -i) and the installed
# binary and man page are checked in place.
set -euo pipefail
# No `cmd | grep -q` below: grep -q stops reading early, the writer dies of SIGPIPE, and pipefail fails the line.
version=$1 deb=$2 rpm=$3
fail() { echo "test-package: FAIL: $*" >&2; exit 1; }
[ -s "$deb" ] || fail "$deb was not built"
[ -s "$rpm" ] || fail "$rpm was not built"
want=(
	/usr/bin/juice-slurm
	/usr/lib/juice-slurm/juice-slurm
	/usr/lib/juice-slurm/juice-slurm-hook
	/usr/lib/juice-slurm/juice-sim
	/usr/lib/juice-slurm/spank_juice.so
	/usr/lib/juice-slurm/juice-prolog.sh
	/usr/lib/juice-slurm/juice-epilog.sh
	/usr/lib/juice-slurm/slurmctld-parts.sh
	/usr/lib/juice-slurm/juice-slurm-token-renew
	/usr/share/juice-slurm/job_submit.lua
	/usr/share/juice-slurm/juice_submit.lua
	/usr/share/juice-slurm/make-secrets.sh
	/usr/share/juice-slurm/make-hook-cert.sh
	/usr/share/juice-slurm/examples/juice-config.sh
	/usr/share/juice-slurm/examples/juice-policy.conf
	/usr/share/juice-slurm/examples/juice-slurm.conf
	/usr/share/juice-slurm/examples/plugstack.conf.d-juice.conf
	/usr/share/juice-slurm/examples/slurm.conf.juice
	/usr/share/juice-slurm/monitoring/juice-slurm-alerts.yml
	/usr/share/juice-slurm/monitoring/juice-slurm-dashboard.json
	/usr/lib/systemd/system/juice-slurm-controller.service
	/usr/lib/systemd/system/juice-slurm-token-renew.service
	/usr/lib/systemd/system/juice-slurm-token-renew.timer
	/usr/share/man/man8/juice-slurm.8.gz
	/usr/share/doc/juice-slurm/README.md
	/usr/share/doc/juice-slurm/LICENSE
	/usr/share/doc/juice-slurm/CHANGELOG.md
	/etc/juice-slurm/juice-slurm.conf
)
debfiles=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's#^\.##; s# -> .*##')
rpmfiles=$(rpm2cpio "$rpm" | cpio -t --quiet 2>/dev/null | sed 's#^\.##')
for f in "${want[@]}"; do
	grep -qxF "$f" <<<"$debfiles" || fail "$deb lacks $f"
	grep -qxF "$f" <<<"$rpmfiles" || fail "$rpm lacks $f"
done
[ "$(dpkg-deb -f "$deb" Version)" = "$version-1" ] || fail "$deb has version $(dpkg-deb -f "$deb" Version), not $version-1"
[ "$(dpkg-deb -f "$deb" Package)" = juice-slurm ] || fail "$deb is not named juice-slurm"
grep -qxF /etc/juice-slurm/juice-slurm.conf <<<"$(dpkg-deb -I "$deb" conffiles)" || fail "$deb: the settings file is not a conffile"
grep -q "^juice-slurm-$version-1.x86_64.rpm$" <<<"$(basename "$rpm")" || fail "$rpm is not version $version-1"
echo "test-package: both packages hold the ${#want[@]} paths; versions $version-1"

x=$(mktemp -d)
trap 'rm -rf "$x"' EXIT
dpkg-deb -x "$deb" "$x"
said=$("$x/usr/lib/juice-slurm/juice-slurm" version --config=)
[[ $said == "juice-slurm $version ("* ]] || fail "the packaged binary says: $said"
grep -qxF "$version" <<<"$(strings -n 1 "$x/usr/lib/juice-slurm/spank_juice.so")" || fail "the packaged plugin does not carry $version"
grep -q "^ExecStart=/usr/lib/juice-slurm/juice-slurm controller" "$x/usr/lib/systemd/system/juice-slurm-controller.service" ||
	fail "the packaged unit does not run /usr/lib/juice-slurm/juice-slurm"
grep -q "^JUICE_SLURM_BIN=/usr/lib/juice-slurm/juice-slurm$" "$x/usr/share/juice-slurm/examples/juice-config.sh" ||
	fail "the packaged juice-config.sh does not name /usr/lib/juice-slurm/juice-slurm"
grep -q "^JUICE_HOOK_BIN=/usr/lib/juice-slurm/juice-slurm-hook$" "$x/usr/share/juice-slurm/examples/juice-config.sh" ||
	fail "the packaged juice-config.sh does not name /usr/lib/juice-slurm/juice-slurm-hook"
# The hook binary is static (no dynamic loader: its start is every prolog's floor) and runs (a plain job's
# prolog passes without a call).
if grep -q INTERP <<<"$(readelf -l "$x/usr/lib/juice-slurm/juice-slurm-hook")"; then
	fail "the packaged juice-slurm-hook is linked dynamically (build it with CGO_ENABLED=0)"
fi
env -i SLURM_JOB_ID=1 SLURM_CLUSTER_NAME=c JUICE_CONFIG= "$x/usr/lib/juice-slurm/juice-slurm-hook" prolog ||
	fail "the packaged juice-slurm-hook failed a plain job's prolog"
grep -qF "\"juice-slurm $version\"" <<<"$(zcat "$x/usr/share/man/man8/juice-slurm.8.gz")" || fail "the man page does not carry $version"
warn=$(zcat "$x/usr/share/man/man8/juice-slurm.8.gz" | groff -man -ww -z 2>&1) && [ -z "$warn" ] || fail "the man page: $warn"
echo "test-package: the packaged binary, plugin, unit, hooks' settings and man page carry version $version and /usr paths"

# Install the .deb here. Its settings file is all comments (every default), so nothing on this host changes
# behaviour; an existing one is kept (--force-confold).
DEBIAN_FRONTEND=noninteractive dpkg -i --force-confold "$deb" >/dev/null
[ "$(dpkg-query -W -f '${Version}' juice-slurm)" = "$version-1" ] || fail "dpkg does not show juice-slurm $version-1 installed"
[ "$(juice-slurm version --config= | head -1)" = "$(/usr/lib/juice-slurm/juice-slurm version --config= | head -1)" ] || fail "/usr/bin/juice-slurm is not the installed binary"
[ "$(man -w juice-slurm)" = /usr/share/man/man8/juice-slurm.8.gz ] || fail "man juice-slurm does not find the page"
echo "test-package: installed $(dpkg-query -W -f '${Package} ${Version}' juice-slurm); $(juice-slurm version --config= | head -1)"
