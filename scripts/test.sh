#!/usr/bin/env bash
# Runs every test on a fresh machine: assembles and starts the local Kafka broker
# (scripts/broker.sh; needs Java 17 and Maven reaching Maven Central) and the 3-node
# cluster of the failover tests (scripts/cluster.sh), then the unit, integration and doc
# tests against them, then the benchmark smoke tests (scripts/bench.sh --smoke and
# --rebalance --smoke, each on a broker of its own). Stops the test broker and the cluster
# afterwards if it started them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for tool in cargo java javac mvn python3; do
  command -v "$tool" >/dev/null || { echo "test.sh: '$tool' is required but not installed" >&2; exit 1; }
done

# Stops, at exit, what this script started (and only that).
started_broker=0
started_cluster=0
cleanup() {
  if [[ "$started_cluster" == 1 ]]; then scripts/cluster.sh stop >/dev/null 2>&1 || true; fi
  if [[ "$started_broker" == 1 ]]; then scripts/broker.sh stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

if [[ -z "${KAFKA_BOOTSTRAP:-}" ]]; then
  if ! scripts/broker.sh status >/dev/null 2>&1; then
    started_broker=1
  fi
  KAFKA_BOOTSTRAP="$(scripts/broker.sh start | tail -n1)"
  export KAFKA_BOOTSTRAP
fi
echo "test.sh: broker at $KAFKA_BOOTSTRAP"

# The 3-node cluster of the failover tests (tests/cluster.rs; scripts/cluster.sh).
if [[ -z "${KAFKA_CLUSTER_BOOTSTRAP:-}" ]]; then
  # (Exit status 3: not all three nodes run. Only if none runs is the cluster ours to stop.)
  cluster_status="$(scripts/cluster.sh status 2>/dev/null || true)"
  if ! grep -q " running " <<<"$cluster_status"; then
    started_cluster=1
  fi
  KAFKA_CLUSTER_BOOTSTRAP="$(scripts/cluster.sh start | tail -n1)"
  export KAFKA_CLUSTER_BOOTSTRAP
fi
echo "test.sh: cluster at $KAFKA_CLUSTER_BOOTSTRAP"

# The group tests run our consumer in processes of their own (examples/group_member.rs).
cargo build --release --examples
cargo test --release --all-targets --no-run
# The tests on the 3-node cluster (they take it one at a time) run beside the rest, which
# use the single broker: they share only the cores and mostly wait on the brokers, and
# this halves their share of the wall time. Their output is shown when they end.
cluster_tests=(chaos cluster cluster_conn cluster_truncation)
cluster_log="target/test-cluster.log"
other_tests=()
for f in tests/*.rs; do
  t="$(basename "$f" .rs)"
  [[ " ${cluster_tests[*]} " == *" $t "* ]] || other_tests+=(--test "$t")
done
cargo test --release $(printf -- '--test %s ' "${cluster_tests[@]}") >"$cluster_log" 2>&1 &
cluster_pid=$!
show_cluster_tests() {
  echo "test.sh: ---- the cluster tests (${cluster_tests[*]}) ----"
  cat "$cluster_log"
}
if ! cargo test --release --lib --bins --examples --benches "${other_tests[@]}"; then
  wait "$cluster_pid" || true
  show_cluster_tests
  exit 1
fi
if ! wait "$cluster_pid"; then
  show_cluster_tests
  echo "test.sh: the cluster tests failed (above)" >&2
  exit 1
fi
show_cluster_tests
cargo test --release --doc
# The optional codec builds: libzstd instead of our zstd decoder (whose tests then also
# check it against libzstd's frames, and the fuzzing replay runs the zstd_diff corpus and
# regressions: ours against libzstd), ruzstd instead, and no codecs at all.
cargo test --release --features zstd-native --lib -- protocol::records protocol::zstd fuzzing
cargo test --release --features zstd-ruzstd --lib protocol::records
cargo build --release --no-default-features --lib
# The tests build with TLS (graviola) and SCRAM (the dev-dependency on this crate turns them
# on); the default build without them refuses SSL and SCRAM with a clear error, and the
# other TLS provider (ring) builds.
cargo test --release --no-default-features --lib config::
cargo build --release --no-default-features --features tls-ring,scram --lib

# Benchmark smoke test: tiny datasets on a second broker (port 29092, target/kafka/bench),
# ours (by assign and by subscribe with either protocol) and the Java consumer once each;
# fails if any does not read everything.
bash scripts/bench.sh --smoke

# Rebalance smoke test: our members (cooperative-sticky and group.protocol=consumer) through
# a join, a close and a kill, on a broker of its own (port 29600, target/kafka/rebal); fails
# if a partition ends unowned or owned twice or a record is never delivered.
bash scripts/bench.sh --rebalance --smoke

# Scale benchmark smoke test (about a minute): one 200-partition topic on a broker of its
# own (port 29710, target/kafka/scale-smoke), ours by assign and both subscribes once, and a
# 10-member group of each protocol; fails if a run does not catch up or converge.
bash scripts/bench.sh --scale --smoke
