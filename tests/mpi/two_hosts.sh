#!/bin/bash
# Runs a program as a job of two hosts on this machine: two network namespaces joined by a veth
# pair, one process in each, meeting over TCP as two hosts would (--mca btl tcp,self, a hostfile
# naming the two addresses). mpirun starts in the first namespace; Open MPI reaches the second
# "host" through a launch agent that enters its namespace instead of ssh.
# usage: two_hosts.sh MPIEXEC DEVICES PROGRAM [ARGS...]
set -euo pipefail
mpiexec=$1 devices=$2
shift 2

# Unique per run, and short enough for interface names (at most 15 characters).
id=$(printf '%x%04x' $$ $RANDOM)
ns=(axle_h0_$id axle_h1_$id)
veth=(axv0_$id axv1_$id)
net=10.231.$(($$ % 250)).
addr=(${net}1 ${net}2)
work=$(mktemp -d)

cleanup() {
  ip netns del "${ns[0]}" 2>/dev/null || true
  ip netns del "${ns[1]}" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

for i in 0 1; do ip netns add "${ns[$i]}"; done
ip link add "${veth[0]}" type veth peer name "${veth[1]}"
for i in 0 1; do
  ip link set "${veth[$i]}" netns "${ns[$i]}"
  ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev "${veth[$i]}"
  ip -n "${ns[$i]}" link set "${veth[$i]}" up
  ip -n "${ns[$i]}" link set lo up
done

# Open MPI calls the agent as: agent HOST COMMAND...; it runs COMMAND in HOST's namespace.
cat > "$work/agent" <<AGENT
#!/bin/bash
host=\$1; shift
case \$host in
  ${addr[0]}) exec ip netns exec ${ns[0]} /bin/sh -c "\$*" ;;
  ${addr[1]}) exec ip netns exec ${ns[1]} /bin/sh -c "\$*" ;;
  *) echo "two_hosts.sh: unknown host \$host" >&2; exit 1 ;;
esac
AGENT
chmod +x "$work/agent"
printf '%s slots=1\n%s slots=1\n' "${addr[0]}" "${addr[1]}" > "$work/hosts"

# Not exec: the namespaces go when this shell exits (the trap), whatever the job's end.
ip netns exec "${ns[0]}" "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none \
  -np 2 --hostfile "$work/hosts" \
  --mca plm_rsh_agent "$work/agent" \
  --mca btl tcp,self --mca btl_tcp_if_include "${net}0/24" --mca oob_tcp_if_include "${net}0/24" \
  -x CPU_NUM_DEVICES="$devices" -x AXLE_TEST_HOSTS=2 \
  "$@"
