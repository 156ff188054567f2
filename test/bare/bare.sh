#!/usr/bin/env bash
# make test-bare: the README's first command, `make demo`, run from a root that has none of what it installs.
#
# CI's machine keeps what earlier runs installed (Slurm, munge, PostgreSQL, clang, ...), so a demo that forgets an
# install step, or runs one too early, still passes there. This check builds a Debian 12 root of its own with only
# what a fresh machine of this kind has (Go, a C compiler, git, curl: BASE_PKGS), copies this checkout into it and
# runs `make demo` there, as root, the way a new site would. The root's apt-get reaches the same Debian mirror as the
# host's, and everything the demo installs (Slurm, munge, PostgreSQL, ...) is installed in it for real.
#
# The root gets a network namespace of its own, so the demo takes the test bed's ports there while the host's test
# bed keeps them; its one way out is test/bare/aptproxy, a plain HTTP proxy to the host's Debian mirror, on a veth
# link of the check's own (NET below). The demo runs in a PID and mount namespace too, so whatever it leaves
# running ends with it and none of its mounts outlive it. The base (debootstrap and the toolchain's packages) is
# made once and kept as a tarball: each run unpacks it anew.
#
# Usage: bash test/bare/bare.sh   (as root; make test-bare holds the host lock)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../lib/apt.sh
. "$REPO/test/lib/apt.sh"
TB=${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}
SUITE=bookworm
# What a fresh machine of this kind comes with, of what the project could rely on (Go is copied in besides): no
# Slurm, munge, PostgreSQL, Lua, clang, OpenSSL headers or debootstrap.
BASE_PKGS="gcc libc6-dev make git ca-certificates curl procps iproute2 python3 openssl xz-utils file jq hostname"
BASE_TAR=$TB/bare-$SUITE.tar
BUILD=$TB/bare-build
ROOT=$TB/bare-root
LOGF=$TB/log/bare-demo.log
GOROOT_HOST=$(go env GOROOT 2>/dev/null || echo /usr/local/go)
DEMO_LIMIT=${JUICE_BARE_LIMIT:-1800} # seconds

