#!/usr/bin/env bash
# Rebalance benchmark: our consumer, the Java KafkaConsumer and librdkafka as members of a
# consumer group that changes while a producer writes (benches/rebalance.py; method in
# benches/README.md). Run through scripts/bench.sh:
#
#   bash scripts/bench.sh --rebalance           full: 7 contenders x 5 interleaved runs
#                                               (ours eager/cooperative-sticky/consumer,
#                                               Java and librdkafka cooperative-sticky/consumer),
#                                               32 partitions; results in benches/results/
#                                               (rebalance.md, rebalance.json,
#                                               rebalance-<contender>.svg); about 16 minutes
#   bash scripts/bench.sh --rebalance --smoke   ours only (cooperative-sticky and consumer),
#                                               one run each, 8 partitions; results in
#                                               target/bench-smoke/; exits non-zero if a run
#                                               failed; about a minute
#
# Environment:
#   BENCH_RUNS         runs per contender (default 5; smoke: 1)
#   BENCH_CONTENDERS   comma-separated subset of ours-eager,ours-cooperative,ours-consumer,
#                      java-cooperative,java-consumer,rdkafka-cooperative,rdkafka-consumer
#   BENCH_NOTE         a note for the report (e.g. on the machine's load)
#   BENCH_OUT          where the results go instead
#   REBALANCE_RATE     records/s the producer writes (default 640; smoke 200)
#   REBALANCE_PARTITIONS  partitions of each run's topic (default 32; smoke 8)
#   KAFKA_RUN_DIR, KAFKA_PORT, KAFKA_CONTROLLER_PORT, KAFKA_SECURITY
#                      the broker (scripts/broker.sh), by default one of its own:
#                      target/kafka/rebal, port 29600 (controller 29601), plaintext only,
#                      fresh storage; left running at the end only if it was running before
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SMOKE=0
case "${1:-}" in
  "") ;;
  --smoke) SMOKE=1 ;;
  *) echo "usage: scripts/bench.sh --rebalance [--smoke]" >&2; exit 2 ;;
esac

for tool in cargo java javac python3; do
  command -v "$tool" >/dev/null || { echo "bench-rebalance.sh: '$tool' is required but not installed" >&2; exit 1; }
done

RUN_DIR="${KAFKA_RUN_DIR:-target/kafka/rebal}"
PORT="${KAFKA_PORT:-29600}"
CPORT="${KAFKA_CONTROLLER_PORT:-29601}"
SECURITY="${KAFKA_SECURITY:-0}"
rebal_broker() {
  KAFKA_RUN_DIR="$RUN_DIR" KAFKA_PORT="$PORT" KAFKA_CONTROLLER_PORT="$CPORT" \
    KAFKA_SECURITY="$SECURITY" scripts/broker.sh "$@"
}

if (( SMOKE )); then
  OUT=target/bench-smoke
  RUNS="${BENCH_RUNS:-1}"
  CONTENDERS="${BENCH_CONTENDERS:-ours-cooperative,ours-consumer}"
  EXTRA=(--smoke --partitions "${REBALANCE_PARTITIONS:-8}" --rate "${REBALANCE_RATE:-200}" --settle 2)
else
  OUT=benches/results
  RUNS="${BENCH_RUNS:-5}"
  CONTENDERS="${BENCH_CONTENDERS:-ours-eager,ours-cooperative,ours-consumer,java-cooperative,java-consumer,rdkafka-cooperative,rdkafka-consumer}"
  EXTRA=(--partitions "${REBALANCE_PARTITIONS:-32}" --rate "${REBALANCE_RATE:-640}")
fi
OUT="${BENCH_OUT:-$OUT}"
if [[ -n "${BENCH_NOTE:-}" ]]; then EXTRA+=(--note "$BENCH_NOTE"); fi
mkdir -p target

echo "bench-rebalance.sh: building examples/group_member (release)" >&2
cargo build --release --quiet --example group_member
if [[ ",$CONTENDERS," == *,rdkafka-* ]]; then
  log=target/bench-rdkafka-build.log
  echo "bench-rebalance.sh: building benches/rdkafka (librdkafka from source; minutes the first time)" >&2
  if ! cargo build --release --quiet --manifest-path benches/rdkafka/Cargo.toml >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "bench-rebalance.sh: WARNING: benches/rdkafka does not build (log: $log); running without librdkafka" >&2
    CONTENDERS="$(tr ',' '\n' <<<"$CONTENDERS" | grep -v '^rdkafka' | paste -sd, -)"
    EXTRA+=(--note "librdkafka contenders left out: benches/rdkafka failed to build")
  fi
fi

LIBS="$(scripts/broker.sh libs | tail -n1)"
CLASSES=target/rebalance-java
mkdir -p "$CLASSES"
echo "bench-rebalance.sh: compiling scripts/java/{GroupMember,SeqProducer,TestAdmin}.java" >&2
javac -nowarn -d "$CLASSES" -cp "$LIBS/*" scripts/java/GroupMember.java scripts/java/SeqProducer.java \
  scripts/java/TestAdmin.java

was_running=0
if rebal_broker status >/dev/null 2>&1; then was_running=1; fi
BOOTSTRAP="$(rebal_broker start | tail -n1)"
if (( ! was_running )); then
  trap 'rebal_broker stop >/dev/null 2>&1 || true' EXIT
fi
RUN_DIR_ABS="$RUN_DIR"
[[ "$RUN_DIR_ABS" == /* ]] || RUN_DIR_ABS="$PWD/$RUN_DIR_ABS"
KAFKA_VERSION_USED="$(sed -n 's/^version=//p' "$RUN_DIR_ABS/broker.info")"
echo "bench-rebalance.sh: broker (Kafka $KAFKA_VERSION_USED) at $BOOTSTRAP; contenders $CONTENDERS; $RUNS run(s) each" >&2

python3 benches/rebalance.py --bootstrap "$BOOTSTRAP" --libs "$LIBS" --java-classes "$CLASSES" \
  --out "$OUT" --logdir "target/bench-logs/rebalance$( (( SMOKE )) && echo -smoke)" --runs "$RUNS" \
  --contenders "$CONTENDERS" --kafka-version "$KAFKA_VERSION_USED" "${EXTRA[@]}"
