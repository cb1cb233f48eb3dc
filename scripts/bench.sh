#!/usr/bin/env bash
# Consumer throughput benchmark: our crate vs the Java client vs librdkafka, each reading
# the same datasets in full from one local broker. See benches/README.md.
#
# Usage:
#   bash scripts/bench.sh            full run: 6 datasets x 9 contenders x 3 runs; results
#                                    in benches/results/ (README.md, throughput.svg, runs.json)
#   bash scripts/bench.sh --smoke    tiny datasets, ours (by assign and by subscribe with
#                                    either protocol) and java once each, no rdkafka
#                                    build, plus ours over TLS (SSL listener) and PLAINTEXT
#                                    once each; results in target/bench-smoke/; exits non-zero
#                                    if any contender did not read its dataset in full
#   bash scripts/bench.sh --tls      TLS mode: 2 datasets (100 B none, 1 KiB lz4) x 5
#                                    contenders x {PLAINTEXT, SSL} x 3 runs; results in
#                                    benches/results/ (tls.json, TLS section of README.md)
#   bash scripts/bench.sh --rebalance [--smoke]
#                                    rebalances side by side (scripts/bench-rebalance.sh has
#                                    the details): results in benches/results/rebalance.*
#   bash scripts/bench.sh --scale    scale mode (benches/scale.py): one consumer on 1,000 /
#                                    5,000 / 10,000 partitions, ours and Java, and a 50-member
#                                    group; its own broker (port 29700); results in
#                                    benches/results/scale.md and scale.json. --scale --smoke:
#                                    200 partitions, ours only, once (about a minute; port
#                                    29710, results in target/bench-smoke/); SCALE_*
#                                    variables change the settings (benches/scale.py, ENV)
#   bash scripts/bench.sh --scale-rebalance [--smoke]
#                                    both of the above, one after the other (about 35 min):
#                                    every scale and rebalance table, the timelines, and the
#                                    README's scale and rebalance figures (the blocks between
#                                    its bench:scale and bench:rebalance markers, rewritten by
#                                    a full run into benches/results/); exits non-zero if
#                                    either failed (both run). --smoke: both smokes
#
# Environment:
#   BENCH_RUNS         runs per contender and dataset (default 3; smoke: 1)
#   BENCH_CONTENDERS   comma-separated subset of ours,ours-nocrc,ours-zstd-native,java,rdkafka,
#                      rdkafka-nocrc,rdkafka-tuned,ours-subscribe-classic,ours-subscribe-consumer; with --tls of ours-graviola,ours-ring,java,
#                      rdkafka,rdkafka-tuned (the default), rdkafka-nocrc, ours
#   BENCH_NOTE         a note for the report (e.g. on the machine's load)
#   BENCH_DATASETS     comma-separated subset of the mode's datasets (e.g.
#                      bench-1k-none,bench-1k-lz4); default all
#   BENCH_OUT          where the results go instead (e.g. a second TLS session kept apart
#                      from benches/results/)
#
# The benchmark broker is separate from the test broker: KAFKA_RUN_DIR=target/kafka/bench,
# port 29092 (controller 29093), KAFKA_KEEP_DATA=1 so the datasets, produced once, survive
# restarts. It is left running at the end only if it was already running before.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${1:-}" == --scale-rebalance ]]; then
  shift
  status=0
  python3 benches/scale.py "$@" || status=1
  bash scripts/bench-rebalance.sh "$@" || status=1
  exit "$status"
fi

if [[ "${1:-}" == --rebalance ]]; then
  shift
  exec bash scripts/bench-rebalance.sh "$@"
fi

# The scale mode is a driver of its own, with its own broker and builds.
if [[ "${1:-}" == --scale ]]; then
  shift
  exec python3 benches/scale.py "$@"
fi

SMOKE=0
TLS=0
case "${1:-}" in
  "") ;;
  --smoke) SMOKE=1 ;;
  --tls) TLS=1 ;;
  *) echo "usage: $0 [--smoke|--tls|--scale [--smoke]|--rebalance [--smoke]|--scale-rebalance [--smoke]]" >&2; exit 2 ;;
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
  CONTENDERS="${BENCH_CONTENDERS:-ours,java,ours-subscribe-classic,ours-subscribe-consumer}"
elif (( TLS )); then
  OUT=benches/results
  RUNS="${BENCH_RUNS:-3}"
  CONTENDERS="${BENCH_CONTENDERS:-ours-graviola,ours-ring,java,rdkafka,rdkafka-tuned}"
else
  OUT=benches/results
  RUNS="${BENCH_RUNS:-3}"
  CONTENDERS="${BENCH_CONTENDERS:-ours,ours-nocrc,ours-zstd-native,java,rdkafka,rdkafka-nocrc,rdkafka-tuned,ours-subscribe-classic,ours-subscribe-consumer}"