log() { printf '[bare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root"
mkdir -p "$TB/log"
cd /


# progress PID WHAT: a line every 30 s while PID runs.
progress() {
	local pid=$1 what=$2 t0=$SECONDS
	while kill -0 "$pid" 2>/dev/null; do
		sleep 1
		if kill -0 "$pid" 2>/dev/null && [ $(((SECONDS - t0) % 30)) -eq 0 ]; then log "still $what ($((SECONDS - t0)) s)"; fi
	done
}

# in_ns ROOT SCRIPT: SCRIPT under bash in a PID and mount namespace of its own, with ROOT's /proc, /sys and /dev
# mounted there; SCRIPT runs on the host side and chroots itself (mounts vanish, processes end with it).
in_ns() {
	local root=$1 script=$2
	unshare --mount --pid --fork --kill-child --propagation private --mount-proc="$root/proc" \
		env R="$root" bash -c 'set -e; mount --rbind /sys "$R/sys"; mount --rbind /dev "$R/dev"; '"$script"
}

make_base() {
	local stamp="$SUITE $BASE_PKGS"
	if [ -s "$BASE_TAR" ] && [ "$(cat "$BASE_TAR.stamp" 2>/dev/null)" = "$stamp" ]; then return 0; fi
	command -v debootstrap >/dev/null || { log "installing debootstrap on the host"; host_apt update -qq; host_apt install -y -qq debootstrap >/dev/null; }
	rm -rf --one-file-system "$BUILD"
	local t0=$SECONDS
	log "making the base root: debootstrap --variant=minbase $SUITE, then $BASE_PKGS (once; about 2 minutes)"
	debootstrap --variant=minbase "$SUITE" "$BUILD" "$(host_mirror)" >"$TB/log/bare-base.log" 2>&1 &
	progress $! "debootstrapping $SUITE"
	wait $! || { tail -20 "$TB/log/bare-base.log" >&2; die "debootstrap failed, see $TB/log/bare-base.log"; }
	printf 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\nAPT::Install-Recommends "false";\n' \
		>"$BUILD/etc/apt/apt.conf.d/99juice-bare"
	cp /etc/resolv.conf "$BUILD/etc/resolv.conf"
	in_ns "$BUILD" 'chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
		sh -c "apt-get update -qq && apt-get install -y -qq '"$BASE_PKGS"' && apt-get clean"' >>"$TB/log/bare-base.log" 2>&1 &
	progress $! "installing the base packages"
	wait $! || { tail -20 "$TB/log/bare-base.log" >&2; die "installing the base packages failed, see $TB/log/bare-base.log"; }
	tar -C "$BUILD" -cf "$BASE_TAR.new" .
	mv "$BASE_TAR.new" "$BASE_TAR"
	echo "$stamp" >"$BASE_TAR.stamp"
	rm -rf --one-file-system "$BUILD"
	log "base root made in $((SECONDS - t0)) s ($(du -sh "$BASE_TAR" | cut -f1))"
}

make_base
# Nothing of a previous run is kept: the root is unpacked anew.
rm -rf --one-file-system "$ROOT"
mkdir -p "$ROOT"
tar -C "$ROOT" -xf "$BASE_TAR"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# This checkout as it is (tracked and new files, not what .gitignore leaves out: no bin/, no build/).
mkdir -p "$ROOT/src/juice-slurm" "$ROOT/usr/local/go" "$ROOT/root/go/pkg/mod" "$ROOT/root/.cache/go-build"
(cd "$REPO" && git ls-files -z -co --exclude-standard | xargs -0 tar -cf - 2>/dev/null) | tar -C "$ROOT/src/juice-slurm" -xf -
cp /etc/hosts "$ROOT/etc/hosts"

# The network: a namespace whose only link is a veth pair to the host, and the proxy on the host's end. It is
# entered with nsenter, not `ip netns exec`, which mounts a sysfs of its own without the cgroup hierarchies slurmd needs.
NS=juicebare NET=10.231.0 PROXY_PORT=3142
net_down() {
	[ -z "${proxy:-}" ] || kill "$proxy" 2>/dev/null || true
	ip netns del $NS 2>/dev/null || true
	ip link del jbare0 2>/dev/null || true
}
trap net_down EXIT
net_down
ip netns add $NS
ip link add jbare0 type veth peer name jbare1
ip link set jbare1 netns $NS
ip addr add $NET.1/30 dev jbare0 && ip link set jbare0 up
ip -n $NS addr add $NET.2/30 dev jbare1 && ip -n $NS link set jbare1 up && ip -n $NS link set lo up
mirror=$(host_mirror)
mhost=${mirror#*://} mhost=${mhost%%/*}
(cd "$REPO" && go build -o "$TB/bare-aptproxy" ./test/bare/aptproxy && go mod download)
"$TB/bare-aptproxy" -listen $NET.1:$PROXY_PORT -allow "$mhost" -limit $((DEMO_LIMIT + 120))s >"$TB/log/bare-aptproxy.log" 2>&1 &
proxy=$!
printf 'Acquire::http::Proxy "http://%s.1:%s/";\n' $NET $PROXY_PORT >"$ROOT/etc/apt/apt.conf.d/99juice-bare-proxy"

rc=0
t0=$SECONDS
: >"$LOGF"
log "make demo in a Debian $SUITE root with none of what it installs ($ROOT; log: $LOGF)"
# Go is copied in as a machine of this kind has it; its module and build caches are the host's (they hold nothing
# the demo installs, and save minutes of compiling; the modules were downloaded above, so no proxy is needed).
timeout --kill-after=30 "$DEMO_LIMIT" nsenter --net=/run/netns/$NS unshare --mount --pid --fork --kill-child --propagation private --mount-proc="$ROOT/proc" \
	env R="$ROOT" GR="$GOROOT_HOST" GM="$(go env GOMODCACHE)" GC="$(go env GOCACHE)" bash -c '
	set -e
	mount --rbind /sys "$R/sys"; mount --rbind /dev "$R/dev"
	mount --bind -o ro "$GR" "$R/usr/local/go"
	mkdir -p "$GM" "$GC"; mount --bind "$GM" "$R/root/go/pkg/mod"; mount --bind "$GC" "$R/root/.cache/go-build"
	exec chroot "$R" /usr/bin/env -i PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb \
		GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local \
		bash -c "cd /src/juice-slurm && make demo"' >"$LOGF" 2>&1 </dev/null &
demo=$!
# The demo's own headings, as they come.
tail -n +1 -F --pid=$demo "$LOGF" 2>/dev/null | sed -un 's/^.*==> \(.*\)\x1b\[0m$/[bare] \1/p; /^\[testbed/p' >&2 &
wait $demo || rc=$?
sleep 0.5
if [ $rc -eq 0 ] && grep -q "^Everything is still running" "$LOGF"; then
	log "PASS: make demo on a bare Debian $SUITE root in $((SECONDS - t0)) s"
else
	[ $rc -ne 0 ] || rc=1
	[ $rc -ne 124 ] || log "make demo did not end within ${DEMO_LIMIT}s"
	tail -40 "$LOGF" >&2
	log "FAIL: make demo on a bare Debian $SUITE root (exit $rc); the whole output is in $LOGF"
fi
rm -rf --one-file-system "$ROOT"
exit $rc
