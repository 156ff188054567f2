# Shared by test/replicas and test/slurmfailover (sourced): hosts of their own on this machine, each a network
# namespace with one veth on a bridge whose address is this host's side of the network.

# netns_bridge BRIDGE ADDRESS: the bridge, this host's side of it at ADDRESS/24.
netns_bridge() {
	ip link add "$1" type bridge
	ip addr add "$2/24" dev "$1"
	ip link set "$1" up
}

# netns_host NS BRIDGE ADDRESS: the namespace NS, its loopback up and its one veth (NS-n in it, NS-h on BRIDGE) at
# ADDRESS/24.
netns_host() {
	ip netns add "$1"
	ip link add "$1-h" type veth peer name "$1-n"
	ip link set "$1-n" netns "$1"
	ip link set "$1-h" master "$2" up
	ip -n "$1" link set lo up
	ip -n "$1" addr add "$3/24" dev "$1-n"
	ip -n "$1" link set "$1-n" up
}

# netns_down BRIDGE NS...: the namespaces (each takes its veth pair with it) and the bridge, if there.
netns_down() {
	local br=$1 ns
	shift
	for ns in "$@"; do ip netns del "$ns" 2>/dev/null || true; done
	ip link del "$br" 2>/dev/null || true
}