fi
OUT="${BENCH_OUT:-$OUT}"
EXTRA=()
(( SMOKE )) && EXTRA+=(--smoke)
(( TLS )) && EXTRA+=(--tls)
if [[ -n "${BENCH_NOTE:-}" ]]; then EXTRA+=(--note "$BENCH_NOTE"); fi
mkdir -p target

# The example build also speaks TLS (graviola): examples get the dev-dependencies, and the
# crate's dev-dependency on itself enables tls-graviola. It reads the warm-up in every mode.
echo "bench.sh: building examples/perf_consume (release)" >&2
cargo build --release --quiet --example perf_consume
if [[ ",$CONTENDERS," == *,ours-zstd-native,* ]]; then
  echo "bench.sh: building examples/perf_consume with --features zstd-native (libzstd)" >&2
  cargo build --release --quiet --example perf_consume --features zstd-native --target-dir target/zstd-native
fi
# ours-graviola, ours-ring: examples/perf_consume.rs with exactly one crypto provider, built
# by benches/ours-tls (an example build would get tls-graviola too, from the dev-dependency),
# with the root crate's dependency versions.
for provider in graviola ring; do
  if [[ ",$CONTENDERS," == *,ours-$provider,* ]]; then
    echo "bench.sh: building examples/perf_consume with --features tls-$provider only (benches/ours-tls)" >&2
    cp Cargo.lock benches/ours-tls/Cargo.lock
    cargo build --release --quiet --manifest-path benches/ours-tls/Cargo.toml \
      --features "tls-$provider" --target-dir "target/tls-$provider"
  fi
done

if [[ ",$CONTENDERS," == *,rdkafka* ]]; then
  # The TLS mode's librdkafka has OpenSSL (the bench crate's `ssl` feature, own target dir).
  RDK_BUILD=(--manifest-path benches/rdkafka/Cargo.toml)
  RDK_LOG=target/bench-rdkafka-build.log
  if (( TLS )); then
    RDK_BUILD+=(--features ssl --target-dir target/rdkafka-ssl)
    RDK_LOG=target/bench-rdkafka-ssl-build.log
  fi
  echo "bench.sh: building benches/rdkafka ${RDK_BUILD[*]:2} (librdkafka from source; minutes the first time)" >&2
  if ! cargo build --release --quiet "${RDK_BUILD[@]}" >"$RDK_LOG" 2>&1; then
    tail -n 40 "$RDK_LOG" >&2
    echo "bench.sh: WARNING: the rdkafka contender does not build (log: $RDK_LOG); running without it" >&2
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

# The broker's SSL listener (PORT+10, certificate signed by certs/ca.pem), from broker.info.
SSL_BOOTSTRAP="$(sed -n 's/^ssl=//p' "$BENCH_RUN_DIR/broker.info")"
CERTS="$(sed -n 's/^certs=//p' "$BENCH_RUN_DIR/broker.info")"
if [[ -n "$SSL_BOOTSTRAP" && -s "$CERTS/ca.pem" ]]; then
  if (( TLS || SMOKE )); then
    EXTRA+=(--ssl-bootstrap "$SSL_BOOTSTRAP" --ca "$CERTS/ca.pem")
    echo "bench.sh: SSL listener at $SSL_BOOTSTRAP (CA $CERTS/ca.pem)" >&2
  fi
  (( SMOKE )) && EXTRA+=(--tls-smoke)
elif (( TLS )); then
  echo "bench.sh: the benchmark broker has no SSL listener (started by an older scripts/broker.sh?);" \
    "restart it: KAFKA_RUN_DIR=$BENCH_RUN_DIR KAFKA_PORT=29092 KAFKA_CONTROLLER_PORT=29093 scripts/broker.sh stop" >&2
  exit 1
elif (( SMOKE )); then
  echo "bench.sh: WARNING: the benchmark broker has no SSL listener; skipping the TLS smoke run" >&2
fi

rc=0
stamp="$(mktemp)"
python3 benches/bench.py --bootstrap "$BOOTSTRAP" --libs "$LIBS" --run-dir "$BENCH_RUN_DIR" \
  --out "$OUT" --logdir "target/bench-logs/$(basename "$OUT")" --runs "$RUNS" \
  --contenders "$CONTENDERS" --kafka-version "$KAFKA_VERSION_USED" \
  ${BENCH_DATASETS:+--datasets "$BENCH_DATASETS"} \
  --broker-jvm "${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g} -XX:+UseG1GC -XX:MaxGCPauseMillis=20" \
  "${EXTRA[@]}" || rc=$?

RESULT="$OUT/runs.json"
(( TLS )) && RESULT="$OUT/tls.json"
if [[ "$RESULT" -nt "$stamp" ]]; then
  python3 benches/report.py "$OUT"
fi
rm -f "$stamp"
if (( rc != 0 )); then
  echo "bench.sh: FAILED: a dataset could not be prepared or a contender did not read its dataset in full (see above)" >&2
fi
exit "$rc"
