#!/bin/sh
# Make the secrets juice-slurm needs, with the right owners and modes. Run as root on the slurmctld host, then
# copy cluster.key (only) to every compute node, root-owned, mode 0600.
#
#   cluster.key   seals session files (AES-256-GCM); read by the controller and, on compute nodes, by root
#   hook.secret   the prolog and epilog present it to the hook API
#   hook.crt, hook.key  the hook API's TLS certificate (the hooks pin it) and key (deploy/make-hook-cert.sh: a
#                 controller on another host, or two replicas, need their names in it: JUICE_HOOK_SANS)
#   juice.token   the Juice M2M token (juice login -t m2m_...): paste it in; never on compute nodes
#   slurm.token   a slurmrestd JWT for SlurmUser: scontrol token username=slurm lifespan=...; rotate it by
#                 rewriting the file (the controller re-reads it)
#
# DIR (default /etc/juice-slurm) stays root's (root:SlurmUser, 0750): SlurmUser reads the files, but only root
# replaces or adds one, so `juice-slurm key rotate` and `key retire` run as root (they keep each key's owner).
# Existing files are kept. Also made: the state directory (JUICE_STATE_DIR, default
# /var/spool/juice-slurm/sessions) and the hooks' log directory (JUICE_LOG_DIR, default /var/log/juice-slurm),
# SlurmUser's, 0700. A state directory that already is SlurmUser's with mode 0700 is left alone: on an NFS export
# with root_squash, root cannot chown it (make it on the NFS server instead).
#
#   SLURM_USER=slurm deploy/make-secrets.sh [DIR]
set -eu
dir=${1:-/etc/juice-slurm}
user=${SLURM_USER:-slurm}
state=${JUICE_STATE_DIR:-/var/spool/juice-slurm/sessions}
logdir=${JUICE_LOG_DIR:-/var/log/juice-slurm}
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
install -d -o "$user" -g "$user" -m 0700 "$logdir"
if [ "$(stat -c %U:%a "$state" 2>/dev/null)" != "$user:700" ] &&
	! install -d -o "$user" -g "$user" -m 0700 "$state"; then
	echo "cannot make $state owned by $user with mode 0700 (on NFS with root_squash root cannot): make it so on the NFS server" >&2
	exit 1
fi
echo "made $dir/cluster.key and $dir/hook.secret; put the M2M token into $dir/juice.token"
