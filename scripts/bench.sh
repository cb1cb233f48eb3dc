#!/usr/bin/env bash
# Consumer throughput benchmark: our crate vs the Java client vs librdkafka, each reading
# the same datasets in full from one local broker. See benches/README.md.
#
# Usage:
#   bash scripts/bench.sh            full run: 6 datasets x 7 contenders x 3 runs; results
#                                    in benches/results/ (README.md, throughput.svg, runs.json)
#   bash scripts/bench.sh --smoke    tiny datasets, ours and java once each, no rdkafka
#                                    build; results in target/bench-smoke/; exits non-zero if
#                                    any contender did not read its dataset in full
#
# Environment:
#   BENCH_RUNS         runs per contender and dataset (default 3; smoke: 1)
#   BENCH_CONTENDERS   comma-separated subset of ours,ours-nocrc,ours-zstd-native,java,rdkafka,
#                      rdkafka-nocrc,rdkafka-tuned
#
# The benchmark broker is separate from the test broker: KAFKA_RUN_DIR=target/kafka/bench,
# port 29092 (controller 29093), KAFKA_KEEP_DATA=1 so the datasets, produced once, survive
# restarts. It is left running at the end only if it was already running before.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SMOKE=0
case "${1:-}" in
  "") ;;
  --smoke) SMOKE=1 ;;
  *) echo "usage: $0 [--smoke]" >&2; exit 2 ;;
esac

for tool in cargo java python3; do
  command -v "$tool" >/dev/null || { echo "bench.sh: '$tool' is required but not installed" >&2; exit 1; }
done

BENCH_RUN_DIR=target/kafka/bench
bench_broker() {
  KAFKA_RUN_DIR="$BENCH_RUN_DIR" KAFKA_KEEP_DATA=1 KAFKA_PORT=29092 KAFKA_CONTROLLER_PORT=29093 \
    scripts/broker.sh "$@"
}

if (( SMOKE )); then
  OUT=target/bench-smoke
  RUNS="${BENCH_RUNS:-1}"
  CONTENDERS="${BENCH_CONTENDERS:-ours,java}"
else
  OUT=benches/results
  RUNS="${BENCH_RUNS:-3}"
  CONTENDERS="${BENCH_CONTENDERS:-ours,ours-nocrc,ours-zstd-native,java,rdkafka,rdkafka-nocrc,rdkafka-tuned}"
fi
EXTRA=()
(( SMOKE )) && EXTRA+=(--smoke)
mkdir -p target

echo "bench.sh: building examples/perf_consume (release)" >&2
cargo build --release --quiet --example perf_consume
if [[ ",$CONTENDERS," == *,ours-zstd-native,* ]]; then
  echo "bench.sh: building examples/perf_consume with --features zstd-native (libzstd)" >&2
  cargo build --release --quiet --example perf_consume --features zstd-native --target-dir target/zstd-native
fi

if [[ ",$CONTENDERS," == *,rdkafka* ]]; then
  echo "bench.sh: building benches/rdkafka (librdkafka from source; minutes the first time)" >&2
  if ! cargo build --release --quiet --manifest-path benches/rdkafka/Cargo.toml \
      >target/bench-rdkafka-build.log 2>&1; then
    tail -n 40 target/bench-rdkafka-build.log >&2
    echo "bench.sh: WARNING: the rdkafka contender does not build (log: target/bench-rdkafka-build.log); running without it" >&2
    CONTENDERS="$(tr ',' '\n' <<<"$CONTENDERS" | grep -v '^rdkafka' | paste -sd, -)"
    EXTRA+=(--note "rdkafka contender left out: benches/rdkafka failed to build")
  fi
fi

LIBS="$(scripts/broker.sh libs | tail -n1)"

was_running=0
if bench_broker status >/dev/null 2>&1; then was_running=1; fi
BOOTSTRAP="$(bench_broker start | tail -n1)"
if (( ! was_running )); then
  trap 'bench_broker stop >/dev/null 2>&1 || true' EXIT
fi
KAFKA_VERSION_USED="$(sed -n 's/^version=//p' "$BENCH_RUN_DIR/broker.info")"
echo "bench.sh: benchmark broker (Kafka $KAFKA_VERSION_USED) at $BOOTSTRAP; contenders $CONTENDERS; $RUNS run(s) each" >&2

rc=0
stamp="$(mktemp)"
python3 benches/bench.py --bootstrap "$BOOTSTRAP" --libs "$LIBS" --run-dir "$BENCH_RUN_DIR" \
  --out "$OUT" --logdir "target/bench-logs/$(basename "$OUT")" --runs "$RUNS" \
  --contenders "$CONTENDERS" --kafka-version "$KAFKA_VERSION_USED" \
  --broker-jvm "${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g} -XX:+UseG1GC -XX:MaxGCPauseMillis=20" \
  "${EXTRA[@]}" || rc=$?

if [[ "$OUT/runs.json" -nt "$stamp" ]]; then
  python3 benches/report.py "$OUT"
fi
rm -f "$stamp"
if (( rc != 0 )); then
  echo "bench.sh: FAILED: a dataset could not be prepared or a contender did not read its dataset in full (see above)" >&2
fi
exit "$rc"
