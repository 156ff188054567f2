#!/bin/sh
# slurmctld-parts.sh: run several PrologSlurmctld or EpilogSlurmctld scripts from one slurm.conf line, so a site
# keeps its own beside juice-slurm's. Slurm 22.05 takes one PrologSlurmctld and one EpilogSlurmctld; name this
# script for both:
#
#   PrologSlurmctld=/usr/local/lib/juice-slurm/slurmctld-parts.sh
#   EpilogSlurmctld=/usr/local/lib/juice-slurm/slurmctld-parts.sh
#
# and put the scripts (or symbolic links to them) into /etc/slurm/prolog_slurmctld.d/ and
# /etc/slurm/epilog_slurmctld.d/ (the directory is chosen by SLURM_SCRIPT_CONTEXT, which slurmctld sets):
#
#   /etc/slurm/prolog_slurmctld.d/10-site  -> the site's own prolog
#   /etc/slurm/prolog_slurmctld.d/50-juice -> /usr/local/lib/juice-slurm/juice-prolog.sh
#
# Parts run one after another in the C locale's order of their names, with slurmctld's environment unchanged;
# names other than letters, digits, '-' and '_' (editor backups, package leftovers) and files that are not
# executable are skipped, as run-parts does.
#   prolog: the first part that fails ends the prolog with its status (so a site that refuses a job stops it
#           before juice-slurm waits for a session, and a failed Juice wait fails the job as it would alone);
#   epilog: every part runs whatever the others did (each releases what it holds); the status is the first
#           failure's.
# PrologEpilogTimeout bounds all the parts together.
case ${SLURM_SCRIPT_CONTEXT:-} in
prolog_slurmctld | epilog_slurmctld) ;;
*)
	echo "slurmctld-parts: SLURM_SCRIPT_CONTEXT '${SLURM_SCRIPT_CONTEXT:-}' is neither prolog_slurmctld nor epilog_slurmctld" >&2
	exit 1
	;;
esac
dir=${SLURMCTLD_PARTS_DIR:-/etc/slurm}/$SLURM_SCRIPT_CONTEXT.d
status=0
LC_ALL=C
export LC_ALL
for part in "$dir"/*; do
	name=${part##*/}
	case $name in
	*[!A-Za-z0-9_-]* | '') continue ;;
	esac
	[ -f "$part" ] && [ -x "$part" ] || continue
	"$part"
	rc=$?
	if [ $rc -ne 0 ]; then
		echo "slurmctld-parts: $SLURM_SCRIPT_CONTEXT part $name exited $rc (job ${SLURM_JOB_ID:-?})" >&2
		[ "$SLURM_SCRIPT_CONTEXT" = prolog_slurmctld ] && exit $rc
		[ $status -eq 0 ] && status=$rc
	fi
done
exit $status
