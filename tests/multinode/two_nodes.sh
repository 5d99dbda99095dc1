# Two "nodes" on one machine for multi-node tests and benchmarks: two network namespaces
# joined by a veth pair, each with its own address and hostname, and an mpirun that launches
# into both (see two_node_test.sh for the picture). Source it after defining skip() and fail()
# (and ZT); it sets WORK (a temporary directory, removed on exit with the namespaces), NS_A,
# NS_B, VETH_A, VETH_B, and the command prefixes ON_A (run inside node a) and MULTI (mpirun of
# 4 ranks, 2 per node, over the veth pair).

SUBNET=10.213.0.0/24
ADDR_A=10.213.0.1
ADDR_B=10.213.0.2
NS_A=zt$$a
NS_B=zt$$b
VETH_A=zt$$va   # interface names must be <= 15 characters
VETH_B=zt$$vb

command -v mpirun >/dev/null || skip "mpirun not found"
command -v python3 >/dev/null || skip "python3 not found"
command -v ip >/dev/null || skip "'ip' (iproute2) not found"
command -v unshare >/dev/null || skip "'unshare' (util-linux) not found"
[[ $(id -u) -eq 0 ]] || skip "creating network namespaces needs root (CAP_NET_ADMIN); running as uid $(id -u)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/zt_multinode.XXXXXX")
cleanup() {
  local ns pids
  for ns in "$NS_A" "$NS_B"; do   # leftovers of a killed run (orted, ranks) in our namespaces
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null
  done
  ip netns del "$NS_A" 2>/dev/null   # deleting a namespace also deletes the veth end in it
  ip netns del "$NS_B" 2>/dev/null
  ip link del "$VETH_A" 2>/dev/null  # in case setup stopped before moving it
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if ! err=$(ip netns add "$NS_A" 2>&1); then
  skip "cannot create a network namespace ($err)"
fi
ip netns add "$NS_B" || skip "cannot create a second network namespace"
if ! err=$(ip link add "$VETH_A" type veth peer name "$VETH_B" 2>&1); then
  skip "cannot create a veth pair ($err)"
fi
set -e
ip link set "$VETH_A" netns "$NS_A"
ip link set "$VETH_B" netns "$NS_B"
ip -n "$NS_A" link set lo up
ip -n "$NS_B" link set lo up
ip -n "$NS_A" addr add "$ADDR_A/24" dev "$VETH_A"
ip -n "$NS_B" addr add "$ADDR_B/24" dev "$VETH_B"
ip -n "$NS_A" link set "$VETH_A" up
ip -n "$NS_B" link set "$VETH_B" up
set +e
ip netns exec "$NS_A" unshare --uts true 2>/dev/null || skip "cannot create a UTS namespace (unshare --uts)"

# The rsh agent: "agent.sh HOST CMD..." runs CMD inside the namespace of HOST (instead of ssh),
# with that node's hostname.
cat >"$WORK/agent.sh" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  $ADDR_A) ns=$NS_A ;;
  $ADDR_B) ns=$NS_B ;;
  *) echo "agent.sh: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname zt-node-\$ns && \$*"
EOF
chmod +x "$WORK/agent.sh"
printf '%s slots=2\n%s slots=2\n' "$ADDR_A" "$ADDR_B" >"$WORK/hostfile"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # reaches the remote orted too
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
ON_A=(ip netns exec "$NS_A" unshare --uts sh -c 'hostname "zt-node-$0" && exec "$@"' "$NS_A")
MULTI=(mpirun --allow-run-as-root --hostfile "$WORK/hostfile" -np 4 --bind-to none
       --mca plm_rsh_agent "$WORK/agent.sh" --mca plm_rsh_no_tree_spawn 1
       --mca btl tcp,self --mca btl_tcp_if_include "$SUBNET" --mca oob_tcp_if_include "$SUBNET")
