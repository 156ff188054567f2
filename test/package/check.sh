#!/usr/bin/env bash
# test/package/check.sh VERSION DEB RPM PREV_DEB: what `make test-package` asserts of the packages. Each holds every
# artefact at its place with the version in its metadata, its dependencies and its maintainer scripts; the binary
# in the .deb prints the version; the plugin carries it; the man page renders. Then, on this host (the Makefile
# holds the host lock), the package's life: PREV_DEB (an older package) installed and its settings edited, upgraded
# to DEB (settings kept, owners and modes those of docs/admin.md, the state and log directories made), installed
# again, reconfigured for another SlurmUser and back (/etc/default/juice-slurm), its hook log rotated, removed
# (everything but the programs kept), purged (the state directory and the secrets kept), and installed again: the
# .deb is left installed for make demo-installed.
set -euo pipefail
# No `cmd | grep -q` below: grep -q stops reading early, the writer dies of SIGPIPE, and pipefail fails the line.
version=$1 deb=$2 rpm=$3 prev=$4
repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=test/lib/apt.sh
. "$repo/test/lib/apt.sh"
fail() { echo "test-package: FAIL: $*" >&2; exit 1; }
[ -s "$deb" ] || fail "$deb was not built"
[ -s "$rpm" ] || fail "$rpm was not built"
[ -s "$prev" ] || fail "$prev (the package to upgrade from) was not built"
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
	/usr/lib/juice-slurm/juice-slurm-setup
	/usr/lib/systemd/system-generators/juice-slurm-generator
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
	/usr/share/man/man1/juice-slurm.1.gz
	/usr/share/man/man8/juice-slurm.8.gz
	/usr/share/doc/juice-slurm/README.md
	/usr/share/doc/juice-slurm/LICENSE
	/usr/share/doc/juice-slurm/CHANGELOG.md
	/etc/juice-slurm/juice-slurm.conf
	/etc/default/juice-slurm
	/etc/logrotate.d/juice-slurm
)
conffiles=(/etc/juice-slurm/juice-slurm.conf /etc/default/juice-slurm /etc/logrotate.d/juice-slurm)
debfiles=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's#^\.##; s# -> .*##')
rpmfiles=$(rpm2cpio "$rpm" | cpio -t --quiet 2>/dev/null | sed 's#^\.##')
for f in "${want[@]}"; do
	grep -qxF "$f" <<<"$debfiles" || fail "$deb lacks $f"
	grep -qxF "$f" <<<"$rpmfiles" || fail "$rpm lacks $f"
done
[ "$(dpkg-deb -f "$deb" Version)" = "$version-1" ] || fail "$deb has version $(dpkg-deb -f "$deb" Version), not $version-1"
[ "$(dpkg-deb -f "$deb" Package)" = juice-slurm ] || fail "$deb is not named juice-slurm"
for f in "${conffiles[@]}"; do
	grep -qxF "$f" <<<"$(dpkg-deb -I "$deb" conffiles)" || fail "$deb: $f is not a conffile"
done
grep -q "^juice-slurm-$version-1.x86_64.rpm$" <<<"$(basename "$rpm")" || fail "$rpm is not version $version-1"
echo "test-package: both packages hold the ${#want[@]} paths; versions $version-1"

# Dependencies: what the scripts run (munge, openssl, scontrol) and the Slurm release the plugin was built for
# (this host's spank.h), which this host's Slurm satisfies.
v=$(sed -n 's/^#define SLURM_VERSION_NUMBER \(0x[0-9a-fA-F]*\)$/\1/p' "${SLURM_INCLUDE:-/usr/include}/slurm/slurm_version.h")
release=$(printf '%d.%02d' $((v >> 16)) $(((v >> 8) & 255))) next=$(printf '%d.%02d' $((v >> 16)) $((((v >> 8) & 255) + 1)))
depends=$(dpkg-deb -f "$deb" Depends | tr -d ' ' | tr ',' '\n')
for d in libssl3 munge openssl "slurm-client(>=$release)" "slurm-client(<<$next)"; do
	grep -qxF "$d" <<<"$depends" || fail "$deb does not depend on $d: $(dpkg-deb -f "$deb" Depends)"
done
for p in slurm-client munge openssl; do
	dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || fail "this host lacks $p, which $deb depends on"
