#!/usr/bin/env bash
# The project's test bed: a real two-node Slurm 22.05 cluster (munged, slurmctld, two slurmds, slurmrestd with JWT on
# 127.0.0.1, slurmdbd on MariaDB for accounting and the pools' remote licenses) and a PostgreSQL cluster run by a
# non-root user on its own port, on a Debian 12 machine, as root.
#
#   test/testbed.sh up       install what is missing, write the configs, start every daemon, wait, write the env file
#   test/testbed.sh wire     (after up) load the SPANK plugin, job_submit.lua and the slurmctld prolog/epilog hooks
#   test/testbed.sh unwire   take them out again
#   test/testbed.sh services (after wire) start juice-sim and the juice-slurm controller as the demo runs them
#   test/testbed.sh down     stop exactly the daemons this script started, by pid
#   test/testbed.sh status   say what runs
#
# Everything lives under $JUICE_TESTBED_DIR (default /var/tmp/juice-testbed). The env file
# $JUICE_TESTBED_DIR/env holds the URLs and the path of the REST token file for the tests. The token is never
# exported as SLURM_JWT: srun and sbatch would switch to auth/jwt and a waiting srun would be revoked.
set -euo pipefail

TB=${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/apt.sh
. "$REPO/test/lib/apt.sh"
# shellcheck source=lib/accounting.sh
. "$REPO/test/lib/accounting.sh"
RUN=$TB/run
LOG=$TB/log
SLURM_STATE=$TB/slurm
PGDATA=$TB/pg/data
PGSOCK=$TB/pg/sock
PGPORT=${JUICE_TESTBED_PGPORT:-5433}
REST_PORT=6820
CLUSTER=juicetest
# Accounting (test/lib/accounting.sh): slurmdbd (its default port, 6819, is juicetest2's slurmd's) on a MariaDB of
# the test bed's own, both on loopback.
DBD_PORT=6831
MARIADB_PORT=6836
MARIADB_DIR=$TB/mariadb
MARIADB_CNF=$MARIADB_DIR/my.cnf
SLURMDBD_CONF=/etc/slurm/slurmdbd.conf
# Two compute nodes on this machine: one slurmd each (slurmd -N NAME, its own port, spool, log and pid file), each
# in a UTS namespace of its own so `hostname` in a job names its node. They share the state directory
# ($JUICE_SESSIONS) as compute nodes on a shared file system do.
NODES=(juicetest1 juicetest2)
declare -A NODE_PORT=([juicetest1]=6818 [juicetest2]=6819)
PARTITION=debug
SLURM_USER=slurm
PG_USER=postgres
# PostgreSQL roles (item 7 of the security issue): the owner creates databases and runs migrations; the runtime
# role, which the controller uses, reads and writes rows and has no DDL rights. Neither is a superuser, and both
# authenticate with scram-sha-256 passwords kept in a 0600 passfile; the superuser logs in only through the Unix
# socket as the OS user postgres.
PG_OWNER=juice_owner
PG_RUNTIME=juice_runtime
PGPASS=$TB/pgpass
PGBIN=/usr/lib/postgresql/15/bin
SLURM_CONF=/etc/slurm/slurm.conf
WIRING_CONF=/etc/slurm/juice-wiring.conf
PLUGSTACK_ENTRY=/etc/slurm/plugstack.conf.d/juice.conf
JUICE_PREFIX=/usr/local/lib/juice-slurm
# What wire and services run: the build tree's artefacts (default), or an installed package's when
# JUICE_TESTBED_INSTALLED names its prefix (/usr for the .deb: `make demo-installed`), wired where they are.
INSTALLED=${JUICE_TESTBED_INSTALLED:-}
if [ -n "$INSTALLED" ]; then
	JUICE_PREFIX=$INSTALLED/lib/juice-slurm
	ART_BIN=$JUICE_PREFIX ART_PLUGIN=$JUICE_PREFIX/spank_juice.so ART_HOOKS=$JUICE_PREFIX
	ART_LUA=$INSTALLED/share/juice-slurm ART_CONFIG=$INSTALLED/share/juice-slurm/examples
else
	ART_BIN=$REPO/bin ART_PLUGIN=$REPO/spank/build/spank_juice.so ART_HOOKS=$REPO/hooks
	ART_LUA=$REPO/hooks ART_CONFIG=$REPO/hooks
fi
ART_POLICY=$ART_CONFIG/juice-policy.conf
[ -n "$INSTALLED" ] || ART_POLICY=$REPO/deploy/juice-policy.conf
JUICE_ETC=/etc/juice-slurm
JUICE_SESSIONS=/var/spool/juice-slurm/sessions

# The daemons started here inherit the working directory: make it one that never goes away (slurmrestd dies on
# getcwd when the directory it was started in, say a deleted clone, is gone).
cd /

log() { printf '[testbed %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Daemons must not inherit this script's open files: a caller holding the host lock (make's flock) would
# otherwise leave the lock held by slurmrestd or PostgreSQL for as long as they run. Every daemon starts from a
# script that closes every descriptor above stderr first.
close_fds() {
	local fd
	for fd in /proc/$BASHPID/fd/*; do
		fd=${fd##*/}
		# 255 is bash's own descriptor of this script.
		[ "$fd" -gt 2 ] 2>/dev/null && [ "$fd" -ne 255 ] && eval "exec $fd>&-"
	done
	return 0
}
close_fds
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (the test bed installs packages and starts Slurm's daemons)"

alive() { # alive PIDFILE: the pid in the file runs
	[ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# wait_for DESCRIPTION SECONDS COMMAND...: retry until the command succeeds, saying every 5 s that we still wait.
wait_for() {
	local what=$1 limit=$2 start=$SECONDS next=5
	shift 2
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS - start >= limit)); then
			die "$what: not ready after ${limit}s"
		fi
		if ((SECONDS - start >= next)); then
			log "still waiting for $what ($((SECONDS - start))s)"
			next=$((next + 5))
		fi
		sleep 0.2
	done
}

install_packages() {
	local need=()
	command -v slurmctld >/dev/null || need+=(slurm-wlm slurmctld slurmd slurm-client)
	command -v slurmrestd >/dev/null || need+=(slurmrestd)
	[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so ] || need+=(slurm-wlm-jwt-plugin)
	[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_lua.so ] || need+=(slurm-wlm-basic-plugins)
	command -v munged >/dev/null || need+=(munge)
	[ -e /usr/include/slurm/spank.h ] || need+=(libslurm-dev)
	[ -x $PGBIN/postgres ] || need+=(postgresql-15)
	command -v slurmdbd >/dev/null || need+=(slurmdbd)
	command -v mariadbd >/dev/null || need+=(mariadb-server)
	command -v gcc >/dev/null || need+=(gcc libc6-dev)
	command -v make >/dev/null || need+=(make)
	[ -e /usr/include/openssl/evp.h ] || need+=(libssl-dev)
	command -v curl >/dev/null || need+=(curl)
	command -v jq >/dev/null || need+=(jq)
	command -v setpriv >/dev/null || need+=(util-linux)
	command -v openssl >/dev/null || need+=(openssl)
	# For the SPANK plugin's unit tests: Lua for job_submit.lua, Python's cryptography for independent vectors.
	command -v lua5.1 >/dev/null || need+=(lua5.1)
	/usr/bin/python3 -c 'import cryptography' 2>/dev/null || need+=(python3-cryptography)
	# For the plugin's libFuzzer targets (make -C spank fuzz-smoke): clang with its sanitizer runtimes.
	command -v clang >/dev/null || need+=(clang)
	compgen -G '/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a' >/dev/null || need+=(libclang-rt-14-dev)
	# promtool checks deploy/monitoring's alert rules (TestAlertRulesPassPromtool); the server is not started.
	command -v promtool >/dev/null || need+=(prometheus)
	# For make test-replicas: replicas in network namespaces of their own (ip), reaching the bed's loopback services
	# through relays on the bridge's host side (socat).
	command -v ip >/dev/null || need+=(iproute2)
	command -v socat >/dev/null || need+=(socat)
	# For make test-package (test/package/check.sh): the .rpm's file list, the man page's rendering and lookup,
	# the binaries' ELF headers and strings.
	command -v rpm2cpio >/dev/null || need+=(rpm2cpio)
	command -v cpio >/dev/null || need+=(cpio)
	command -v groff >/dev/null || need+=(groff-base)
	command -v man >/dev/null || need+=(man-db)
	command -v readelf >/dev/null && command -v strings >/dev/null || need+=(binutils)
	((${#need[@]})) || return 0
	log "installing from Debian's packages: ${need[*]}"
	# Postinst scripts would start the daemons themselves (without our config); policy-rc.d tells them not to.
	local policy=/usr/sbin/policy-rc.d had_policy=0
	[ -e $policy ] && had_policy=1
	if [ $had_policy = 0 ]; then printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy; fi
	export DEBIAN_FRONTEND=noninteractive
	if ! host_apt install -y --no-install-recommends "${need[@]}" >"$LOG/apt.log" 2>&1; then
		log "apt-get install failed; updating the package lists and trying once more"
		host_apt update >>"$LOG/apt.log" 2>&1
		host_apt install -y --no-install-recommends "${need[@]}" >>"$LOG/apt.log" 2>&1 ||
			{ tail -20 "$LOG/apt.log" >&2; [ $had_policy = 1 ] || rm -f $policy; die "apt-get install failed (see $LOG/apt.log)"; }
	fi
	[ $had_policy = 1 ] || rm -f $policy
	# Debian's postinst scripts may have started daemons despite policy-rc.d (munge does on some images): they are
	# not ours to keep, and ours need their ports.
	log "packages installed"
}

start_munge() {
	if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
	if [ ! -s /etc/munge/munge.key ]; then
		log "creating the munge key"
		install -d -o munge -g munge -m 0700 /etc/munge
		setpriv --reuid=munge --regid=munge --clear-groups mungekey --create --keyfile=/etc/munge/munge.key
	fi
	install -d -o munge -g munge -m 0755 /run/munge
	install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
	log "starting munged"
	setpriv --reuid=munge --regid=munge --clear-groups munged --pid-file=/run/munge/munged.pid
	wait_for munged 20 sh -c 'munge -n | unmunge'
	cp /run/munge/munged.pid "$RUN/munged.pid"
}

SLURM_CONF_CHANGED=0

write_slurm_conf() {
	local hw mem n nodelines=""
	# slurmd -C prints this machine's node line: keep its hardware words, with our names and ports. Both nodes
	# describe the same cores (oversubscribed on purpose) and about 90% of the memory, so slurmd never refuses to
	# register.
	hw=$(slurmd -C | head -1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' | tr '\n' ' ')
	mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
	for n in "${NODES[@]}"; do
		nodelines+="NodeName=$n NodeAddr=127.0.0.1 NodeHostname=$n Port=${NODE_PORT[$n]} ${hw}RealMemory=$mem State=UNKNOWN"$'\n'
	done
	install -d -o $SLURM_USER -g $SLURM_USER -m 0755 "$SLURM_STATE" "$SLURM_STATE/state" "$SLURM_STATE/spool" "$LOG/slurm"
	for n in "${NODES[@]}"; do install -d -o $SLURM_USER -g $SLURM_USER -m 0755 "$SLURM_STATE/spool/$n"; done
	if [ ! -s "$SLURM_STATE/jwt.key" ]; then
		head -c 32 /dev/urandom >"$SLURM_STATE/jwt.key"
	fi
	chown $SLURM_USER:$SLURM_USER "$SLURM_STATE/jwt.key"
	chmod 0600 "$SLURM_STATE/jwt.key"
	[ -e $WIRING_CONF ] || echo "# juice-slurm wiring: written by test/testbed.sh wire" >$WIRING_CONF
	local short ctld
	short=$(hostname -s)
	# JUICE_TESTBED_CTLD_HOSTS ("NAME(ADDR) NAME(ADDR)"): a primary and a backup slurmctld
	# (test/slurmfailover/failover.sh); the backup takes control 10 s after the primary stops answering.
	ctld="SlurmctldHost=$short(127.0.0.1)"
	if [ -n "${JUICE_TESTBED_CTLD_HOSTS:-}" ]; then
		ctld=$(printf 'SlurmctldHost=%s\n' $JUICE_TESTBED_CTLD_HOSTS)$'\n'SlurmctldTimeout=10
	fi
	cat >"$SLURM_CONF.new" <<EOF
# Written by juice-slurm's test/testbed.sh: a two-node cluster on loopback (one slurmd per node, -N NAME).
ClusterName=$CLUSTER
$ctld
SlurmUser=$SLURM_USER
SlurmctldPort=6817
StateSaveLocation=$SLURM_STATE/state
# %n: the node name (slurmd -N), so the two slurmds keep apart.
SlurmdSpoolDir=$SLURM_STATE/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid.slurm
SlurmctldLogFile=$LOG/slurm/slurmctld.log
SlurmdLogFile=$LOG/slurm/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$SLURM_STATE/jwt.key
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
$(acct_slurm_conf $DBD_PORT)
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
ReturnToService=2
SchedulerParameters=sched_interval=2,allow_zero_lic,bf_licenses
MinJobAge=300
# Room for the benchmark's 10,000 held jobs beside the others (the default is 10,000 in all).
MaxJobCount=50000
# One license the demo uses to keep a job pending (eligible, waiting for Licenses) for as long as it likes.
Licenses=juice_demo:1
KillWait=5
# Slow prologs: slurmctld waits for ever unless this is set; the juice prolog's own wait is shorter.
PrologEpilogTimeout=300
Include $WIRING_CONF
${nodelines}PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
	if ! cmp -s "$SLURM_CONF.new" "$SLURM_CONF"; then
		mv "$SLURM_CONF.new" "$SLURM_CONF"
		# Nodes come and go only with a restart of slurmctld and the slurmds (start_slurm does it).
		SLURM_CONF_CHANGED=1
	else
		rm -f "$SLURM_CONF.new"
	fi
	# Debian's plugstack.conf includes plugstack.conf.d/*.conf.
	install -d /etc/slurm/plugstack.conf.d
	[ -e /etc/slurm/plugstack.conf ] || echo "include /etc/slurm/plugstack.conf.d/*.conf" >/etc/slurm/plugstack.conf
}

# mariadb_root ARGS...: the mariadb client as MariaDB's root, through the socket. SQL on stdin.
mariadb_root() { mariadb --defaults-file="$MARIADB_CNF" "$@"; }

# start_mariadb: MariaDB in the foreground of its own session (no systemd here; mariadbd drops to the user mysql
# itself), its data under $MARIADB_DIR, then slurmdbd's database and user, whose password is kept from an earlier
# run (else new) in a root-only file.
start_mariadb() {
	install -d -m 0755 "$MARIADB_DIR"
	install -d -o mysql -g mysql -m 0700 "$MARIADB_DIR/data"
	install -d -o mysql -g mysql -m 0755 "$MARIADB_DIR/run" "$LOG/mariadb"
	acct_mariadb_cnf "$MARIADB_DIR/data" "$MARIADB_DIR/run" $MARIADB_PORT "$LOG/mariadb/mariadb.log" >"$MARIADB_CNF.new"
	if ! cmp -s "$MARIADB_CNF.new" "$MARIADB_CNF"; then
		stop mariadb
		mv "$MARIADB_CNF.new" "$MARIADB_CNF"
	else
		rm -f "$MARIADB_CNF.new"
	fi
	if [ ! -d "$MARIADB_DIR/data/mysql" ]; then
		log "initialising MariaDB in $MARIADB_DIR/data"
		mariadb-install-db --defaults-file="$MARIADB_CNF" --skip-test-db --auth-root-authentication-method=socket \
			>"$LOG/mariadb/install.log" 2>&1 || { tail -20 "$LOG/mariadb/install.log" >&2; die "mariadb-install-db failed"; }
	fi
	if ! alive "$RUN/mariadb.pid"; then
		log "starting MariaDB on 127.0.0.1:$MARIADB_PORT"
		setsid mariadbd --defaults-file="$MARIADB_CNF" </dev/null >>"$LOG/mariadb/mariadbd.out" 2>&1 &
		echo $! >"$RUN/mariadb.pid"
	fi
	wait_for MariaDB 60 mariadb_root -e 'SELECT 1'
	[ -s "$MARIADB_DIR/slurm.pass" ] || (umask 077 && openssl rand -hex 24 >"$MARIADB_DIR/slurm.pass")
	acct_db_sql "$(cat "$MARIADB_DIR/slurm.pass")" | mariadb_root
}

# start_slurmdbd: slurmdbd in the foreground of its own session, then the cluster and the pools' licenses in it
# (before start_slurm: slurmctld must find its cluster there).
start_slurmdbd() {
	(umask 077 && acct_slurmdbd_conf $DBD_PORT $SLURM_USER "$RUN/slurmdbd.pid.slurm" "$LOG/slurm/slurmdbd.log" \
		$MARIADB_PORT "$(cat "$MARIADB_DIR/slurm.pass")" >"$SLURMDBD_CONF.new")
	chown $SLURM_USER:$SLURM_USER "$SLURMDBD_CONF.new"
	if ! cmp -s "$SLURMDBD_CONF.new" "$SLURMDBD_CONF"; then
		stop slurmdbd
		mv "$SLURMDBD_CONF.new" "$SLURMDBD_CONF"
	else
		rm -f "$SLURMDBD_CONF.new"
	fi
	if ! alive "$RUN/slurmdbd.pid"; then
		log "starting slurmdbd on 127.0.0.1:$DBD_PORT"
		setsid slurmdbd -D </dev/null >>"$LOG/slurm/slurmdbd.out" 2>&1 &
		echo $! >"$RUN/slurmdbd.pid"
		# Its first start creates its tables: some seconds. (Each sacctmgr costs about 0.2 s: only after a start.)
		wait_for slurmdbd 90 sacctmgr -nP show cluster
	fi
	acct_ensure $CLUSTER "$SLURM_STATE/state" "root $SLURM_USER nobody"
}

stop_slurmds() {
	local n
	# The one slurmd of the one-node test bed of earlier versions, then ours.
	stop slurmd
	for n in "${NODES[@]}"; do stop "slurmd-$n"; done
}

nodes_ready() { # every node idle, mixed or allocated
	local out n
	out=$(sinfo -h -N -o '%N %t') || return 1
	for n in "${NODES[@]}"; do
		grep -Eq "^$n (idle|mix|alloc)\$" <<<"$out" || return 1
	done
}

start_slurm() {
	if [ $SLURM_CONF_CHANGED = 1 ] && alive "$RUN/slurmctld.pid"; then
		log "slurm.conf changed: restarting slurmctld, the slurmds and slurmrestd"
		stop_slurmds
		stop slurmctld
		stop slurmrestd # it reads the SlurmctldHost lines at start; cmd_up starts it again
	fi
	SLURM_CONF_CHANGED=0
	if ! alive "$RUN/slurmctld.pid"; then
		log "starting slurmctld"
		slurmctld
		# The primary's line: scontrol ping fails while a backup (JUICE_TESTBED_CTLD_HOSTS) is not up yet.
		wait_for slurmctld 30 sh -c "scontrol ping | grep -q '^Slurmctld(primary) at .* is UP'"
	fi
	stop slurmd # a one-node test bed's slurmd, started by an earlier version of this script
	local n
	for n in "${NODES[@]}"; do
		alive "$RUN/slurmd-$n.pid" && continue
		log "starting slurmd $n (port ${NODE_PORT[$n]})"
		# Foreground (-D) in its own session and UTS namespace; unshare and sh exec, so $! is slurmd's pid.
		setsid unshare --uts /bin/sh -c 'hostname "$1" && exec slurmd -D -N "$1"' sh "$n" \
			</dev/null >>"$LOG/slurm/slurmd-$n.out" 2>&1 &
		echo $! >"$RUN/slurmd-$n.pid"
	done
	# A node drained by an earlier run (a failed batch step drains it) would leave every later job pending.
	local drained
	drained=$(sinfo -h -N -t drain,drng -o %N | sort -u | paste -sd, -)
	if [ -n "$drained" ]; then
		log "resuming drained nodes $drained"
		scontrol update nodename="$drained" state=resume || true
	fi
	wait_for "nodes ${NODES[*]}" 60 nodes_ready
}

refresh_token() {
	local tok
	# A long lifespan: a test run must not outlive its token. It is rewritten on every 'up'.
	tok=$(scontrol token username=$SLURM_USER lifespan=172800 | sed -n 's/^SLURM_JWT=//p')
	[ -n "$tok" ] || die "scontrol token printed no token"
	umask 077
	printf '%s\n' "$tok" >"$TB/slurm-token.new"
	chmod 0600 "$TB/slurm-token.new"
	mv "$TB/slurm-token.new" "$TB/slurm-token"
}

rest_ping() {
	curl -fsS -H "X-SLURM-USER-NAME: $SLURM_USER" -H "X-SLURM-USER-TOKEN: $(cat "$TB/slurm-token")" \
		"http://127.0.0.1:$REST_PORT/slurm/v0.0.38/ping"
}

start_slurmrestd() {
	if alive "$RUN/slurmrestd.pid"; then return 0; fi
	log "starting slurmrestd on 127.0.0.1:$REST_PORT"
	# slurmrestd refuses root; SLURM_JWT=daemon makes it talk to slurmctld with the key it shares.
	SLURM_JWT=daemon setsid setpriv --reuid=$SLURM_USER --regid=$SLURM_USER --clear-groups \
		slurmrestd -a rest_auth/jwt -s openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36 "127.0.0.1:$REST_PORT" \
		</dev/null >>"$LOG/slurm/slurmrestd.log" 2>&1 &
	echo $! >"$RUN/slurmrestd.pid"
	wait_for slurmrestd 30 rest_ping
}

start_postgres() {
	install -d -o $PG_USER -g $PG_USER -m 0700 "$TB/pg" "$PGSOCK" "$LOG/pg"
	if [ ! -s "$PGDATA/PG_VERSION" ]; then
		log "initialising PostgreSQL in $PGDATA"
		setpriv --reuid=$PG_USER --regid=$PG_USER --clear-groups \
			$PGBIN/initdb -D "$PGDATA" -U postgres --auth-local=peer --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 \
			>"$LOG/pg/initdb.log" 2>&1 || { cat "$LOG/pg/initdb.log" >&2; die "initdb failed"; }
		cat >>"$PGDATA/postgresql.conf" <<EOF
# juice-slurm test bed
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$PGSOCK'
max_connections = 300
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 256MB
password_encryption = 'scram-sha-256'
EOF
	fi
	write_pg_hba
	chmod 0755 "$TB/pg" "$PGSOCK"
	if ! setpriv --reuid=$PG_USER --regid=$PG_USER --clear-groups $PGBIN/pg_ctl -D "$PGDATA" status >/dev/null 2>&1; then
		log "starting PostgreSQL on 127.0.0.1:$PGPORT"
		setpriv --reuid=$PG_USER --regid=$PG_USER --clear-groups \
			$PGBIN/pg_ctl -D "$PGDATA" -l "$LOG/pg/postgres.log" -w -t 60 start >/dev/null
	else
		# A test bed brought up by an older version of this script trusted every local connection: the new
		# pg_hba.conf applies from the reload on.
		setpriv --reuid=$PG_USER --regid=$PG_USER --clear-groups $PGBIN/pg_ctl -D "$PGDATA" reload >/dev/null
	fi
	head -1 "$PGDATA/postmaster.pid" >"$RUN/postgres.pid"
	wait_for postgres 30 $PGBIN/pg_isready -h 127.0.0.1 -p "$PGPORT"
	ensure_pg_roles
}

# pg_hba.conf: nothing is trusted. The superuser only through the socket as the OS user postgres (peer); every
# other role with its scram-sha-256 password, over the socket or TCP.
write_pg_hba() {
	cat >"$PGDATA/pg_hba.conf.new" <<EOF
# juice-slurm test bed: written by test/testbed.sh
local   all   postgres                 peer
local   all   all                      scram-sha-256
host    all   all        127.0.0.1/32  scram-sha-256
host    all   all        ::1/128       scram-sha-256
EOF
	chown $PG_USER:$PG_USER "$PGDATA/pg_hba.conf.new" && chmod 0600 "$PGDATA/pg_hba.conf.new"
	mv "$PGDATA/pg_hba.conf.new" "$PGDATA/pg_hba.conf"
}

# pg_super: psql as the superuser, through the socket (peer). SQL on stdin or -c; nothing secret on argv.
pg_super() {
	setpriv --reuid=$PG_USER --regid=$PG_USER --clear-groups \
		psql -h "$PGSOCK" -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA "$@"
}

# pgpass_get ROLE: the role's password from the passfile, if it has one.
pgpass_get() { [ -f "$PGPASS" ] && awk -F: -v u="$1" '$4 == u { print $5; exit }' "$PGPASS" || true; }

# ensure_pg_roles: the owner and runtime roles with their passwords (kept from an earlier run, else new), the
# passfile (0600, root) that the tests, the demo and the controller read, and the first test bed's SUPERUSER role
# "juice" disarmed.
ensure_pg_roles() {
	local own rt
	own=$(pgpass_get $PG_OWNER)
	rt=$(pgpass_get $PG_RUNTIME)
	[ -n "$own" ] || own=$(openssl rand -hex 24)
	[ -n "$rt" ] || rt=$(openssl rand -hex 24)
	(
		umask 077
		for h in 127.0.0.1 localhost; do
			echo "$h:$PGPORT:*:$PG_OWNER:$own"
			echo "$h:$PGPORT:*:$PG_RUNTIME:$rt"
		done >"$PGPASS.new"
	)
	mv "$PGPASS.new" "$PGPASS"
	pg_super >/dev/null <<EOF
DO \$\$ BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$PG_OWNER') THEN CREATE ROLE $PG_OWNER; END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$PG_RUNTIME') THEN CREATE ROLE $PG_RUNTIME; END IF;
	IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'juice') THEN ALTER ROLE juice NOSUPERUSER NOLOGIN; END IF;
	-- The tests' databases are made and dropped by the owner role (test/testbed CreateDatabase), WITH (FORCE) since
	-- a controller under test may still hold runtime-role connections: ending another role's backends needs this.
	-- A test bed privilege, not one the product needs (without it every such drop failed and 122 databases piled up).
	IF NOT pg_has_role('$PG_OWNER', 'pg_signal_backend', 'MEMBER') THEN GRANT pg_signal_backend TO $PG_OWNER; END IF;
END \$\$;
ALTER ROLE $PG_OWNER LOGIN NOSUPERUSER CREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '$own';
ALTER ROLE $PG_RUNTIME LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '$rt';
EOF
}

write_env() {
	cat >"$TB/env.new" <<EOF
JUICE_TESTBED_DIR=$TB
JUICE_TESTBED_REPO=$REPO
JUICE_TESTBED_CLUSTER=$CLUSTER
JUICE_TESTBED_PARTITION=$PARTITION
JUICE_TESTBED_NODES=$(IFS=,; echo "${NODES[*]}")
JUICE_TESTBED_SLURM_CONF=$SLURM_CONF
JUICE_TESTBED_SLURM_USER=$SLURM_USER
JUICE_TESTBED_SLURMRESTD_URL=http://127.0.0.1:$REST_PORT
JUICE_TESTBED_TOKEN_FILE=$TB/slurm-token
JUICE_TESTBED_PG_URL=postgres://$PG_OWNER@127.0.0.1:$PGPORT/postgres?passfile=$PGPASS
JUICE_TESTBED_PG_RUNTIME_ROLE=$PG_RUNTIME
JUICE_TESTBED_SESSIONS_DIR=$JUICE_SESSIONS
JUICE_TESTBED_ACCOUNTING=1
JUICE_TESTBED_SLURMDBD=127.0.0.1:$DBD_PORT
JUICE_TESTBED_SACCTMGR=/usr/bin/sacctmgr
JUICE_TESTBED_LICENSE_SERVER=$ACCT_LICENSE_SERVER
JUICE_TESTBED_LICENSES=$(acct_license_names)
JUICE_TESTBED_CAPS_QOS=$ACCT_CAPS_QOS
EOF
	mv "$TB/env.new" "$TB/env"
}

# stop NAME: stop the daemon whose pid file this script keeps, and wait until it is gone.
stop() {
	local f=$RUN/$1.pid pid i
	alive "$f" || { rm -f "$f"; return 0; }
	pid=$(cat "$f")
	log "stopping $1 (pid $pid)"
	kill "$pid" 2>/dev/null || true
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
	rm -f "$f"
}

cmd_up() {
	local t0=$SECONDS
	install -d "$TB" "$RUN" "$LOG"
	# Root's and written by root alone: the hooks trust the controller's socket there (hook.sock) only so.
	chmod 0755 "$RUN"
	install_packages
	start_munge
	write_slurm_conf
	start_mariadb
	start_slurmdbd
	start_slurm
	refresh_token
	start_slurmrestd
	start_postgres
	write_env
	log "test bed up in $((SECONDS - t0))s; env file: $TB/env"
}

cmd_down() {
	[ -d "$RUN" ] || { log "nothing to stop"; return 0; }
	stop juice-controller
	stop juice-sim
	stop slurmrestd
	stop_slurmds
	stop slurmctld
	# After slurmctld, which hands slurmdbd what it still holds as it stops.
	stop slurmdbd
	stop mariadb
	if alive "$RUN/postgres.pid"; then
		log "stopping PostgreSQL"
		setpriv --reuid=$PG_USER --regid=$PG_USER --clear-groups $PGBIN/pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null || stop postgres
		rm -f "$RUN/postgres.pid"
	fi
	stop munged
	# The Slurm 24.11/26.05 chroots of test-compat are test beds too.
	local suite
	for suite in trixie sid; do
		[ -d "$TB/chroot-$suite" ] && bash "$REPO/test/chroot/slurm-chroot.sh" down "$suite" || true
	done
	log "test bed down"
}

cmd_status() {
	local n
	for n in munged mariadb slurmdbd slurmctld "${NODES[@]/#/slurmd-}" slurmrestd postgres juice-sim juice-controller; do
		if alive "$RUN/$n.pid"; then echo "$n: running (pid $(cat "$RUN/$n.pid"))"; else echo "$n: stopped"; fi
	done
}

# wire: load juice-slurm into the test bed's Slurm: the SPANK plugin through plugstack.conf.d, job_submit.lua,
# and the slurmctld prolog/epilog hooks. Built artefacts come from the repository (make build).
cmd_wire() {
	[ -s "$ART_PLUGIN" ] || die "$ART_PLUGIN is missing: run make build"
	[ -x "$ART_BIN/juice-slurm" ] && [ -x "$ART_BIN/juice-slurm-hook" ] ||
		die "$ART_BIN lacks juice-slurm or juice-slurm-hook: run make build"
	install -d -m 0755 $JUICE_PREFIX $JUICE_ETC
	install -d -o $SLURM_USER -g $SLURM_USER -m 0700 $JUICE_SESSIONS
	touch "$LOG/juice-hooks.log" && chown $SLURM_USER:$SLURM_USER "$LOG/juice-hooks.log" && chmod 0600 "$LOG/juice-hooks.log"
	# Replacing a loaded .so in place is unsafe: copy to a temporary name, then rename.
	# (An installed package's files are wired where they are.)
	if [ -z "$INSTALLED" ]; then
		install -m 0755 "$ART_PLUGIN" $JUICE_PREFIX/.spank_juice.so.new
		mv $JUICE_PREFIX/.spank_juice.so.new $JUICE_PREFIX/spank_juice.so
		install -m 0755 "$ART_BIN/juice-slurm" $JUICE_PREFIX/.juice-slurm.new
		mv $JUICE_PREFIX/.juice-slurm.new $JUICE_PREFIX/juice-slurm
		install -m 0755 "$ART_BIN/juice-slurm-hook" $JUICE_PREFIX/.juice-slurm-hook.new
		mv $JUICE_PREFIX/.juice-slurm-hook.new $JUICE_PREFIX/juice-slurm-hook
		install -m 0755 "$ART_HOOKS/juice-prolog.sh" "$ART_HOOKS/juice-epilog.sh" "$ART_HOOKS/slurmctld-parts.sh" $JUICE_PREFIX/
	fi
	# PrologSlurmctld and EpilogSlurmctld run through the dispatcher, as at a site that keeps its own beside ours:
	# juice-slurm's part only, every other part (a test's leftover) removed.
	local ctx
	for ctx in prolog epilog; do
		install -d -m 0755 /etc/slurm/${ctx}_slurmctld.d
		find /etc/slurm/${ctx}_slurmctld.d -mindepth 1 -maxdepth 1 ! -name 50-juice -exec rm -rf {} +
		ln -sfn $JUICE_PREFIX/juice-$ctx.sh /etc/slurm/${ctx}_slurmctld.d/50-juice
	done
	[ -s $JUICE_ETC/cluster.key ] || (umask 077 && openssl rand -hex 32 >$JUICE_ETC/cluster.key)
	chown $SLURM_USER:$SLURM_USER $JUICE_ETC/cluster.key && chmod 0600 $JUICE_ETC/cluster.key
	[ -s $JUICE_ETC/hook.secret ] || (umask 077 && openssl rand -hex 32 >$JUICE_ETC/hook.secret)
	# The hook API's certificate, which the hooks pin, and its key (the controller runs as root here).
	sh "$REPO/deploy/make-hook-cert.sh" $JUICE_ETC root >&2
	chown $SLURM_USER:$SLURM_USER $JUICE_ETC/hook.secret && chmod 0600 $JUICE_ETC/hook.secret
	# The hooks call the controller's Unix socket (--hook-socket, started by cmd_services and by the suites' own
	# controllers: testbed.Env.HookSocketArgs); the chroots' beds keep https, which the hook hands to juice-slurm.
	sed -e "s#^JUICE_SLURM_BIN=.*#JUICE_SLURM_BIN=$JUICE_PREFIX/juice-slurm#" \
		-e "s#^JUICE_HOOK_BIN=.*#JUICE_HOOK_BIN=$JUICE_PREFIX/juice-slurm-hook#" \
		-e "s#^JUICE_HOOK_URL=.*#JUICE_HOOK_URL=unix:$RUN/hook.sock#" \
		-e "s#^JUICE_HOOK_LOG=.*#JUICE_HOOK_LOG=$LOG/juice-hooks.log#" \
		-e "s#^JUICE_LICENSES=.*#JUICE_LICENSES=${JUICE_TESTBED_LICENSES_ON:-on}#" \
		-e "s#^JUICE_PROLOG_WAIT=.*#JUICE_PROLOG_WAIT=${JUICE_TESTBED_PROLOG_WAIT:-15s}#" \
		"$ART_CONFIG/juice-config.sh" >$JUICE_ETC/juice-config.sh
	# The site policy job_submit.lua and the controller both read: the plugstack's limits, the pools of
	# juice-sim's configurations (the demo's and the e2e suite's), and the e2e suite's pool limits.
	sed -e 's/^pools = .*/pools = demo, small, test, lab/' "$ART_POLICY" >$JUICE_ETC/.juice-policy.conf.new
	cat "$REPO/test/testbed/juice-policy.extra" >>$JUICE_ETC/.juice-policy.conf.new
	# JUICE_TESTBED_HANDOFF=on (the benchmarks): session hand-off in the demo's pool.
	[ "${JUICE_TESTBED_HANDOFF:-off}" != on ] || echo "pool.demo.handoff = on" >>$JUICE_ETC/.juice-policy.conf.new
	chmod 0644 $JUICE_ETC/.juice-policy.conf.new && mv $JUICE_ETC/.juice-policy.conf.new $JUICE_ETC/juice-policy.conf
	# The module first: slurmctld loads a new job_submit.lua (which requires it) at the next submission.
	install -m 0644 "$ART_LUA/juice_submit.lua" /etc/slurm/.juice_submit.lua.new
	mv /etc/slurm/.juice_submit.lua.new /etc/slurm/juice_submit.lua
	install -m 0644 "$ART_LUA/job_submit.lua" /etc/slurm/.job_submit.lua.new
	mv /etc/slurm/.job_submit.lua.new /etc/slurm/job_submit.lua
	echo "required $JUICE_PREFIX/spank_juice.so /usr/bin/juice $JUICE_SESSIONS key=$JUICE_ETC/cluster.key max_gpus=8 max_vram=80GiB" \
		>$PLUGSTACK_ENTRY.new
	mv $PLUGSTACK_ENTRY.new $PLUGSTACK_ENTRY
	cat >$WIRING_CONF <<EOF
# juice-slurm wiring: written by test/testbed.sh wire
JobSubmitPlugins=lua
PrologSlurmctld=$JUICE_PREFIX/slurmctld-parts.sh
EpilogSlurmctld=$JUICE_PREFIX/slurmctld-parts.sh
EOF
	restart_slurm
	log "wired: SPANK plugin, job_submit.lua with juice_submit.lua, prolog and epilog (through slurmctld-parts.sh)"
}

cmd_unwire() {
	rm -f $PLUGSTACK_ENTRY
	echo "# juice-slurm wiring: written by test/testbed.sh wire" >$WIRING_CONF
	restart_slurm
	log "unwired"
}

# slurmctld reads JobSubmitPlugins and the prolog settings at start; slurmd loads plugstack at each step, but a
# restart keeps both in one known state.
restart_slurm() {
	stop_slurmds
	stop slurmctld
	start_slurm
}

# services: juice-sim (pool "demo": one agent of 4 GPUs x 24 GiB; pool "test": 2 agents of 8 x 80 GiB) on
# 127.0.0.1:7070, and the controller on the hook address the wiring uses, with a database "juice".
cmd_services() {
	local demo=$TB/demo owner="postgres://$PG_OWNER@127.0.0.1:$PGPORT/juice?passfile=$PGPASS"
	local db="postgres://$PG_RUNTIME@127.0.0.1:$PGPORT/juice?passfile=$PGPASS"
	[ -x "$ART_BIN/juice-slurm" ] && [ -x "$ART_BIN/juice-sim" ] || die "$ART_BIN lacks juice-slurm or juice-sim: run make build"
	install -d -m 0755 "$demo"
	# The demo's database belongs to the owner role (one made by the first test bed belonged to "juice": it goes).
	case $(pg_super -c "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'juice'") in
	"$PG_OWNER") ;;
	"") pg_super -c "CREATE DATABASE juice OWNER $PG_OWNER" ;;
	*) pg_super -c "DROP DATABASE juice WITH (FORCE)" && pg_super -c "CREATE DATABASE juice OWNER $PG_OWNER" ;;
	esac
	# The schema, applied as the owner; the controller runs as the runtime role and never migrates.
	"$ART_BIN/juice-slurm" migrate --database-url "$owner" --runtime-role $PG_RUNTIME >&2
	[ -s "$demo/juice.token" ] || (umask 077 && echo "m2m_demo_$(openssl rand -hex 12)" >"$demo/juice.token")
	# JUICE_TESTBED_SIM_TIMING=instant schedules on every request with no delays (benchmarks); the default is
	# close to the legacy controller's one-second tick.
	local timing='"tick": "500ms", "activateDelay": "1s", "cancelDelay": "500ms"'
	[ "${JUICE_TESTBED_SIM_TIMING:-}" = instant ] && timing='"tick": "0s", "activateDelay": "0s", "cancelDelay": "0s"'
	cat >"$demo/sim.json" <<EOF
{$timing,
 "pools": [{"id": "demo", "agents": [{"gpus": 4, "vram": "24GiB", "gpuName": "NVIDIA L4", "hostname": "gpu-host-1"}]},
           {"id": "test", "agents": [{"count": 2, "gpus": 8, "vram": "80GiB"}]}]}
EOF
	if ! alive "$RUN/juice-sim.pid"; then
		log "starting juice-sim on 127.0.0.1:7070"
		setsid "$ART_BIN/juice-sim" --listen 127.0.0.1:7070 --token-file "$demo/juice.token" --config "$demo/sim.json" \
			</dev/null >>"$LOG/juice-sim.log" 2>&1 &
		echo $! >"$RUN/juice-sim.pid"
	fi
	wait_for juice-sim 20 curl -fsS http://127.0.0.1:7070/healthz
	local hook=127.0.0.1:${JUICE_TESTBED_HOOK_PORT:-7171}
	# JUICE_TESTBED_CONTROLLER_ARGS: more flags for the controller, split on spaces (benchmarks: no look-ahead).
	if ! alive "$RUN/juice-controller.pid"; then
		log "starting the juice-slurm controller (hook API on $hook)"
		setsid "$ART_BIN/juice-slurm" controller --cluster $CLUSTER --database-url "$db" \
			--slurmrestd-url "http://127.0.0.1:$REST_PORT" --slurm-user $SLURM_USER --slurm-token-file "$TB/slurm-token" \
			--juice-url http://127.0.0.1:7070 --juice-token-file "$demo/juice.token" --cluster-key $JUICE_ETC/cluster.key \
			--hook-secret $JUICE_ETC/hook.secret --hook-listen "$hook" --poll-interval "${JUICE_TESTBED_POLL:-1s}" \
			--licenses="${JUICE_TESTBED_LICENSES_ON:-on}" --sacctmgr /usr/bin/sacctmgr \
			$(acct_caps_flag "${JUICE_TESTBED_LICENSES_ON:-on}") ${JUICE_TESTBED_CONTROLLER_ARGS:-} \
			--state-dir $JUICE_SESSIONS --hook-socket "$RUN/hook.sock" --hook-socket-users "$SLURM_USER" \
			</dev/null >>"$LOG/juice-controller.log" 2>&1 &
		echo $! >"$RUN/juice-controller.pid"
	fi
	# The readiness check proves the listener too: a squatter on the port has no key for the pinned certificate.
	wait_for "the controller" 60 curl -fsS --cacert $JUICE_ETC/hook.crt "https://$hook/readyz"
	grep -qxF "JUICE_TESTBED_DEMO_DB_URL=$db" "$TB/env" ||
		{ grep -v '^JUICE_TESTBED_DEMO_DB_URL=' "$TB/env" >"$TB/env.new"; echo "JUICE_TESTBED_DEMO_DB_URL=$db" >>"$TB/env.new"; mv "$TB/env.new" "$TB/env"; }
	log "services up: juice-sim 127.0.0.1:7070, controller $hook (logs in $LOG)"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
wire) cmd_wire ;;
services) cmd_services ;;
services-restart) stop juice-controller && stop juice-sim && cmd_services ;;
unwire) cmd_unwire ;;
*) echo "usage: $0 up|down|status|wire|unwire|services|services-restart" >&2; exit 2 ;;
esac
