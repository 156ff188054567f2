# shellcheck shell=bash
# host_apt ARGS...: apt-get on the host, one at a time. The test beds install what they need from Debian's packages,
# and `make test` sets up the 24.11 and 26.05 chroots side by side: two apt-get runs at once stop on dpkg's and the
# package lists' locks ("Could not get lock /var/lib/apt/lists/lock"). Every host apt-get of the project goes through
# here: a lock of ours serialises them (15 minutes at most), and apt's own lock timeout covers an apt-get that is
# not ours (unattended-upgrades, an administrator's). Safe to run twice: apt-get install of what is there is a no-op.
host_apt() {
	local lockdir=${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}
	mkdir -p "$lockdir"
	DEBIAN_FRONTEND=noninteractive flock -w 900 "$lockdir/apt.lock" \
		apt-get -o DPkg::Lock::Timeout=600 -o Acquire::Retries=3 "$@"
}

# The Debian mirror the host's apt uses (never written into the repository).
host_mirror() {
	local m=""
	if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
		m=$(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' \
			/etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
	fi
	if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
		m=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|ftp):\/\// && $i ~ /\/debian\/?$/) { print $i; exit } }' \
			/etc/apt/sources.list | head -n1)
	fi
	[ -n "$m" ] || { echo "cannot find a Debian mirror in /etc/apt/sources.list*" >&2; return 1; }
	echo "${m%/}"
}
