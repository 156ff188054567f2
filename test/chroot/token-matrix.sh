#!/usr/bin/env bash
# token-matrix.sh SUITE [API_VERSION] [REST_URL]
#
# Which slurmrestd tokens may do what the controller does, on a chroot test bed (after `slurm-chroot.sh up SUITE`):
# for each token user (SlurmUser, root, the owner of the job, another ordinary user, a would-be operator) it
#   - lists all jobs (GET jobs) and says whether a job of another user is in the listing;
#   - updates a fresh held job of the ordinary user $JUICE_TESTBED_JOB_USER: comment, begin_time (one hour ahead),
#     hold, release (hold:false), and reads each change back through scontrol.
# Prints one line per request: HTTP status, errors[].error_number, results[].error_code, and whether the change
# took. REST_URL (default: the env file's) lets it probe a slurmrestd started some other way; JUICE_PROBE_USERS
# (space-separated) limits the token users.
set -euo pipefail

SUITE=${1:?usage: token-matrix.sh trixie|sid [API_VERSION] [REST_URL]}
BASE=${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}
ENVFILE=$BASE/chroot-$SUITE/env
[ -s "$ENVFILE" ] || { echo "no $ENVFILE: run slurm-chroot.sh up $SUITE" >&2; exit 1; }
get() { sed -n "s/^$1=//p" "$ENVFILE"; }
case $SUITE in trixie) V=${2:-v0.0.42} ;; sid) V=${2:-v0.0.45} ;; *) exit 2 ;; esac
URL=${3:-$(get JUICE_TESTBED_SLURMRESTD_URL)}
EXEC=$(get JUICE_TESTBED_EXEC)
EXEC_AS=$(get JUICE_TESTBED_EXEC_AS)
OWNER=$(get JUICE_TESTBED_JOB_USER)
OTHER=$(get JUICE_TESTBED_OTHER_USER)
OPERATOR=juiceop
$EXEC getent passwd $OPERATOR >/dev/null || $EXEC useradd --create-home --shell /bin/sh $OPERATOR

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# req USER TOKEN METHOD PATH [BODY] -> "HTTP errors=[..] results=[..]" ; body in $tmp/body
req() {
	local u=$1 tok=$2 m=$3 p=$4 body=${5:-} code
	local args=(-s -o "$tmp/body" -w '%{http_code}' -X "$m" -H "X-SLURM-USER-NAME: $u" -H "X-SLURM-USER-TOKEN: $tok")
	[ -n "$body" ] && args+=(-H 'Content-Type: application/json' --data "$body")
	code=$(curl "${args[@]}" "$URL/slurm/$V/$p") || code=000
	local errs res
	errs=$(jq -c '[.errors[]? | "\(.error_number) \(.error)"]' "$tmp/body" 2>/dev/null || echo '"(not JSON)"')
	res=$(jq -c '[.results[]? | select(.error_code != 0) | "\(.error_code) \(.error)"]' "$tmp/body" 2>/dev/null || echo '[]')
	echo "HTTP $code errors=$errs results=$res"
}

field() { # JOB FIELD (scontrol show job, one line)
	$EXEC scontrol -o show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# A job of someone else for the listing test: root's, held.
root_job=$($EXEC sbatch --parsable --hold -o /dev/null --wrap 'sleep 1')

printf '# Slurm %s, API %s, %s\n' "$(get JUICE_TESTBED_SLURM_VERSION)" "$V" "$URL"
for u in ${JUICE_PROBE_USERS:-slurm root $OWNER $OTHER $OPERATOR}; do
	tok=$($EXEC scontrol token username="$u" lifespan=600 | sed -n 's/^SLURM_JWT=//p')
	case $u in slurm) who="SlurmUser" ;; root) who="root" ;; "$OWNER") who="owner" ;; "$OTHER") who="other user" ;; *) who="'operator' (no slurmdbd)" ;; esac
	echo "## token of $u ($who)"
	r=$(req "$u" "$tok" GET jobs)
	n=$(jq '.jobs | length' "$tmp/body" 2>/dev/null || echo -)
	seen=$(jq --argjson id "$root_job" '[.jobs[]? | select(.job_id == $id)] | length' "$tmp/body" 2>/dev/null || echo -)
	echo "list jobs:        $r; $n jobs, root's job $root_job listed: $seen"
	job=$($EXEC_AS "$OWNER" sbatch --parsable --hold -o /dev/null --wrap 'sleep 1')
	echo "  (job $job of $OWNER, held by its owner: reason $(field "$job" Reason))"
	c="probe-$u-$RANDOM"
	r=$(req "$u" "$tok" POST "job/$job" "{\"comment\":\"$c\"}")
	echo "update comment:   $r; took: $([ "$(field "$job" Comment)" = "$c" ] && echo yes || echo no)"
	t=$(($(date +%s) + 3600))
	before=$(field "$job" StartTime)
	r=$(req "$u" "$tok" POST "job/$job" "{\"begin_time\":{\"set\":true,\"infinite\":false,\"number\":$t}}")
	echo "update begin_time: $r; StartTime $before -> $(field "$job" StartTime)"
	r=$(req "$u" "$tok" POST "job/$job" '{"hold":true}')
	echo "hold:             $r; reason now $(field "$job" Reason), priority $(field "$job" Priority)"
	r=$(req "$u" "$tok" POST "job/$job" '{"hold":false}')
	echo "release:          $r; reason now $(field "$job" Reason), priority $(field "$job" Priority)"
	# A job held by an admin (root's scontrol hold), released by this token.
	$EXEC scontrol hold "$job" >/dev/null 2>&1 || true
	r=$(req "$u" "$tok" POST "job/$job" '{"hold":false}')
	echo "release admin hold: $r; reason now $(field "$job" Reason), priority $(field "$job" Priority)"
	$EXEC scancel "$job"
done
$EXEC scancel "$root_job"
