#!/bin/sh
# Make the hook API's TLS certificate and key: DIR/hook.crt (0644) and DIR/hook.key (0600, owned by USER, the
# controller's user). The hooks pin hook.crt (--hook-ca): the hook secret goes to no listener that cannot prove
# it holds hook.key. Existing files are kept (remove both to make them anew, e.g. with other names).
#
# The hooks check that the certificate names the host of each URL in JUICE_HOOK_URL (juice-config.sh), so it
# must name every controller replica as the hooks reach it. 127.0.0.1, ::1, localhost and this host's name
# (hostname) are always in; the names and addresses of the other controller hosts go in JUICE_HOOK_SANS, e.g.
# for two replicas: JUICE_HOOK_SANS="DNS:ctl1.example.org,DNS:ctl2.example.org,IP:10.0.0.5,IP:10.0.0.6". Every
# replica then serves the same hook.crt and hook.key (copy both, keeping owner and modes).
#
#   [JUICE_HOOK_SANS=...] deploy/make-hook-cert.sh [DIR [USER]]       default /etc/juice-slurm and slurm
set -eu
dir=${1:-/etc/juice-slurm}
user=${2:-${SLURM_USER:-slurm}}
[ -s "$dir/hook.crt" ] && [ -s "$dir/hook.key" ] && exit 0
sans="IP:127.0.0.1,IP:::1,DNS:localhost,DNS:$(hostname)"
[ -n "${JUICE_HOOK_SANS:-}" ] && sans="$sans,$JUICE_HOOK_SANS"
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj "/CN=juice-slurm hook API" \
	-addext "subjectAltName=$sans" -addext "basicConstraints=critical,CA:FALSE" \
	-addext "extendedKeyUsage=serverAuth" -keyout "$dir/.hook.key.new" -out "$dir/.hook.crt.new" 2>/dev/null
chown "$user:$user" "$dir/.hook.key.new" && chmod 0600 "$dir/.hook.key.new"
chmod 0644 "$dir/.hook.crt.new"
mv "$dir/.hook.key.new" "$dir/hook.key"
mv "$dir/.hook.crt.new" "$dir/hook.crt"
echo "made $dir/hook.crt and $dir/hook.key for $sans"
