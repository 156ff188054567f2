# Shared by test/replicas and test/upgrade (sourced): a controller replica on the test bed, as docs/admin.md
# section 7 sets one up on a host of its own. Needs the bed's env file sourced and SLURM_USER set.

# replica_settings ETC ADDRESS DBURL [SERVICES]: the settings file of a replica whose secrets are in ETC (its pgpass
# among them: DBURL's passfile is pointed there), serving the hook API at ADDRESS:7171 and its metrics at
# ADDRESS:8171. SERVICES is the address at which it reaches PostgreSQL, slurmrestd and the Juice Controller
# (default 127.0.0.1, the bed's own: a replica in a network namespace of its own reaches them elsewhere).
replica_settings() {
	local etc=$1 addr=$2 svc=${4:-127.0.0.1} db rest
	db=$(sed "s#passfile=[^&]*#passfile=$etc/pgpass#; s#@127\.0\.0\.1:#@$svc:#" <<<"$3")
	rest=${JUICE_TESTBED_SLURMRESTD_URL/127.0.0.1/$svc}
	cat <<SETTINGS
cluster = $JUICE_TESTBED_CLUSTER
database-url = $db
slurmrestd-url = $rest
slurm-token-file = $etc/slurm.token
slurm-user = $SLURM_USER
juice-url = http://$svc:7070
juice-token-file = $etc/juice.token
cluster-key = $etc/cluster.key
hook-secret = $etc/hook.secret
hook-cert = $etc/hook.crt
hook-key = $etc/hook.key
hook-listen = $addr:7171
metrics-listen = $addr:8171
state-dir = $JUICE_TESTBED_SESSIONS_DIR
poll-interval = 1s
lease-ttl = 5s
SETTINGS
}
