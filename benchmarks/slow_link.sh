# Sourced by benchmarks that run over the emulated slow link (ENVIRONMENT.md): with LINK=1gbit,
# creates the network namespace NETNS whose loopback is shaped to 1 Gbit/s (TBF, both directions
# sharing it) and sets in_net to the command prefix that runs inside it; otherwise in_net is
# empty. The caller's EXIT trap deletes the namespace.
in_net=()
if [ "$LINK" = 1gbit ]; then
  ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  ip netns exec "$NETNS" tc qdisc add dev lo root tbf rate 1gbit burst 1mb latency 50ms
  in_net=(ip netns exec "$NETNS")
fi
