# shellcheck shell=bash
# Accounting for the test beds (issue 23): slurmdbd on a MariaDB of the bed's own, holding one remote license per
# Juice pool, juice_<pool>@juice, which jobs ask for with -L and juice-slurm's controller keeps counted
# (sacctmgr modify resource). test/testbed.sh (the host's Slurm 22.05) and test/chroot/slurm-chroot.sh (24.11, 26.05)
# source this: what the configurations say is decided here, where each bed keeps its files and ports is its own.

ACCT_LICENSE_SERVER=juice
ACCT_DB=slurm_acct_db
ACCT_DB_USER=slurm
# The pools of juice-sim's configurations (testbed.sh services and the chroots' services: demo, test; the e2e
# suite: test, small, lab) and their licenses' starting counts: the pools' GPUs in the services' configuration
# (small and lab: the e2e suite's). The controller keeps each count true from then on: a bed's up never changes the
# count of a license that exists.
declare -A ACCT_POOL_LICENSES=([demo]=4 [test]=16 [small]=1 [lab]=2)

# acct_licenses: the pools' remote licenses, one a line: NAME@SERVER STARTING_COUNT, sorted.
acct_licenses() {
	local pool
	for pool in "${!ACCT_POOL_LICENSES[@]}"; do
		echo "juice_$pool@$ACCT_LICENSE_SERVER ${ACCT_POOL_LICENSES[$pool]}"
	done | sort
}

# acct_license_names: the licenses' NAME@SERVER, comma-separated (the env files' JUICE_TESTBED_LICENSES).
acct_license_names() { acct_licenses | cut -d' ' -f1 | paste -sd, -; }

# The accounts the suites charge jobs to (--account=...; root is every cluster's own), each user who submits jobs
# has an association in every one (AccountingStorageEnforce=limits refuses a job without one), root the default:
# root (the suites), SlurmUser (slurmrestd's token: the benchmarks' submissions), nobody (the security suite), and
# in the chroots their ordinary users.
ACCT_ACCOUNTS="root physics ml chem"

# The QOS on which the controllers keep the pools' per-user caps (their caps-qos): the default QOS of every
# association, so every job's.
ACCT_CAPS_QOS=normal

# acct_caps_flag LICENSES_ON: the controller's --caps-qos when its licenses are on ("on"): the caps are limits on them.
acct_caps_flag() {
	[ "$1" != on ] || echo "--caps-qos=$ACCT_CAPS_QOS"
}

# acct_slurm_conf DBD_PORT: slurm.conf's accounting lines. AccountingStorageTRES names the licenses so sacct shows
# their use per job, and so that QOS limits may name them; AccountingStorageEnforce=limits makes slurmctld enforce
# those limits (the controller's caps-qos: each pool's max_gpus_per_user on QOS normal).
acct_slurm_conf() {
	cat <<EOF
# Accounting through the test bed's slurmdbd: sacct knows jobs past MinJobAge, and the Juice pools' remote licenses
# (juice_<pool>@$ACCT_LICENSE_SERVER, served by slurmdbd) are counted as TRES. Limits on them (QOS normal's
# MaxTRESPerUser, kept by the controller from the policy's max_gpus_per_user) are enforced: every user who submits
# has an association.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$1
AccountingStorageTRES=$(acct_licenses | cut -d' ' -f1 | sed 's#^#license/#' | paste -sd, -)
AccountingStorageEnforce=limits
EOF
}

# acct_mariadb_cnf DATADIR RUNDIR PORT LOGFILE: MariaDB's only option file (mariadbd --defaults-file): loopback, a
# port of the bed's own (beside any MariaDB of the machine's on 3306), socket and pid file in RUNDIR. The [client]
# group makes `mariadb --defaults-file=...` MariaDB's root through the socket (unix_socket: only the OS user root).
acct_mariadb_cnf() {
	cat <<EOF
# Written by juice-slurm's test beds: MariaDB for the bed's slurmdbd only.
[mysqld]
user = mysql
datadir = $1
socket = $2/mysqld.sock
pid-file = $2/mysqld.pid
port = $3
bind-address = 127.0.0.1
skip-name-resolve
log-error = $4
# What slurmdbd asks of its database. It asks for a larger innodb_buffer_pool_size too (it logs "Database settings
# not recommended values: innodb_buffer_pool_size" even at 256M): MariaDB's 128M is plenty for a test bed.
innodb_log_file_size = 64M
innodb_lock_wait_timeout = 900

[client]
socket = $2/mysqld.sock
user = root
EOF
}

