#!/usr/bin/env bash
# slurm-chroot.sh up|wire|unwire|restart-rest|down|status|destroy SUITE
#
# A whole Slurm cluster inside a debootstrap chroot, for running juice-slurm against newer Slurm releases than the
# host's:
#   trixie -> Slurm 24.11 (REST v0.0.40..v0.0.42), slurmctld 7817, slurmd 7818 + 7819, slurmrestd 7820, hook 7271,
#             juice-sim 7270, slurmdbd 7831, MariaDB 7836
#   sid    -> Slurm 26.05 (REST v0.0.42..v0.0.45), slurmctld 8817, slurmd 8818 + 8819, slurmrestd 8820, hook 7371,
#             juice-sim 7370, slurmdbd 8831, MariaDB 8836
# (the host's test bed: slurmctld 6817, slurmd 6818 + 6819, slurmrestd 6820, hook 7171, juice-sim 7070, slurmdbd
# 6831, MariaDB 6836). The hook and juice-sim ports are where the e2e suite, the chaos run and the demo run the
# controller and the simulator.
#
# up      (idempotent) builds the chroot once (kept), mounts proc/sys/dev/dev/pts, starts munged, MariaDB and
#         slurmdbd (accounting, with the Juice pools' remote licenses: test/lib/accounting.sh), slurmctld, two
#         slurmds (nodes juiceSUITE1 and juiceSUITE2, each in its own UTS namespace so `hostname` in a job names
#         its node), slurmrestd, writes a token and $ROOT/env. With JUICE_TESTBED_TOKEN_LIFESPAN=SECONDS the
#         token is short-lived and renewed in the background every JUICE_TESTBED_TOKEN_RENEW seconds (default a
#         third of the lifespan) by deploy/juice-slurm-token-renew.
# wire    (after up; idempotent) builds the SPANK plugin inside the chroot against its own spank.h, installs it
#         through plugstack.conf.d, job_submit.lua (JobSubmitPlugins=lua), the prolog/epilog hooks pointing at a
#         controller on 127.0.0.1:$JUICE_CHROOT_HOOK_PORT, a static juice-slurm binary, the cluster key, the hook
#         secret and the sessions directory; restarts slurmctld and the slurmds. Stays wired across down/up.
# restart-rest (after up) stops slurmrestd and starts it again: a new process, nothing else touched.
# unwire  takes the plugin and the hooks out again (keys and binaries stay).
# services (after wire; idempotent) starts, on the host, juice-sim on 127.0.0.1:$SIM_PORT (pool "demo": one agent
#         of 4 GPUs x 24 GiB; pool "test": 2 agents of 8 x 80 GiB) and the controller this cluster's hooks call, with
#         a database juice_SUITE in the host test bed's PostgreSQL (make demo SLURM=24.11|26.05).
# down    stops the services, then what up started (by pid: only processes whose root is this chroot) and unmounts.
# destroy down + delete the chroot, refused while anything is still mounted inside it.
#
# The daemons share user names (and possibly uids) with the host's Slurm: never stop anything by name.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=../lib/apt.sh
. "$REPO/test/lib/apt.sh"
# shellcheck source=../lib/accounting.sh
. "$REPO/test/lib/accounting.sh"
BASE=${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}

usage() { echo "usage: $0 up|wire|unwire|services|restart-rest|down|status|destroy trixie|sid" >&2; exit 2; }
[ $# -eq 2 ] || usage
CMD=$1 SUITE=$2

case "$SUITE" in
trixie) PORT_BASE=7800 HOOK_PORT_DEFAULT=7271 SIM_PORT=7270 ;;
sid) PORT_BASE=8800 HOOK_PORT_DEFAULT=7371 SIM_PORT=7370 ;;
*) usage ;;
esac
CTLD_PORT=$((PORT_BASE + 17)) REST_PORT=$((PORT_BASE + 20))
# slurmdbd and its MariaDB (accounting, the pools' remote licenses): as in the host's test bed, +31 and +36.
DBD_PORT=$((PORT_BASE + 31)) MARIADB_PORT=$((PORT_BASE + 36))
NODES=(juice${SUITE}1 juice${SUITE}2)
declare -A NODE_PORT=([${NODES[0]}]=$((PORT_BASE + 18)) [${NODES[1]}]=$((PORT_BASE + 19)))
HOOK_PORT=${JUICE_CHROOT_HOOK_PORT:-$HOOK_PORT_DEFAULT}
ROOT=$BASE/chroot-$SUITE
RUNDIR=$ROOT/juice-run # pid files and logs of what we started (host paths; /juice-run inside)
ENVFILE=$ROOT/env
CLUSTER=juice$SUITE
PARTITION=debug
# The user the REST requests are made as (X-SLURM-USER-NAME) and whose token the env file holds: SlurmUser, which
# may list every job and update anybody's (test/chroot/README.md, "Tokens").
REST_USER=slurm
RESTD_USER=juicerestd # the uid slurmrestd runs as (it refuses root and SlurmUser)
# MALLOC_ARENA_MAX of slurmrestd's environment (JUICE_CHROOT_RESTD_MALLOC_ARENA_MAX; set but empty: glibc's default).
RESTD_MALLOC_ARENA_MAX=${JUICE_CHROOT_RESTD_MALLOC_ARENA_MAX-}
JOB_USER=juice        # an ordinary user for jobs
OTHER_USER=juiceother # a second ordinary user (jobs of "another user")
# What an `up` needs, and what `wire` needs besides: job_submit/lua is in slurm-wlm-basic-plugins and loads Lua 5.1
# (liblua5.1-0); building the plugin needs make, the C library headers and libcrypto's.
# slurmdbd and mariadb-server: accounting and the pools' remote licenses.
PACKAGES="slurmctld slurmd slurm-client slurmrestd slurm-wlm-basic-plugins liblua5.1-0 munge libslurm-dev gcc make libc6-dev libssl-dev slurmdbd mariadb-server"
CPATH=/usr/sbin:/usr/bin:/sbin:/bin

# Inside the chroot (paths as the daemons see them).
JUICE_LIB=/usr/local/lib/juice-slurm
JUICE_ETC=/etc/juice-slurm
JUICE_SESSIONS=/var/spool/juice-slurm/sessions
JUICE_LOGDIR=/var/log/juice-slurm
SPANK_SRC=/usr/local/src/juice-spank
PLUGSTACK_ENTRY=/etc/slurm/plugstack.conf.d/juice.conf
WIRING_CONF=/etc/slurm/juice-wiring.conf
TOKEN=/token # the REST token; $ROOT/token on the host

