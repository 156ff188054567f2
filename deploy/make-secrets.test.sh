#!/bin/sh
# Checks deploy/make-secrets.sh's owners and modes and what they allow, as root, in a temporary directory:
# SlurmUser reads every secret; the cluster key is rotated and retired as root (SlurmUser cannot: the directory
# is root's), keeping SlurmUser as the keys' owner; the certificate names JUICE_HOOK_SANS.
#
#   sh deploy/make-secrets.test.sh BIN/juice-slurm [SLURM_USER]     (as root; SLURM_USER must exist, default slurm)
set -eu
bin=$1
user=${2:-slurm}
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "make-secrets.test.sh: run as root" >&2; exit 2; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
chmod 0755 "$t"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
as_user() { setpriv --reuid="$user" --regid="$user" --clear-groups -- "$@"; }
mode() { stat -c '%U:%G %a' "$1"; }

etc=$t/etc/juice-slurm
mkdir -p "$t/etc" "$t/spool"
install -d -o "$user" -g "$user" -m 0700 "$t/spool/sessions"
JUICE_STATE_DIR=$t/spool/sessions JUICE_LOG_DIR=$t/log JUICE_HOOK_SANS=DNS:ctl2.example.org,IP:10.0.0.6 \
	SLURM_USER=$user sh "$here/make-secrets.sh" "$etc" >/dev/null

[ "$(mode "$etc")" = "root:$user 750" ] && ok || bad "$etc is $(mode "$etc")"
for f in cluster.key hook.secret juice.token hook.key; do
	[ "$(mode "$etc/$f")" = "$user:$user 600" ] && ok || bad "$f is $(mode "$etc/$f")"
	as_user cat "$etc/$f" >/dev/null && ok || bad "$user cannot read $f"
done
[ "$(mode "$etc/hook.crt")" = "$user:$user 644" ] || [ "$(stat -c %a "$etc/hook.crt")" = 644 ] && ok || bad "hook.crt is $(mode "$etc/hook.crt")"
openssl x509 -in "$etc/hook.crt" -noout -ext subjectAltName | grep -q 'ctl2.example.org.*10.0.0.6' && ok ||
	bad "the certificate does not name JUICE_HOOK_SANS"
[ "$(mode "$t/log")" = "$user:$user 700" ] && ok || bad "the log directory is $(mode "$t/log")"

# The key rotation of docs/admin.md: as SlurmUser it cannot write the directory; as root it keeps the owner.
if as_user "$bin" key rotate --cluster-key "$etc/cluster.key" >/dev/null 2>&1; then
	bad "SlurmUser rotated the key: the directory is writable by it"
else ok; fi
"$bin" key rotate --cluster-key "$etc/cluster.key" >/dev/null && ok || bad "root cannot rotate the key"
for f in cluster.key cluster.key.previous; do
	[ "$(mode "$etc/$f")" = "$user:$user 600" ] && ok || bad "after rotate, $f is $(mode "$etc/$f")"
done
as_user "$bin" key show --cluster-key "$etc/cluster.key" | grep -q '^previous ' && ok || bad "$user cannot read both keys"
"$bin" key retire --cluster-key "$etc/cluster.key" >/dev/null && [ ! -e "$etc/cluster.key.previous" ] && ok ||
	bad "root cannot retire the previous key"

echo "make-secrets: $pass passed, $fail failed"
[ "$fail" = 0 ]