# acct_db_sql PASSWORD: slurmdbd's database and user (over TCP from 127.0.0.1, skip-name-resolve), for the mariadb
# client's stdin (never its argv: the password).
acct_db_sql() {
	cat <<EOF
CREATE DATABASE IF NOT EXISTS $ACCT_DB;
CREATE USER IF NOT EXISTS '$ACCT_DB_USER'@'127.0.0.1';
ALTER USER '$ACCT_DB_USER'@'127.0.0.1' IDENTIFIED BY '$1';
GRANT ALL ON $ACCT_DB.* TO '$ACCT_DB_USER'@'127.0.0.1';
EOF
}

# acct_slurmdbd_conf DBD_PORT SLURM_USER PIDFILE LOGFILE MARIADB_PORT PASSWORD: slurmdbd.conf, which must be owned by
# SlurmUser and not readable by others (slurmdbd refuses it otherwise). slurmdbd's default port, 6819, is a slurmd's
# in the host's bed: each bed names its own.
acct_slurmdbd_conf() {
	cat <<EOF
# Written by juice-slurm's test beds: slurmdbd on the bed's MariaDB.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$1
SlurmUser=$2
PidFile=$3
LogFile=$4
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$5
StorageUser=$ACCT_DB_USER
StoragePass=$6
StorageLoc=$ACCT_DB
EOF
}

# acct_ensure CLUSTER STATEDIR USERS RUNNER...: the cluster in slurmdbd, the accounts of ACCT_ACCOUNTS with an
# association for each of USERS (space-separated: those who submit jobs on the bed) in each, and each pool's license
# given to the cluster with its starting count, through sacctmgr run by RUNNER (nothing on the host; the chroot's
# runner in a chroot). What exists is left as it is. slurmctld must find its cluster there when it starts: run this
# before it. STATEDIR is slurmctld's StateSaveLocation as this script sees it.
acct_ensure() {
	local cluster=$1 statedir=$2 users=$3 assocs have lic count name acct user missing
	shift 3
	# Every cluster has an association of its own (account root, no user): one call tells the clusters, the
	# accounts and the users' associations.
	assocs=$("$@" sacctmgr -nP show assoc format=cluster,account,user)
	if ! grep -q "^$cluster|" <<<"$assocs"; then
		log "adding cluster $cluster to slurmdbd"
		"$@" sacctmgr -i add cluster "$cluster" </dev/null >/dev/null
		# Since 23.02 slurmctld keeps a cluster id in its state (the file clustername) and refuses to start when
		# slurmdbd gives the cluster another ("CLUSTER ID MISMATCH"): one a bed ran without accounting, or with a
		# slurmdbd whose database has gone, is forgotten so slurmctld takes slurmdbd's. (22.05 keeps the name only.)
		rm -f "$statedir/clustername"
		assocs=$("$@" sacctmgr -nP show assoc format=cluster,account,user)
	fi
	# With AccountingStorageEnforce=limits a job needs an association of its user in the account it asks for:
	# without one it is refused at submission. (Without enforcement slurmctld put a job of an account the user had
	# no association in into the user's default account, whatever --account said.)
	for acct in $ACCT_ACCOUNTS; do
		grep -q "^$cluster|$acct|$" <<<"$assocs" && continue
		log "adding account $acct to cluster $cluster"
		"$@" sacctmgr -i add account "$acct" cluster="$cluster" </dev/null >/dev/null
	done
	for user in $users; do
		missing=
		for acct in $ACCT_ACCOUNTS; do
			grep -qxF "$cluster|$acct|$user" <<<"$assocs" || missing+="${missing:+,}$acct"
		done
		[ -n "$missing" ] || continue
		log "adding associations of $user in cluster $cluster: accounts $missing"
		"$@" sacctmgr -i add user "$user" account="$missing" defaultaccount=root cluster="$cluster" </dev/null >/dev/null
	done
	have=$("$@" sacctmgr -nP show resource withclusters format=name,server,cluster)
	while read -r lic count; do
		name=${lic%@*}
		grep -qxF "$name|$ACCT_LICENSE_SERVER|$cluster" <<<"$have" && continue
		log "adding license $lic (starting count $count) for cluster $cluster"
		"$@" sacctmgr -i add resource name="$name" server=$ACCT_LICENSE_SERVER type=license count="$count" \
			cluster="$cluster" percentallowed=100 </dev/null >/dev/null
	done < <(acct_licenses)
}