log() { printf '[slurm-chroot %s %s] %s\n' "$SUITE" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"
cd / # daemons inherit the working directory: one that never goes away

in_root() { chroot "$ROOT" /usr/bin/env -i PATH=$CPATH LANG=C.UTF-8 HOME=/root "$@"; }

# run_long WHAT LOGFILE COMMAND...: a long command with a line every 10 s while it runs.
run_long() {
	local what=$1 logf=$2 pid t0=$SECONDS rc=0
	shift 2
	"$@" >>"$logf" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 1
		if kill -0 "$pid" 2>/dev/null && [ $(((SECONDS - t0) % 10)) -eq 0 ]; then log "still $what ($((SECONDS - t0)) s)"; fi
	done
	wait "$pid" || rc=$?
	[ $rc -eq 0 ] || { tail -15 "$logf" >&2; die "$what failed (exit $rc), see $logf"; }
	log "$what: done in $((SECONDS - t0)) s"
}

# ---- mounts ---------------------------------------------------------------------------------------
MOUNTS="proc sys dev dev/pts" # mount order; unmounted in reverse

is_mounted() { # path
	awk -v p="$1" '$2 == p { found = 1 } END { exit !found }' /proc/mounts
}

any_mount_inside() {
	awk -v p="$ROOT/" 'index($2, p) == 1 { found = 1 } END { exit !found }' /proc/mounts
}

mount_all() {
	for m in $MOUNTS; do
		is_mounted "$ROOT/$m" && continue
		mkdir -p "$ROOT/$m"
		case $m in
		proc) mount -t proc proc "$ROOT/proc" ;;
		sys) mount -t sysfs sysfs "$ROOT/sys" ;;
		dev) mount --bind /dev "$ROOT/dev" ;;
		dev/pts) mount --bind /dev/pts "$ROOT/dev/pts" ;;
		esac
	done
}

umount_all() {
	local m
	# Anything else mounted inside (by hand, e.g. an NFS trial) first, deepest first.
	for m in $(awk -v p="$ROOT/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r); do
		case $m in "$ROOT/proc" | "$ROOT/sys" | "$ROOT/dev" | "$ROOT/dev/pts") continue ;; esac
		log "unmounting $m"
		umount "$m" 2>/dev/null || umount -l "$m"
	done
	for m in dev/pts dev sys proc; do
		if is_mounted "$ROOT/$m"; then
			umount "$ROOT/$m" 2>/dev/null || umount -l "$ROOT/$m"
		fi
	done
}

# ---- processes ------------------------------------------------------------------------------------
# Processes whose root directory is this chroot: only those can be ours.
chroot_pids() {
	local p r
	for p in /proc/[0-9]*; do
		r=$(readlink "$p/root" 2>/dev/null) || continue
		[ "$r" = "$ROOT" ] && echo "${p#/proc/}"
	done
	return 0
}

pid_in_root() { # pid
	[ -n "$1" ] && [ "$(readlink "/proc/$1/root" 2>/dev/null)" = "$ROOT" ]
}

daemon_running() { # name
	local f=$RUNDIR/$1.pid
	[ -f "$f" ] && pid_in_root "$(cat "$f")"
}

# start_daemon NAME UTS_HOSTNAME COMMAND...: run COMMAND inside the chroot in the foreground of its own session,
# its pid in our pid file; with a UTS_HOSTNAME, in a UTS namespace of its own with that host name.
start_daemon() {
	local name=$1 uts=$2
	shift 2
	if daemon_running "$name"; then
		log "$name already running (pid $(cat "$RUNDIR/$name.pid"))"
		return
	fi
	log "starting $name"
	if [ -n "$uts" ]; then
		# unshare and sh exec: the pid stays the one we record.
		setsid unshare --uts /bin/sh -c 'hostname "$1" && shift && exec "$@"' sh "$uts" \
			chroot "$ROOT" /usr/bin/env -i PATH=$CPATH LANG=C.UTF-8 "$@" >"$RUNDIR/$name.log" 2>&1 </dev/null &
	else
		setsid chroot "$ROOT" /usr/bin/env -i PATH=$CPATH LANG=C.UTF-8 "$@" >"$RUNDIR/$name.log" 2>&1 </dev/null &
	fi
	local pid=$! i
	echo $pid >"$RUNDIR/$name.pid"
	# Until the new process has entered the chroot, its root is still the host's, and daemon_running (which asks
	# /proc/PID/root) would take it for gone: a wait right after this on a loaded machine said "slurmctld exited
	# while starting" of a slurmctld that was starting. So wait, briefly, until it is in or has ended.
	for i in $(seq 1 100); do
		if pid_in_root "$pid" || ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		sleep 0.05
	done
}

stop_daemon() { # name
	local name=$1 p i
	if daemon_running "$name"; then
		p=$(cat "$RUNDIR/$name.pid")
		log "stopping $name (pid $p)"
		kill -TERM "$p" 2>/dev/null || true
		for i in $(seq 1 100); do pid_in_root "$p" || break; sleep 0.1; done
		if pid_in_root "$p"; then kill -KILL "$p" 2>/dev/null || true; fi
	fi
	rm -f "$RUNDIR/$name.pid"
}

slurmd_names() { local n; for n in "${NODES[@]}"; do echo "slurmd-$n"; done; }

stop_all() {
	local pids p n
	stop_renew
	stop_host juice-controller
	stop_host juice-sim
	rm -f "$RUNDIR/demo-db-url"
	# Our daemons first (by their pid files), then anything else still living in the chroot (job steps).
	# slurmdbd after slurmctld, which hands it what it still holds as it stops.
	for n in slurmrestd $(slurmd_names) slurmd slurmctld slurmdbd mariadb munged; do stop_daemon "$n"; done
	pids=$(chroot_pids)
	if [ -n "$pids" ]; then
		log "stopping left-over processes in the chroot: $(echo $pids)"
		for p in $pids; do if pid_in_root "$p"; then kill -TERM "$p" 2>/dev/null || true; fi; done
		sleep 1
		for p in $(chroot_pids); do if pid_in_root "$p"; then kill -KILL "$p" 2>/dev/null || true; fi; done
	fi
}

# ---- build ----------------------------------------------------------------------------------------

build() {
	if [ ! -f "$ROOT/.juice-debootstrapped" ]; then
		if ! command -v debootstrap >/dev/null; then
			log "installing debootstrap on the host"
			host_apt update -qq
			host_apt install -y -qq debootstrap >/dev/null
		fi
		local mirror
		mirror=$(host_mirror)
		if [ -d "$ROOT" ]; then
			any_mount_inside && die "a half-built $ROOT has mounts inside; run '$0 down $SUITE' first"
			log "removing a half-built chroot"
			rm -rf --one-file-system "$ROOT"
		fi
		mkdir -p "$BASE"
		: >"$BASE/debootstrap-$SUITE.log"
		log "debootstrap --variant=minbase $SUITE (about 20-50 s)"
		run_long "debootstrapping $SUITE" "$BASE/debootstrap-$SUITE.log" debootstrap --variant=minbase "$SUITE" "$ROOT" "$mirror"
		touch "$ROOT/.juice-debootstrapped"
	fi
	# The packages, installed again whenever the list changed (older chroots lack the wiring's packages).
	[ -f "$ROOT/.juice-built" ] && [ "$(cat "$ROOT/.juice-built")" = "$PACKAGES" ] && return
	# The mirror is a frozen snapshot: its Release files have expired.
	printf 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n' >"$ROOT/etc/apt/apt.conf.d/99juice-snapshot"
	printf 'APT::Install-Recommends "false";\n' >"$ROOT/etc/apt/apt.conf.d/99juice-norecommends"
	# Package scripts must not start daemons.
	printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
	chmod 755 "$ROOT/usr/sbin/policy-rc.d"
	cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
	mount_all
	local pkgs=$PACKAGES alog=$BASE/apt-$SUITE.log
	: >"$alog"
	run_long "updating the package lists" "$alog" in_root apt-get update -qq
	# Nothing depends on the JWT plugin: name it.
	if in_root apt-cache show slurm-wlm-jwt-plugin >/dev/null 2>&1; then
		pkgs="$pkgs slurm-wlm-jwt-plugin"
	fi
	log "installing $pkgs (about 20-30 s)"
	run_long "installing packages" "$alog" in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs
	in_root apt-get clean
	echo "$PACKAGES" >"$ROOT/.juice-built"
	log "chroot built: $(du -sh --one-file-system "$ROOT" | cut -f1)"
}

