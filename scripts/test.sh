#!/usr/bin/env bash
# Runs every test on a fresh machine: assembles and starts the local Kafka broker
# (scripts/broker.sh; needs Java 17 and Maven reaching Maven Central), then the unit,
# integration and doc tests against it, then the benchmark smoke test (scripts/bench.sh
# --smoke, on its own broker). Stops the test broker afterwards if it started it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for tool in cargo java javac mvn python3; do
  command -v "$tool" >/dev/null || { echo "test.sh: '$tool' is required but not installed" >&2; exit 1; }
done

started=0
if [[ -z "${KAFKA_BOOTSTRAP:-}" ]]; then
  if ! scripts/broker.sh status >/dev/null 2>&1; then
    started=1
  fi
  KAFKA_BOOTSTRAP="$(scripts/broker.sh start | tail -n1)"
  export KAFKA_BOOTSTRAP
fi
if [[ "$started" == 1 ]]; then
  trap 'scripts/broker.sh stop >/dev/null 2>&1 || true' EXIT
fi
echo "test.sh: broker at $KAFKA_BOOTSTRAP"

# The group tests run our consumer in processes of their own (examples/group_member.rs).
cargo build --release --examples
cargo test --release --all-targets
cargo test --release --doc
# The optional codec builds: libzstd instead of ruzstd, and no codecs at all.
cargo test --release --features zstd-native --lib protocol::records
cargo build --release --no-default-features --lib
# The tests build with TLS (graviola) and SCRAM (the dev-dependency on this crate turns them
# on); the default build without them refuses SSL and SCRAM with a clear error, and the
# other TLS provider (ring) builds.
cargo test --release --no-default-features --lib config::
cargo build --release --no-default-features --features tls-ring,scram --lib

# Benchmark smoke test: tiny datasets on a second broker (port 29092, target/kafka/bench),
# ours and the Java consumer once each; fails if either does not read everything.
bash scripts/bench.sh --smoke
