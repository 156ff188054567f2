#!/bin/sh
# Make the secrets juice-slurm needs, with the right owners and modes. Run as root on the slurmctld host, then
# copy cluster.key (only) to every compute node, root-owned, mode 0600.
#
#   cluster.key   seals session files (AES-256-GCM); read by the controller and, on compute nodes, by root
#   hook.secret   the prolog and epilog present it to the hook API
#   hook.crt, hook.key  the hook API's TLS certificate (the hooks pin it) and key (deploy/make-hook-cert.sh)
#   juice.token   the Juice M2M token (juice login -t m2m_...): paste it in; never on compute nodes
#   slurm.token   a slurmrestd JWT for SlurmUser: scontrol token username=slurm lifespan=...; rotate it by
#                 rewriting the file (the controller re-reads it)
set -eu
dir=${1:-/etc/juice-slurm}
user=${SLURM_USER:-slurm}
install -d -o root -g "$user" -m 0750 "$dir"
umask 077
[ -s "$dir/cluster.key" ] || openssl rand -hex 32 >"$dir/cluster.key"
[ -s "$dir/hook.secret" ] || openssl rand -hex 32 >"$dir/hook.secret"
[ -e "$dir/juice.token" ] || : >"$dir/juice.token"
for f in cluster.key hook.secret juice.token; do
	chown "$user:$user" "$dir/$f"
	chmod 0600 "$dir/$f"
done
sh "$(dirname "$0")/make-hook-cert.sh" "$dir" "$user"
install -d -o "$user" -g "$user" -m 0700 /var/spool/juice-slurm/sessions /var/log/juice-slurm
echo "made $dir/cluster.key and $dir/hook.secret; put the M2M token into $dir/juice.token"