# ---- configuration --------------------------------------------------------------------------------
ensure_user() { # name [system]
	in_root getent passwd "$1" >/dev/null && return
	if [ "${2:-}" = system ]; then
		in_root useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$1"
	else
		in_root useradd --create-home --shell /bin/sh "$1"
	fi
}

# install_if_changed SRC DST: replace DST by SRC when they differ; status 0 when it changed.
install_if_changed() {
	if cmp -s "$1" "$2"; then
		rm -f "$1"
		return 1
	fi
	mv "$1" "$2"
}

CONFIG_CHANGED=0

configure() {
	mkdir -p "$RUNDIR"
	local etc=$ROOT/etc/slurm d n
	mkdir -p "$etc" "$etc/plugstack.conf.d"
	for d in /var/lib/slurm/slurmctld /var/log/slurm /run/munge /var/log/munge; do mkdir -p "$ROOT$d"; done
	for n in "${NODES[@]}"; do mkdir -p "$ROOT/var/lib/slurm/slurmd/$n"; done
	# Only what slurm does not own yet: a running slurmctld removes job files under a chown -R (it failed up while
	# 20,000 purged jobs' files went away); -ignore_readdir_race lets find pass over them. Not what a running
	# slurmd keeps in its spool (root's job files, which come and go: chaos failed once when one went between
	# find and chown, as slurmdbd was brought up again); the node's directory itself is taken.
	in_root find /var/lib/slurm /var/log/slurm -ignore_readdir_race -path '/var/lib/slurm/slurmd/*/*' -prune \
		-o ! -user slurm -exec chown slurm:slurm {} +
	in_root chown munge:munge /run/munge /var/log/munge
	if [ ! -s "$ROOT/etc/munge/munge.key" ]; then
		in_root setpriv --reuid=munge --regid=munge --clear-groups mungekey --create >/dev/null
	fi
	if [ ! -s "$etc/jwt.key" ]; then
		head -c 32 /dev/urandom >"$etc/jwt.key"
	fi
	in_root chown slurm:slurm /etc/slurm/jwt.key
	chmod 600 "$etc/jwt.key"
	ensure_user $JOB_USER
	ensure_user $OTHER_USER
	ensure_user $RESTD_USER system
	# Node names resolve to loopback inside the chroot (the daemons use NodeAddr; this is for people and tools).
	printf '127.0.0.1 localhost\n127.0.0.1 %s %s\n' "$(hostname -s)" "${NODES[*]}" >"$ROOT/etc/hosts"
	[ -e "$etc/plugstack.conf" ] || echo "include /etc/slurm/plugstack.conf.d/*.conf" >"$etc/plugstack.conf"
	[ -e "$ROOT$WIRING_CONF" ] || echo "# juice-slurm wiring: written by test/chroot/slurm-chroot.sh wire" >"$ROOT$WIRING_CONF"
	install_run_as

	# slurmd -C prints this machine's node line; keep the hardware words, set our own name, port and memory.
	local hw mem nodelines=""
	hw=$(in_root slurmd -C 2>/dev/null | head -n1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' | tr '\n' ' ')
	mem=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
	for n in "${NODES[@]}"; do
		nodelines+="NodeName=$n NodeAddr=127.0.0.1 NodeHostname=$n Port=${NODE_PORT[$n]} ${hw}RealMemory=$mem State=UNKNOWN"$'\n'
	done
	# JUICE_TESTBED_CTLD_HOSTS ("NAME(ADDR) NAME(ADDR)"): a primary and a backup slurmctld
	# (test/slurmfailover/failover.sh); the backup takes control 10 s after the primary stops answering.
	local ctld="SlurmctldHost=$(hostname -s)(127.0.0.1)"
	if [ -n "${JUICE_TESTBED_CTLD_HOSTS:-}" ]; then
		# shellcheck disable=SC2086 # one line per word
		ctld=$(printf 'SlurmctldHost=%s\n' $JUICE_TESTBED_CTLD_HOSTS)$'\n'SlurmctldTimeout=10
	fi
	cat >"$etc/slurm.conf.new" <<EOF
# Generated by test/chroot/slurm-chroot.sh for the $SUITE test bed: two nodes on loopback, one port each.
ClusterName=$CLUSTER
$ctld
SlurmctldPort=$CTLD_PORT
SlurmUser=slurm
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt.key
StateSaveLocation=/var/lib/slurm/slurmctld
# Several slurmds on one host: %n is the node name (slurmd -N).
SlurmdSpoolDir=/var/lib/slurm/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
$(acct_slurm_conf $DBD_PORT)
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
SchedulerParameters=sched_interval=2,allow_zero_lic,bf_licenses
ReturnToService=2
MinJobAge=300
# make bench-scale queues 100,000 jobs (the default is 10,000); a larger limit only sizes slurmctld's job tables.
MaxJobCount=200000
KillWait=5
# One license the demo uses to keep a job pending (eligible, waiting for Licenses) for as long as it likes.
Licenses=juice_demo:1
# Slow prologs: slurmctld waits for ever unless this is set; the juice prolog's own wait is shorter.
PrologEpilogTimeout=300
Include $WIRING_CONF
${nodelines}PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
	printf 'CgroupPlugin=disabled\n' >"$etc/cgroup.conf.new"
	install_if_changed "$etc/slurm.conf.new" "$etc/slurm.conf" && CONFIG_CHANGED=1
	install_if_changed "$etc/cgroup.conf.new" "$etc/cgroup.conf" && CONFIG_CHANGED=1
	return 0
}

# /usr/local/lib/juice-slurm/juice-run-as USER COMMAND...: the env file's command prefix. Runs COMMAND inside the
# chroot as USER, in USER's home directory, with a clean environment (no SLURM_JWT can leak in from the caller).
install_run_as() {
	mkdir -p "$ROOT$JUICE_LIB"
	cat >"$ROOT$JUICE_LIB/.juice-run-as.new" <<'EOF'
#!/bin/sh
# juice-run-as USER COMMAND [ARG...]: run COMMAND as USER in USER's home directory with a clean environment.
# Written by test/chroot/slurm-chroot.sh.
[ $# -ge 2 ] || { echo "usage: juice-run-as USER COMMAND [ARG...]" >&2; exit 2; }
u=$1
shift
ent=$(getent passwd "$u") || { echo "juice-run-as: no user $u" >&2; exit 2; }
home=$(echo "$ent" | cut -d: -f6)
[ -d "$home" ] || home=/tmp
cd "$home" || exit 2
P=/usr/sbin:/usr/bin:/sbin:/bin
if [ "$(id -u "$u")" = 0 ]; then
	exec /usr/bin/env -i PATH=$P LANG=C.UTF-8 HOME="$home" USER="$u" LOGNAME="$u" "$@"
fi
exec /usr/bin/setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups \
	/usr/bin/env -i PATH=$P LANG=C.UTF-8 HOME="$home" USER="$u" LOGNAME="$u" "$@"
EOF
	chmod 755 "$ROOT$JUICE_LIB/.juice-run-as.new"
	mv "$ROOT$JUICE_LIB/.juice-run-as.new" "$ROOT$JUICE_LIB/juice-run-as"
}

# ---- accounting (test/lib/accounting.sh) ------------------------------------------------------------
# MariaDB and slurmdbd of this release, inside the chroot, on ports of this bed's own; slurmdbd.conf in /etc/slurm.
MARIADB_CNF=/etc/mysql/juice-testbed.cnf
MARIADB_DATA=/var/lib/juice-mariadb
MARIADB_RUN=/run/juice-mariadb
MARIADB_PASS=/etc/mysql/juice-testbed-slurm.pass

mariadb_root() { in_root mariadb --defaults-file=$MARIADB_CNF "$@"; }

# start_accounting: MariaDB (initialised once), slurmdbd's database and user, slurmdbd, then the cluster and the
# pools' licenses in it (before slurmctld starts: it must find its cluster there). A changed configuration restarts
# the daemon it is for.
start_accounting() {
	in_root install -d -o mysql -g mysql -m 0700 $MARIADB_DATA
	in_root install -d -o mysql -g mysql -m 0755 $MARIADB_RUN /var/log/mysql
	acct_mariadb_cnf $MARIADB_DATA $MARIADB_RUN $MARIADB_PORT /var/log/mysql/juice-testbed.log >"$ROOT$MARIADB_CNF.new"
	install_if_changed "$ROOT$MARIADB_CNF.new" "$ROOT$MARIADB_CNF" && stop_daemon mariadb
	if [ ! -d "$ROOT$MARIADB_DATA/mysql" ]; then
		log "initialising MariaDB in $MARIADB_DATA"
		in_root mariadb-install-db --defaults-file=$MARIADB_CNF --skip-test-db --auth-root-authentication-method=socket \
			>"$RUNDIR/mariadb-install.log" 2>&1 || { tail -20 "$RUNDIR/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
	fi
	start_daemon mariadb "" /usr/sbin/mariadbd --defaults-file=$MARIADB_CNF
	wait_for "MariaDB on :$MARIADB_PORT" 60 mariadb_root -e 'SELECT 1'
	[ -s "$ROOT$MARIADB_PASS" ] || (umask 077 && openssl rand -hex 24 >"$ROOT$MARIADB_PASS")
	acct_db_sql "$(cat "$ROOT$MARIADB_PASS")" | mariadb_root
	(umask 077 && acct_slurmdbd_conf $DBD_PORT slurm /run/slurmdbd.pid /var/log/slurm/slurmdbd.log $MARIADB_PORT \
		"$(cat "$ROOT$MARIADB_PASS")" >"$ROOT/etc/slurm/slurmdbd.conf.new")
	in_root chown slurm:slurm /etc/slurm/slurmdbd.conf.new
	install_if_changed "$ROOT/etc/slurm/slurmdbd.conf.new" "$ROOT/etc/slurm/slurmdbd.conf" && stop_daemon slurmdbd
	if ! daemon_running slurmdbd; then
		start_daemon slurmdbd "" /usr/sbin/slurmdbd -D
		# Its first start creates its tables: some seconds. (Each sacctmgr costs about 0.2 s: only after a start.)
		wait_for "slurmdbd on :$DBD_PORT" 90 in_root sacctmgr -nP show cluster
	fi
	acct_ensure $CLUSTER "$ROOT/var/lib/slurm/slurmctld" "root slurm $JOB_USER $OTHER_USER nobody" in_root
}

# ---- start and wait -------------------------------------------------------------------------------
rest_versions() {
	case "$SUITE" in
	trixie) echo "openapi/slurmctld" ;; # what juice-slurm uses (24.11 without slurmdbd must not load openapi/slurmdbd)
	sid) echo "" ;;
	esac
}

wait_for() { # description, seconds, command...
	local what=$1 secs=$2 t0=$SECONDS next=5
	shift 2
	until "$@" >/dev/null 2>&1; do
		((SECONDS - t0 >= secs)) && die "$what not ready after $secs s (logs in $RUNDIR and $ROOT/var/log/slurm)"
		if ((SECONDS - t0 >= next)); then
			log "still waiting for $what ($((SECONDS - t0)) s)"
			next=$((next + 5))
		fi
		sleep 0.3
	done
	log "$what: ready"
}

nodes_ready() { # every slurmd we started says it started, and every node is idle, mixed or allocated
	local out n
	for n in "${NODES[@]}"; do
		grep -q 'slurmd started on' "$RUNDIR/slurmd-$n.log" 2>/dev/null || return 1
	done
	out=$(in_root sinfo -h -N -o '%N %t') || return 1
	for n in "${NODES[@]}"; do
		grep -Eq "^$n (idle|mix|alloc)\$" <<<"$out" || return 1
	done
}
rest_up() { # any HTTP answer will do (/openapi/v3 wants a token on some releases)
	[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$REST_PORT/openapi/v3")" != 000 ]
}

# wait_slurmctld: until slurmctld answers, for as long as it lives (15 minutes at most), saying what it is doing.
# After a large queue it may take minutes to start: it purges, one by one, the script directories of jobs it no
# longer knows (about 10 ms each: 20,000 left by make bench-scale took over 3 minutes, and a fixed 30 s wait
# failed a make test that came after one).
wait_slurmctld() {
	local t0=$SECONDS next=10 logf=$ROOT/var/log/slurm/slurmctld.log
	# The primary's line: scontrol ping fails while a backup (JUICE_TESTBED_CTLD_HOSTS) is not up yet.
	until grep -q '^Slurmctld(primary) at .* is UP' <<<"$(in_root scontrol ping 2>/dev/null)"; do
		daemon_running slurmctld || die "slurmctld exited while starting (logs in $RUNDIR and $ROOT/var/log/slurm)"
		((SECONDS - t0 >= 900)) && die "slurmctld not ready after 900 s (logs in $RUNDIR and $ROOT/var/log/slurm)"
		if ((SECONDS - t0 >= next)); then
			log "still waiting for slurmctld ($((SECONDS - t0)) s); its log says: $(tail -n 1 "$logf" 2>/dev/null | cut -c1-120)"
			next=$((next + 10))
		fi
		sleep 0.3
	done
	log "slurmctld: ready"
}

start_slurm() {
	start_daemon slurmctld "" /usr/sbin/slurmctld -D
	wait_slurmctld
	local n
	for n in "${NODES[@]}"; do
		start_daemon "slurmd-$n" "$n" /usr/sbin/slurmd -D -N "$n"
	done
	wait_for "nodes ${NODES[*]}" 60 nodes_ready
	# A node drained by an earlier run (a failed batch step drains it) would keep jobs pending.
	local drained
	drained=$(in_root sinfo -h -N -t drain,drng -o %N | sort -u | paste -sd, -)
	if [ -n "$drained" ]; then
		log "resuming drained nodes $drained"
		in_root scontrol update nodename="$drained" state=resume || true
	fi
}

restart_slurm() {
	local n
	for n in $(slurmd_names); do stop_daemon "$n"; done
	stop_daemon slurmctld
	start_slurm
}

start_rest() {
	local plugins rest_args=() env=(SLURM_JWT=daemon)
	plugins=$(rest_versions)
	[ -n "$plugins" ] && rest_args=(-s "$plugins")
	[ -n "$RESTD_MALLOC_ARENA_MAX" ] && env+=(MALLOC_ARENA_MAX=$RESTD_MALLOC_ARENA_MAX)
	# SLURM_JWT=daemon: slurmrestd accepts JWTs and talks to slurmctld with each request's token.
	start_daemon slurmrestd "" "${env[@]}" setpriv --reuid=$RESTD_USER --regid=$RESTD_USER --clear-groups \
		/usr/sbin/slurmrestd "${rest_args[@]}" -a rest_auth/jwt "127.0.0.1:$REST_PORT"
	wait_for "slurmrestd on :$REST_PORT" 30 rest_up_or_exited
	daemon_running slurmrestd || { tail -5 "$RUNDIR/slurmrestd.log" >&2; die "slurmrestd exited at its start, see $RUNDIR/slurmrestd.log"; }
}

rest_up_or_exited() { rest_up || ! daemon_running slurmrestd; }

# restart-rest: slurmrestd alone, a new process. It keeps what a listing of a large queue made it allocate (about
# 150 KB per job on 26.05.5, and more after each listing), so juice-bench-scale restarts it before each phase.
restart_rest() {
	daemon_running slurmctld || die "slurmctld is not running: run up first"
	stop_daemon slurmrestd
	# stop_daemon sees the process gone once its main thread has left the chroot, but its other threads may still be
	# tearing down gigabytes of memory with the listening socket open: a new slurmrestd would fail to bind (seen once
	# after listings of 10,000 jobs: "not ready after 30 s").
	wait_for "port :$REST_PORT free" 60 rest_port_free
	start_rest
}

rest_port_free() { ! ss -Hltn "sport = :$REST_PORT" | grep -q .; }

start() {
	mount_all
	configure
	# A single-node chroot of an older version of this script ran one "slurmd".
	stop_daemon slurmd
	start_daemon munged "" setpriv --reuid=munge --regid=munge --clear-groups /usr/sbin/munged -F
	wait_for munged 20 in_root munge -n
	# slurmdbd and the cluster in it before slurmctld, which a new slurm.conf (accounting on) restarts.
	start_accounting
	if [ $CONFIG_CHANGED = 1 ] && daemon_running slurmctld; then
		log "slurm.conf changed: restarting slurmctld, the slurmds and slurmrestd"
		restart_slurm
		stop_daemon slurmrestd # it reads the SlurmctldHost lines at start; start_rest starts it again
	fi
	start_slurm
	start_rest
	tokens
	write_env
	log "Slurm $(slurm_version) up: nodes ${NODES[*]}, REST http://127.0.0.1:$REST_PORT, env file $ENVFILE"
}

slurm_version() { in_root sinfo -V | awk '{print $2}'; }

# ---- tokens ---------------------------------------------------------------------------------------
RENEW_BIN=$JUICE_LIB/juice-slurm-token-renew

install_renew() {
	mkdir -p "$ROOT$JUICE_LIB"
	install -m 0755 "$REPO/deploy/juice-slurm-token-renew" "$ROOT$RENEW_BIN.new"
	mv "$ROOT$RENEW_BIN.new" "$ROOT$RENEW_BIN"
}

renew_running() { [ -f "$RUNDIR/token-renew.pid" ] && pid_in_root "$(cat "$RUNDIR/token-renew.pid")"; }

stop_renew() {
	local p
	if renew_running; then
		p=$(cat "$RUNDIR/token-renew.pid")
		log "stopping the token renewal loop (process group $p)"
		kill -TERM -- "-$p" 2>/dev/null || true
		for _ in $(seq 1 50); do pid_in_root "$p" || break; sleep 0.1; done
	fi
	rm -f "$RUNDIR/token-renew.pid" "$RUNDIR/token-renew.settings"
}

# The REST token. By default one long-lived token written on every up. With JUICE_TESTBED_TOKEN_LIFESPAN, a loop
# (its own process group) renews a short-lived one every JUICE_TESTBED_TOKEN_RENEW seconds.
tokens() {
	install_renew
	local life=${JUICE_TESTBED_TOKEN_LIFESPAN:-} every
	if [ -z "$life" ]; then
		stop_renew
		in_root "$RENEW_BIN" --user $REST_USER --lifespan 604800 "$TOKEN" || die "token renewal failed"
		return
	fi
	every=${JUICE_TESTBED_TOKEN_RENEW:-$((life / 3))}
	[ "$every" -ge 1 ] && [ "$every" -lt "$life" ] || die "JUICE_TESTBED_TOKEN_RENEW ($every) must be 1 to less than the lifespan ($life)"
	if renew_running && [ "$(cat "$RUNDIR/token-renew.settings" 2>/dev/null)" = "$life $every" ]; then
		log "token renewal loop already running (lifespan $life s, every $every s)"
		return
	fi
	stop_renew
	in_root "$RENEW_BIN" --user $REST_USER --lifespan "$life" "$TOKEN" || die "token renewal failed"
	log "starting the token renewal loop: lifespan $life s, renewed every $every s (log $RUNDIR/token-renew.log)"
	setsid chroot "$ROOT" /usr/bin/env -i PATH=$CPATH LANG=C.UTF-8 /bin/sh -c \
		'while sleep "$3"; do "$0" --user "$1" --lifespan "$2" "$4" && echo "$(date +%T) renewed"; done' \
		"$RENEW_BIN" $REST_USER "$life" "$every" "$TOKEN" >>"$RUNDIR/token-renew.log" 2>&1 </dev/null &
	echo $! >"$RUNDIR/token-renew.pid"
	echo "$life $every" >"$RUNDIR/token-renew.settings"
}

# ---- wiring ---------------------------------------------------------------------------------------
go_bin() {
	if command -v "${GO:-go}" >/dev/null; then echo "${GO:-go}"; elif [ -x /usr/local/go/bin/go ]; then echo /usr/local/go/bin/go; else return 1; fi
}

# The juice-slurm binary for the chroot: $JUICE_CHROOT_JUICE_SLURM, or a static build of this work tree (outside it).
juice_slurm_bin() {
	if [ -n "${JUICE_CHROOT_JUICE_SLURM:-}" ]; then
		[ -x "$JUICE_CHROOT_JUICE_SLURM" ] || die "JUICE_CHROOT_JUICE_SLURM=$JUICE_CHROOT_JUICE_SLURM is not executable"
		echo "$JUICE_CHROOT_JUICE_SLURM"
		return
	fi
	static_build juice-slurm
}

# The hook binary the chroot's prolog and epilog exec: the juice-slurm-hook beside $JUICE_CHROOT_JUICE_SLURM when
# there is one, or a static build of this work tree.
juice_slurm_hook_bin() {
	local given=${JUICE_CHROOT_JUICE_SLURM:-}
	if [ -n "$given" ] && [ -x "${given%/*}/juice-slurm-hook" ]; then
		echo "${given%/*}/juice-slurm-hook"
		return
	fi
	static_build juice-slurm-hook
}

# static_build CMD: a static (CGO_ENABLED=0) build of ./cmd/CMD into $RUNDIR/bin; prints its path.
static_build() {
	local go out=$RUNDIR/bin
	go=$(go_bin) || die "no go toolchain to build $1 (or set JUICE_CHROOT_JUICE_SLURM)"
	mkdir -p "$out"
	log "building a static $1 (CGO_ENABLED=0) into $out"
	(cd "$REPO" && CGO_ENABLED=0 "$go" build -o "$out/$1" "./cmd/$1") >&2 || die "go build failed"
	echo "$out/$1"
}

# install_atomic SRC DST MODE: copy to a temporary name next to DST, then rename (a loaded .so must never be
# overwritten in place).
install_atomic() {
	local dir
	dir=$(dirname "$2")
	mkdir -p "$dir"
	install -m "$3" "$1" "$dir/.$(basename "$2").new"
	mv "$dir/.$(basename "$2").new" "$2"
}

# secret FILE: 32 random bytes as hex, owned by SlurmUser, mode 0600 (kept once made).
secret() {
	[ -s "$ROOT$1" ] || (umask 077 && mkdir -p "$(dirname "$ROOT$1")" && openssl rand -hex 32 >"$ROOT$1")
	in_root chown slurm:slurm "$1"
	chmod 0600 "$ROOT$1"
}

wire() {
	daemon_running slurmctld || die "the $SUITE test bed is not up: run '$0 up $SUITE' first"
	local t0=$SECONDS bin hookbin
	bin=$(juice_slurm_bin)
	hookbin=$(juice_slurm_hook_bin)
	# 1. The SPANK plugin, built inside the chroot against this release's spank.h from a copy of spank/.
	log "building the SPANK plugin inside the chroot"
	rm -rf "${ROOT:?}$SPANK_SRC"
	mkdir -p "$ROOT$SPANK_SRC"
	cp "$REPO"/spank/Makefile "$REPO"/spank/*.[ch] "$REPO"/spank/juice.lds "$ROOT$SPANK_SRC/"
	in_root make -C $SPANK_SRC BUILD=$SPANK_SRC/build all check-exports >"$RUNDIR/spank-build.log" 2>&1 ||
		{ tail -20 "$RUNDIR/spank-build.log" >&2; die "the SPANK plugin did not build, see $RUNDIR/spank-build.log"; }
	install_atomic "$ROOT$SPANK_SRC/build/spank_juice.so" "$ROOT$JUICE_LIB/spank_juice.so" 0755
	# 2. The binary and the hooks.
	install_atomic "$bin" "$ROOT$JUICE_LIB/juice-slurm" 0755
	install_atomic "$hookbin" "$ROOT$JUICE_LIB/juice-slurm-hook" 0755
	install_atomic "$REPO/hooks/juice-prolog.sh" "$ROOT$JUICE_LIB/juice-prolog.sh" 0755
	install_atomic "$REPO/hooks/juice-epilog.sh" "$ROOT$JUICE_LIB/juice-epilog.sh" 0755
	install_atomic "$REPO/hooks/slurmctld-parts.sh" "$ROOT$JUICE_LIB/slurmctld-parts.sh" 0755
	# PrologSlurmctld and EpilogSlurmctld run through the dispatcher, as on the host test bed (a site keeps its own
	# beside ours): juice-slurm's part only, every other part (a test's leftover) removed.
	local ctx
	for ctx in prolog epilog; do
		mkdir -p "$ROOT/etc/slurm/${ctx}_slurmctld.d"
		find "$ROOT/etc/slurm/${ctx}_slurmctld.d" -mindepth 1 -maxdepth 1 ! -name 50-juice -exec rm -rf {} +
		ln -sfn "$JUICE_LIB/juice-$ctx.sh" "$ROOT/etc/slurm/${ctx}_slurmctld.d/50-juice"
	done
	# 3. Secrets, the shared state directory, the hook log.
	install -d -m 0755 "$ROOT$JUICE_ETC"
	secret $JUICE_ETC/cluster.key
	secret $JUICE_ETC/hook.secret
	# The hook API's certificate, which the hooks pin: the host's (the controller runs on the host, with its key).
	sh "$REPO/deploy/make-hook-cert.sh" $JUICE_ETC root >&2
	install_atomic $JUICE_ETC/hook.crt "$ROOT$JUICE_ETC/hook.crt" 0644
	mkdir -p "$ROOT$JUICE_SESSIONS" "$ROOT$JUICE_LOGDIR"
	in_root chown slurm:slurm $JUICE_SESSIONS $JUICE_LOGDIR
	chmod 0700 "$ROOT$JUICE_SESSIONS"
	touch "$ROOT$JUICE_LOGDIR/hooks.log"
	in_root chown slurm:slurm $JUICE_LOGDIR/hooks.log
	chmod 0600 "$ROOT$JUICE_LOGDIR/hooks.log"
	sed -e "s#^JUICE_SLURM_BIN=.*#JUICE_SLURM_BIN=$JUICE_LIB/juice-slurm#" \
		-e "s#^JUICE_HOOK_BIN=.*#JUICE_HOOK_BIN=$JUICE_LIB/juice-slurm-hook#" \
		-e "s#^JUICE_HOOK_URL=.*#JUICE_HOOK_URL=https://127.0.0.1:$HOOK_PORT#" \
		-e "s#^JUICE_HOOK_SECRET=.*#JUICE_HOOK_SECRET=$JUICE_ETC/hook.secret#" \
		-e "s#^JUICE_STATE_DIR=.*#JUICE_STATE_DIR=$JUICE_SESSIONS#" \
		-e "s#^JUICE_HOOK_LOG=.*#JUICE_HOOK_LOG=$JUICE_LOGDIR/hooks.log#" \
		-e "s#^JUICE_LICENSES=.*#JUICE_LICENSES=${JUICE_TESTBED_LICENSES_ON:-on}#" \
		-e "s#^JUICE_PROLOG_WAIT=.*#JUICE_PROLOG_WAIT=${JUICE_TESTBED_PROLOG_WAIT:-15s}#" \
		"$REPO/hooks/juice-config.sh" >"$ROOT$JUICE_ETC/.juice-config.sh.new"
	chmod 0644 "$ROOT$JUICE_ETC/.juice-config.sh.new"
	mv "$ROOT$JUICE_ETC/.juice-config.sh.new" "$ROOT$JUICE_ETC/juice-config.sh"
	# 4. job_submit.lua and its module next to slurm.conf (the module first: a new job_submit.lua is loaded at
	# once), the plugstack entry, the slurm.conf lines.
	install_atomic "$REPO/hooks/juice_submit.lua" "$ROOT/etc/slurm/juice_submit.lua" 0644
	# The module first: slurmctld loads a new job_submit.lua (which requires it) at the next submission.
	install_atomic "$REPO/hooks/juice_submit.lua" "$ROOT/etc/slurm/juice_submit.lua" 0644
	install_atomic "$REPO/hooks/job_submit.lua" "$ROOT/etc/slurm/job_submit.lua" 0644
	# The site policy job_submit.lua and the controller both read, as the host test bed's: the plugstack's limits
	# and the pools of juice-sim's configurations (the demo's and the e2e suite's), and the e2e suite's pool limits.
	sed -e 's/^pools = .*/pools = demo, small, test, lab/' "$REPO/deploy/juice-policy.conf" >"$ROOT$JUICE_ETC/.juice-policy.conf.new"
	cat "$REPO/test/testbed/juice-policy.extra" >>"$ROOT$JUICE_ETC/.juice-policy.conf.new"
	chmod 0644 "$ROOT$JUICE_ETC/.juice-policy.conf.new"
	mv "$ROOT$JUICE_ETC/.juice-policy.conf.new" "$ROOT$JUICE_ETC/juice-policy.conf"
	echo "required $JUICE_LIB/spank_juice.so /usr/bin/juice $JUICE_SESSIONS key=$JUICE_ETC/cluster.key max_gpus=8 max_vram=80GiB" \
		>"$ROOT$PLUGSTACK_ENTRY.new"
	mv "$ROOT$PLUGSTACK_ENTRY.new" "$ROOT$PLUGSTACK_ENTRY"
	cat >"$ROOT$WIRING_CONF.new" <<EOF
# juice-slurm wiring: written by test/chroot/slurm-chroot.sh wire
JobSubmitPlugins=lua
PrologSlurmctld=$JUICE_LIB/slurmctld-parts.sh
EpilogSlurmctld=$JUICE_LIB/slurmctld-parts.sh
EOF
	mv "$ROOT$WIRING_CONF.new" "$ROOT$WIRING_CONF"
	# slurmctld reads JobSubmitPlugins and the prolog settings at start; slurmd and the clients load plugstack per
	# step, but a restart keeps all of them in one known state.
	restart_slurm
	write_env
	log "wired in $((SECONDS - t0)) s: SPANK plugin (built against Slurm $(slurm_version)), job_submit.lua, prolog/epilog -> 127.0.0.1:$HOOK_PORT"
}

unwire() {
	rm -f "$ROOT$PLUGSTACK_ENTRY"
	echo "# juice-slurm wiring: written by test/chroot/slurm-chroot.sh wire" >"$ROOT$WIRING_CONF"
	if daemon_running slurmctld; then restart_slurm; fi
	[ -f "$ENVFILE" ] && write_env
	log "unwired"
}

wired() { [ -s "$ROOT$PLUGSTACK_ENTRY" ] && grep -q '^JobSubmitPlugins=lua' "$ROOT$WIRING_CONF" 2>/dev/null; }

wired_hook_port() { # the port the installed juice-config.sh points at
	sed -n 's#^JUICE_HOOK_URL=https*://127.0.0.1:\([0-9]*\).*#\1#p' "$ROOT$JUICE_ETC/juice-config.sh" 2>/dev/null
}

# ---- services (on the host) ----------------------------------------------------------------------
# Processes of the host (not in the chroot), recorded by pid: juice-sim and the controller.
host_running() { [ -s "$RUNDIR/$1.pid" ] && kill -0 "$(cat "$RUNDIR/$1.pid")" 2>/dev/null; }

stop_host() { # name
	local p
	if host_running "$1"; then
		p=$(cat "$RUNDIR/$1.pid")
		log "stopping $1 (pid $p)"
		kill -TERM "$p" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null || true
	fi
	rm -f "$RUNDIR/$1.pid"
}

services() {
	daemon_running slurmctld || die "the $SUITE test bed is not up: run '$0 up $SUITE' first"
	wired || die "the $SUITE test bed is not wired: run '$0 wire $SUITE' first"
	[ -x "$REPO/bin/juice-slurm" ] && [ -x "$REPO/bin/juice-sim" ] || die "bin/ is missing: run make build"
	local pg dbname=juice_$SUITE db demo=$RUNDIR/demo hook
	hook=127.0.0.1:$(wired_hook_port)
	pg=$(sed -n 's/^JUICE_TESTBED_PG_URL=//p' "$BASE/env" 2>/dev/null)
	[ -n "$pg" ] || die "the host test bed's PostgreSQL is not up (test/testbed.sh up)"
	psql "$pg" -qtAc "SELECT 1 FROM pg_database WHERE datname='$dbname'" | grep -q 1 || psql "$pg" -qc "CREATE DATABASE $dbname"
	# The same server and credentials, this cluster's database.
	db=$(sed -E "s#^([^?]*/)[^/?]*([?]|\$)#\1$dbname\2#" <<<"$pg")
	# The schema, applied as the owner role; the controller and the admin commands use the runtime role.
	"$REPO/bin/juice-slurm" migrate --config= --database-url "$db" \
		--runtime-role "$(sed -n 's/^JUICE_TESTBED_PG_RUNTIME_ROLE=//p' "$BASE/env")" >&2
	db=$(sed -E "s#^([a-z]+://)[^@/]*@#\1$(sed -n 's/^JUICE_TESTBED_PG_RUNTIME_ROLE=//p' "$BASE/env")@#" <<<"$db")
	echo "$db" >"$RUNDIR/demo-db-url"
	install -d -m 0755 "$demo"
	[ -s "$demo/juice.token" ] || (umask 077 && echo "m2m_demo_$(openssl rand -hex 12)" >"$demo/juice.token")
	cat >"$demo/sim.json" <<EOF
{"tick": "500ms", "activateDelay": "1s", "cancelDelay": "500ms",
 "pools": [{"id": "demo", "agents": [{"gpus": 4, "vram": "24GiB", "gpuName": "NVIDIA L4", "hostname": "gpu-host-1"}]},
           {"id": "test", "agents": [{"count": 2, "gpus": 8, "vram": "80GiB"}]}]}
EOF
	if ! host_running juice-sim; then
		log "starting juice-sim on 127.0.0.1:$SIM_PORT"
		setsid "$REPO/bin/juice-sim" --listen "127.0.0.1:$SIM_PORT" --token-file "$demo/juice.token" --config "$demo/sim.json" \
			</dev/null >>"$RUNDIR/juice-sim.log" 2>&1 &
		echo $! >"$RUNDIR/juice-sim.pid"
	fi
	wait_for juice-sim 20 curl -fsS "http://127.0.0.1:$SIM_PORT/healthz"
	if ! host_running juice-controller; then
		write_scontrol
		log "starting the juice-slurm controller (hook API on $hook)"
		setsid "$REPO/bin/juice-slurm" controller --config= --cluster $CLUSTER --database-url "$db" \
			--slurmrestd-url "http://127.0.0.1:$REST_PORT" --slurm-user $REST_USER --slurm-token-file "$ROOT$TOKEN" \
			--juice-url "http://127.0.0.1:$SIM_PORT" --juice-token-file "$demo/juice.token" \
			--cluster-key "$ROOT$JUICE_ETC/cluster.key" --hook-secret "$ROOT$JUICE_ETC/hook.secret" \
			--policy "$ROOT$JUICE_ETC/juice-policy.conf" --hook-cert $JUICE_ETC/hook.crt --hook-key $JUICE_ETC/hook.key \
			--hook-listen "$hook" --poll-interval 1s --scontrol "$RUNDIR/scontrol" --state-dir "$ROOT$JUICE_SESSIONS" \
			--licenses="${JUICE_TESTBED_LICENSES_ON:-on}" --sacctmgr "$RUNDIR/sacctmgr" \
			$(acct_caps_flag "${JUICE_TESTBED_LICENSES_ON:-on}") \
			</dev/null >>"$RUNDIR/juice-controller.log" 2>&1 &
		echo $! >"$RUNDIR/juice-controller.pid"
	fi
	# Over TLS with the host's certificate, which wire copied into the chroot for the hooks to pin; the check proves
	# the listener too: a squatter on the port has no key for it.
	wait_for "the controller" 60 curl -fsS --cacert $JUICE_ETC/hook.crt "https://$hook/readyz"
	write_env
	log "services up: juice-sim 127.0.0.1:$SIM_PORT, controller $hook, database $dbname (logs in $RUNDIR)"
}

# ---- the env file ---------------------------------------------------------------------------------
# write_scontrol: host commands that are this test bed's scontrol and sacctmgr, for the controller the suites start
# on the host (--scontrol; the licenses' counts through sacctmgr): the host's own are another release and talk to
# the host's slurmctld and slurmdbd, so a lost session's requeue (before slurmrestd v0.0.45), the notify that tells
# srun why, and a license's count would go to the wrong cluster.
write_scontrol() {
	local cmd
	install -d -m 0755 "$RUNDIR"
	for cmd in scontrol sacctmgr; do
		cat >"$RUNDIR/$cmd.tmp" <<EOF
#!/bin/sh
# $cmd of the Slurm $SUITE test bed in $ROOT, run from the host (written by test/chroot/slurm-chroot.sh)
exec chroot $ROOT /usr/bin/env -i PATH=$CPATH LANG=C.UTF-8 HOME=/root $cmd "\$@"
EOF
		chmod 0755 "$RUNDIR/$cmd.tmp"
		mv "$RUNDIR/$cmd.tmp" "$RUNDIR/$cmd"
	done
}

write_env() {
	local w=no port=$HOOK_PORT nodes pg="" pgrole=""
	if wired; then w=yes; port=$(wired_hook_port); fi
	nodes=$(IFS=,; echo "${NODES[*]}")
	# The host test bed's PostgreSQL, when it is up: end-to-end runs make their own databases in it.
	[ -f "$BASE/env" ] && pg=$(sed -n 's/^JUICE_TESTBED_PG_URL=//p' "$BASE/env") &&
		pgrole=$(sed -n 's/^JUICE_TESTBED_PG_RUNTIME_ROLE=//p' "$BASE/env")
	local run_as="chroot $ROOT $JUICE_LIB/juice-run-as"
	write_scontrol
	{
		echo "JUICE_TESTBED_KIND=chroot-$SUITE"
		echo "JUICE_TESTBED_DIR=$ROOT"
		echo "JUICE_TESTBED_REPO=$REPO"
		echo "JUICE_TESTBED_SLURM_VERSION=$(slurm_version)"
		echo "JUICE_TESTBED_CLUSTER=$CLUSTER"
		echo "JUICE_TESTBED_PARTITION=$PARTITION"
		echo "JUICE_TESTBED_NODE=${NODES[0]}"
		echo "JUICE_TESTBED_NODES=$nodes"
		echo "JUICE_TESTBED_SLURMRESTD_URL=http://127.0.0.1:$REST_PORT"
		echo "JUICE_TESTBED_SLURM_USER=$REST_USER"
		echo "JUICE_TESTBED_TOKEN_FILE=$ROOT$TOKEN"
		echo "JUICE_TESTBED_TOKEN_LIFESPAN=${JUICE_TESTBED_TOKEN_LIFESPAN:-604800}"
		renew_running && echo "JUICE_TESTBED_TOKEN_RENEW=$(cut -d' ' -f2 "$RUNDIR/token-renew.settings")"
		echo "JUICE_TESTBED_CHROOT=$ROOT"
		echo "JUICE_TESTBED_EXEC=$run_as root"
		echo "JUICE_TESTBED_EXEC_AS=$run_as"
		echo "JUICE_TESTBED_SCONTROL=$RUNDIR/scontrol"
		echo "JUICE_TESTBED_SACCTMGR=$RUNDIR/sacctmgr"
		echo "JUICE_TESTBED_JOB_USER=$JOB_USER"
		echo "JUICE_TESTBED_OTHER_USER=$OTHER_USER"
		echo "JUICE_TESTBED_WIRED=$w"
		echo "JUICE_TESTBED_HOOK_PORT=$port"
		echo "JUICE_TESTBED_SIM_PORT=$SIM_PORT"
		echo "JUICE_TESTBED_CLUSTER_KEY=$ROOT$JUICE_ETC/cluster.key"
		echo "JUICE_TESTBED_HOOK_SECRET=$ROOT$JUICE_ETC/hook.secret"
		echo "JUICE_TESTBED_POLICY=$ROOT$JUICE_ETC/juice-policy.conf"
		echo "JUICE_TESTBED_SESSIONS_DIR=$ROOT$JUICE_SESSIONS"
		echo "JUICE_TESTBED_ACCOUNTING=1"
		echo "JUICE_TESTBED_SLURMDBD=127.0.0.1:$DBD_PORT"
		echo "JUICE_TESTBED_LICENSE_SERVER=$ACCT_LICENSE_SERVER"
		echo "JUICE_TESTBED_LICENSES=$(acct_license_names)"
		echo "JUICE_TESTBED_CAPS_QOS=$ACCT_CAPS_QOS"
		echo "JUICE_TESTBED_HOOK_LOG=$ROOT$JUICE_LOGDIR/hooks.log"
		echo "JUICE_TESTBED_PLUGSTACK_ENTRY=$ROOT$PLUGSTACK_ENTRY"
		[ -n "$pg" ] && echo "JUICE_TESTBED_PG_URL=$pg"
		# The controller runs as the runtime role; the suites migrate as the owner (PG_URL's user).
		[ -n "$pgrole" ] && echo "JUICE_TESTBED_PG_RUNTIME_ROLE=$pgrole"
		[ -f "$RUNDIR/demo-db-url" ] && echo "JUICE_TESTBED_DEMO_DB_URL=$(cat "$RUNDIR/demo-db-url")"
	} >"$ENVFILE.tmp"
	chmod 644 "$ENVFILE.tmp"
	mv "$ENVFILE.tmp" "$ENVFILE"
}

status() {
	local rc=0 n
	for n in munged mariadb slurmdbd slurmctld $(slurmd_names) slurmrestd; do
		if daemon_running "$n"; then
			echo "$n: running (pid $(cat "$RUNDIR/$n.pid"))"
		else
			echo "$n: stopped"
			rc=1
		fi
	done
	if renew_running; then echo "token-renew: running (pid $(cat "$RUNDIR/token-renew.pid"), lifespan/every: $(cat "$RUNDIR/token-renew.settings"))"; fi
	if wired; then echo "wired: hooks -> 127.0.0.1:$(wired_hook_port)"; else echo "not wired"; fi
	for m in $MOUNTS; do if is_mounted "$ROOT/$m"; then echo "mounted: $ROOT/$m"; fi; done
	[ -f "$ENVFILE" ] && echo "env: $ENVFILE"
	return $rc
}

case "$CMD" in
up)
	t0=$SECONDS
	build
	start
	log "up in $((SECONDS - t0)) s"
	;;
wire) wire ;;
restart-rest) restart_rest ;;
unwire) unwire ;;
services) services ;;
down)
	[ -d "$ROOT" ] || exit 0
	stop_all
	rm -f "$ENVFILE"
	umount_all
	log "down"
	;;
status)
	[ -d "$ROOT" ] || { echo "not built"; exit 1; }
	status
	;;
destroy)
	[ -d "$ROOT" ] || exit 0
	stop_all
	umount_all
	any_mount_inside && die "something is still mounted inside $ROOT; not deleting"
	rm -rf --one-file-system "$ROOT"
	log "destroyed"
	;;
*) usage ;;
esac