done
have=$(dpkg-query -W -f '${Version}' slurm-client)
dpkg --compare-versions "$have" ge "$release" && dpkg --compare-versions "$have" lt "$next" ||
	fail "this host's slurm-client $have is not Slurm $release, the release $deb is built for"
# The maintainer scripts are ours, byte for byte.
for s in postinst:deb-postinst prerm:deb-prerm postrm:deb-postrm; do
	cmp -s <(dpkg-deb -I "$deb" "${s%%:*}") "$repo/deploy/package/${s#*:}" || fail "$deb: ${s%%:*} is not deploy/package/${s#*:}"
done
command -v rpm >/dev/null || host_apt install -y --no-install-recommends rpm >/dev/null
requires=$(rpm -qp --requires "$rpm" 2>/dev/null)
for d in openssl-libs openssl munge "slurm >= $release" "slurm < $next"; do
	grep -qxF "$d" <<<"$requires" || fail "$rpm does not require $d: $(tr '\n' ',' <<<"$requires")"
done
scripts=$(rpm -qp --scripts "$rpm" 2>/dev/null)
for s in 'postinstall scriptlet:rpm-post' 'preuninstall scriptlet:rpm-preun' 'postuninstall scriptlet:rpm-postun'; do
	got=$(awk -v want="${s%%:*}" '/^[a-z]+ scriptlet \(using/ { on = index($0, want) == 1; next } on' <<<"$scripts")
	[ "$got" = "$(cat "$repo/deploy/package/${s#*:}")" ] || fail "$rpm: its ${s%%:*} is not deploy/package/${s#*:}"
done
rpmconf=$(rpm -qpc "$rpm" 2>/dev/null)
for f in "${conffiles[@]}"; do grep -qxF "$f" <<<"$rpmconf" || fail "$rpm: $f is not a config file"; done
echo "test-package: depends on munge, openssl and Slurm $release (slurm-client, slurm) as this host has; maintainer scripts in both"

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
for s in 1 8; do
	page=$x/usr/share/man/man$s/juice-slurm.$s.gz
	grep -qF "\"juice-slurm $version\"" <<<"$(zcat "$page")" || fail "juice-slurm($s) does not carry $version"
	warn=$(zcat "$page" | groff -man -ww -z 2>&1) && [ -z "$warn" ] || fail "juice-slurm($s): $warn"
done
echo "test-package: the packaged binary, plugin, unit, hooks' settings and man pages carry version $version and /usr paths"

# The life of the package on this host. Every dpkg run waits for the host's apt lock (test/lib/apt.sh).
dpkg_() { DEBIAN_FRONTEND=noninteractive flock -w 900 "${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}/apt.lock" dpkg "$@"; }
user=slurm group=$(id -gn slurm)
owner() { stat -c '%U:%G %a' "$1" 2>/dev/null || echo missing; }
expect() { # expect STEP PATH 'USER:GROUP MODE'
	[ "$(owner "$2")" = "$3" ] || fail "$1: $2 is $(owner "$2"), not $3"
}
# The directories of docs/admin.md for SlurmUser $1 (group $2).
expect_dirs() {
	expect "$1" /etc/juice-slurm "root:$3 750"
	expect "$1" /etc/juice-slurm/juice-slurm.conf "root:$3 640"
	expect "$1" /var/log/juice-slurm "$2:$3 700"
	expect "$1" /var/spool/juice-slurm/sessions "$user:$group 700"
	expect "$1" /etc/default/juice-slurm "root:root 644"
	expect "$1" /etc/logrotate.d/juice-slurm "root:root 644"
}
# What juice-slurm-setup must never touch: the secrets and the site's files beside the settings.
others() { find /etc/juice-slurm -mindepth 1 ! -name juice-slurm.conf -printf '%p %u:%g %m\n' | sort; }
set_slurm_user() { sed -i "s/^SLURM_USER=.*/SLURM_USER=$1/" /etc/default/juice-slurm; }
# Whatever fails below, this host's SlurmUser is slurm again afterwards: the test bed's hooks read /etc/juice-slurm.
restore() {
	if [ -f /etc/default/juice-slurm ] && ! grep -qx SLURM_USER=slurm /etc/default/juice-slurm; then
		set_slurm_user slurm
		[ ! -x /usr/lib/juice-slurm/juice-slurm-setup ] || /usr/lib/juice-slurm/juice-slurm-setup || true
	fi
	rm -f /etc/systemd/system/multi-user.target.wants/juice-slurm-controller.service \
		/etc/systemd/system/timers.target.wants/juice-slurm-token-renew.timer
	# A purge that took the shared state directory along failed the test; the test bed's hooks still need it.
	[ -d /var/spool/juice-slurm/sessions ] || install -d -o "$user" -g "$group" -m 0700 /var/spool/juice-slurm/sessions
}
trap 'rm -rf "$x"; restore' EXIT

# 0. From nothing: a juice-slurm left by an earlier run is purged.
status=$(dpkg-query -W -f '${db:Status-Status}' juice-slurm 2>/dev/null) || status=not-installed
[ "$status" = not-installed ] || dpkg_ --purge juice-slurm >/dev/null 2>&1
before=$(others)

# 1. The previous package, as a site has it: settings edited.
dpkg_ -i "$prev" >/dev/null
prevv=$(dpkg-query -W -f '${Version}' juice-slurm)
dpkg --compare-versions "$prevv" lt "$version-1" || fail "$prev is version $prevv, not older than $version-1"
echo "# check.sh: an administrator's line, kept on upgrade" >>/etc/juice-slurm/juice-slurm.conf

# 2. Upgrade in place.
dpkg_ -i --force-confold "$deb" >/dev/null
[ "$(dpkg-query -W -f '${Version}' juice-slurm)" = "$version-1" ] || fail "upgrade: dpkg does not show juice-slurm $version-1 installed"
grep -qxF "# check.sh: an administrator's line, kept on upgrade" /etc/juice-slurm/juice-slurm.conf || fail "upgrade: the edited settings file was replaced"
grep -qx SLURM_USER=slurm /etc/default/juice-slurm || fail "upgrade: /etc/default/juice-slurm does not name slurm"
expect_dirs "upgrade from $prevv" "$user" "$group"
# The edited settings file is kept (--force-confold, as an administrator answering "keep"); when the shipped one
# changed between the two versions, dpkg leaves the new one beside it as .dpkg-dist, which the administrator merges.
dist=/etc/juice-slurm/juice-slurm.conf.dpkg-dist
if cmp -s <(dpkg-deb --fsys-tarfile "$prev" | tar -xO ./etc/juice-slurm/juice-slurm.conf) "$x/etc/juice-slurm/juice-slurm.conf"; then
	[ ! -e "$dist" ] || fail "upgrade: $dist left though the shipped settings file did not change"
else
	cmp -s "$dist" "$x/etc/juice-slurm/juice-slurm.conf" || fail "upgrade: the new shipped settings file is not in $dist"
	rm -f "$dist"
fi
[ "$(others)" = "$before" ] || fail "upgrade: files beside the settings changed: $(diff <(echo "$before") <(others))"
# Installed again (an upgrade from this very version): nothing moves.
dpkg_ -i --force-confold "$deb" >/dev/null
expect_dirs reinstall "$user" "$group"
echo "test-package: upgraded $prevv to $version-1: settings kept, /etc/juice-slurm root:$group 0750 (settings 0640), /var/log/juice-slurm and the state directory $user 0700"

# 3. Another SlurmUser (nobody), by its one setting: the directories and the units follow; the state directory,
# a site's (often NFS) mount, is left as it is with a warning. Then slurm again.
nobody_group=$(id -gn nobody)
set_slurm_user nobody
out=$(DEBIAN_FRONTEND=noninteractive flock -w 900 "${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}/apt.lock" dpkg-reconfigure juice-slurm 2>&1) ||
	fail "dpkg-reconfigure juice-slurm for SlurmUser nobody: $out"
expect "SlurmUser nobody" /etc/juice-slurm "root:$nobody_group 750"
expect "SlurmUser nobody" /etc/juice-slurm/juice-slurm.conf "root:$nobody_group 640"
expect "SlurmUser nobody" /var/log/juice-slurm "nobody:$nobody_group 700"
expect "SlurmUser nobody" /var/spool/juice-slurm/sessions "$user:$group 700"
grep -qF "warning: /var/spool/juice-slurm/sessions is owner and mode $user 700" <<<"$out" ||
	fail "SlurmUser nobody: no warning about the state directory of $user: $out"
gen=$x/generator
/usr/lib/systemd/system-generators/juice-slurm-generator "$gen" "$gen.early" "$gen.late"
grep -qx User=nobody "$gen/juice-slurm-controller.service.d/10-slurm-user.conf" || fail "the generator did not make the controller's User=nobody"
grep -qx 'Environment=JUICE_TOKEN_USER=nobody JUICE_TOKEN_OWNER=nobody:' "$gen/juice-slurm-token-renew.service.d/10-slurm-user.conf" ||
	fail "the generator did not give the token renewal nobody's token"
set_slurm_user '"no body"'
if out=$(/usr/lib/juice-slurm/juice-slurm-setup 2>&1); then fail "juice-slurm-setup took SLURM_USER='no body'"; fi
grep -qF "SLURM_USER 'no body' in /etc/default/juice-slurm is not a user name" <<<"$out" || fail "juice-slurm-setup with a bad name said: $out"
rm -rf "$gen" && /usr/lib/systemd/system-generators/juice-slurm-generator "$gen" 2>/dev/null || fail "the generator failed on a bad name (it must write nothing and go on)"
[ ! -e "$gen/juice-slurm-controller.service.d" ] || fail "the generator wrote a drop-in for SLURM_USER='no body'"
set_slurm_user juice-no-such-user
if out=$(/usr/lib/juice-slurm/juice-slurm-setup 2>&1); then fail "juice-slurm-setup took a user that does not exist"; fi
grep -qF "no user 'juice-no-such-user'" <<<"$out" || fail "juice-slurm-setup without the user said: $out"
set_slurm_user slurm
DEBIAN_FRONTEND=noninteractive flock -w 900 "${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}/apt.lock" dpkg-reconfigure juice-slurm >/dev/null 2>&1 ||
	fail "dpkg-reconfigure juice-slurm for SlurmUser slurm"
expect_dirs "SlurmUser slurm again" "$user" "$group"
rm -rf "$gen" && /usr/lib/systemd/system-generators/juice-slurm-generator "$gen"
grep -qx User=slurm "$gen/juice-slurm-controller.service.d/10-slurm-user.conf" || fail "the generator did not make the controller's User=slurm"
[ "$(others)" = "$before" ] || fail "reconfigure: files beside the settings changed: $(diff <(echo "$before") <(others))"
echo "test-package: SLURM_USER in /etc/default/juice-slurm sets the owners (nobody, then slurm) and the units' user; a bad or unknown name is refused"

# 4. The hook log rotated by the packaged logrotate file, in a directory of its own with the owner and mode of
# /var/log/juice-slurm: renamed, never recreated by logrotate; the next hook makes it again, 0600, SlurmUser's.
command -v logrotate >/dev/null || host_apt install -y --no-install-recommends logrotate >/dev/null
grep -qx 'JUICE_HOOK_LOG=/var/log/juice-slurm/hooks.log' /usr/share/juice-slurm/examples/juice-config.sh ||
	fail "juice-config.sh's hook log is not in /var/log/juice-slurm, which the logrotate file rotates"
chmod 0755 "$x"
install -d -o "$user" -g "$group" -m 0700 "$x/log"
sed "s#^/var/log/juice-slurm/#$x/log/#" /etc/logrotate.d/juice-slurm >"$x/logrotate.conf"
hook_says() { # a Juice job's prolog, as slurmctld runs it, that fails at once (no CA file) and logs why
	setpriv --reuid="$user" --regid="$group" --clear-groups env -i SLURM_JOB_ID="$1" SLURM_CLUSTER_NAME=c \
		SPANK_JUICE_REQUEST=juice:v1:pool=p,gpus=1 JUICE_CONFIG= JUICE_HOOK_LOG="$x/log/hooks.log" \
		JUICE_HOOK_CA="$x/no.crt" JUICE_HOOK_URL=https://127.0.0.1:9 JUICE_STATE_DIR="$x/log" \
		/usr/lib/juice-slurm/juice-slurm-hook prolog >/dev/null 2>&1 || true
	grep -q "juice: job $1 run 0: " "$x/log/hooks.log" || fail "the hook (job $1) wrote nothing to $x/log/hooks.log"
}
hook_says 101
expect "hook log" "$x/log/hooks.log" "$user:$group 600"
logrotate -f -s "$x/logrotate.state" "$x/logrotate.conf" 2>"$x/logrotate.err" || fail "logrotate: $(cat "$x/logrotate.err")"
[ ! -e "$x/log/hooks.log" ] || fail "logrotate made a new hooks.log (the hook makes its own)"
expect "rotated once" "$x/log/hooks.log.1" "$user:$group 600"
hook_says 102
expect "the hook after a rotation" "$x/log/hooks.log" "$user:$group 600"
logrotate -f -s "$x/logrotate.state" "$x/logrotate.conf" 2>"$x/logrotate.err" || fail "logrotate: $(cat "$x/logrotate.err")"
expect "rotated twice" "$x/log/hooks.log.2.gz" "$user:$group 600"
grep -q "juice: job 102 run 0: " "$x/log/hooks.log.1" || fail "the second rotation did not keep job 102's lines in hooks.log.1"
logrotate -d /etc/logrotate.d/juice-slurm >"$x/logrotate.debug" 2>&1 || fail "logrotate -d /etc/logrotate.d/juice-slurm: $(cat "$x/logrotate.debug")"
! grep -qi error "$x/logrotate.debug" || fail "logrotate -d /etc/logrotate.d/juice-slurm: $(cat "$x/logrotate.debug")"
echo "test-package: logrotate renames the hook log, which the next hook makes again ($user 0600); rotations keep $user 0600"

# 5. Remove: the programs go; the settings, the secrets, the log and the state directory stay.
dpkg_ --remove juice-slurm >/dev/null 2>&1
[ "$(dpkg-query -W -f '${db:Status-Status}' juice-slurm)" = config-files ] || fail "remove: juice-slurm is not in state config-files"
[ ! -e /usr/lib/juice-slurm/juice-slurm ] || fail "remove: /usr/lib/juice-slurm/juice-slurm is still there"
grep -qxF "# check.sh: an administrator's line, kept on upgrade" /etc/juice-slurm/juice-slurm.conf || fail "remove: the settings file is gone or replaced"
expect_dirs remove "$user" "$group"
[ "$(others)" = "$before" ] || fail "remove: files beside the settings changed: $(diff <(echo "$before") <(others))"
echo "test-package: removed: settings, secrets, log and state directory kept"

# 6. Purge: the conffiles, the log and the units' enable links go; the shared state directory and the secrets stay.
mkdir -p /etc/systemd/system/multi-user.target.wants /etc/systemd/system/timers.target.wants
ln -sfn /usr/lib/systemd/system/juice-slurm-controller.service /etc/systemd/system/multi-user.target.wants/
ln -sfn /usr/lib/systemd/system/juice-slurm-token-renew.timer /etc/systemd/system/timers.target.wants/
dpkg_ --purge juice-slurm >/dev/null 2>&1
[ "$(dpkg-query -W -f '${db:Status-Status}' juice-slurm 2>/dev/null || echo not-installed)" = not-installed ] || fail "purge: juice-slurm is still known to dpkg"
for f in "${conffiles[@]}" /var/log/juice-slurm /etc/systemd/system/multi-user.target.wants/juice-slurm-controller.service \
	/etc/systemd/system/timers.target.wants/juice-slurm-token-renew.timer; do
	[ ! -e "$f" ] && [ ! -L "$f" ] || fail "purge: $f is still there"
done
expect purge /var/spool/juice-slurm/sessions "$user:$group 700"
[ "$(others)" = "$before" ] || fail "purge: the secrets beside the settings changed: $(diff <(echo "$before") <(others))"
echo "test-package: purged: conffiles, log and enable links gone; the state directory and the secrets kept"

# 7. Installed again, and left installed: make demo-installed runs from it.
dpkg_ -i "$deb" >/dev/null
[ "$(dpkg-query -W -f '${Version}' juice-slurm)" = "$version-1" ] || fail "dpkg does not show juice-slurm $version-1 installed"
expect_dirs install "$user" "$group"
[ "$(juice-slurm version --config= | head -1)" = "$(/usr/lib/juice-slurm/juice-slurm version --config= | head -1)" ] || fail "/usr/bin/juice-slurm is not the installed binary"
# Two pages by one name: man juice-slurm gives the users' page (section 1 comes first), man 8 the admins'.
for s in 1 8; do
	[ "$(man -w "$s" juice-slurm)" = "/usr/share/man/man$s/juice-slurm.$s.gz" ] || fail "man $s juice-slurm does not find the page"
done
echo "test-package: installed $(dpkg-query -W -f '${Package} ${Version}' juice-slurm); $(juice-slurm version --config= | head -1)"
