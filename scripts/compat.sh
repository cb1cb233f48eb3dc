#!/usr/bin/env bash
# Compatibility run (not part of CI): the real-broker integration suites against other
# Kafka releases, each on a broker of its own that scripts/broker.sh starts (KAFKA_VERSION,
# its own run directory and ports), one version after the other.
#
# Usage: scripts/compat.sh [VERSION...]      (default: 3.9.1 4.0.1 4.4.0)
#
# Suites (cargo test --release --test NAME), by broker version:
#   every version  consume commits faults_real lifecycle settings security security_logs
#                  groups java_member
#   4.0 and later  groups_consumer groups_migration groups_mixed
# KIP-848 (group.protocol=consumer) is GA from 4.0; 3.9 has it as early access, off by
# default (group.coordinator.rebalance.protocols=classic), so 3.9 runs the classic
# protocol only: without the three KIP-848 suites, and without the tests of the other
# suites that also run a group.protocol=consumer member (SKIP_BEFORE_4 below).
# Not here: the unit tests and the fake-broker suites (no broker involved), and
# broker_restart, broker_pause and idle, which start brokers of their own at the pinned
# version.
#
# The Java helpers the tests run (producer, admin tool, Java group members) use the pinned
# kafka-clients (scripts/kafka/pom.xml) whatever the broker's version: what is tested is
# our consumer against that broker.
#
# Environment:
#   COMPAT_PORT       PLAINTEXT port of the brokers (default 45092); the controller listens
#                     on COMPAT_PORT+1 and the secured listeners on COMPAT_PORT+10..+15
#   COMPAT_SUITES     the suites to run (space-separated) instead of the lists above; the
#                     version rules still apply
#   COMPAT_TEST_ARGS  extra arguments for the test binaries (after --), e.g. a test name
#
# Output: one line per version and suite (ok, or FAILED with the failing tests), the same
# in target/compat/summary.txt (this run's), each suite's output in
# target/compat/<version>/<suite>.log, the broker's log in
# target/kafka/compat-<version>/broker.log. Exit status 1 if a suite failed or a broker
# did not start.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"

VERSIONS=("$@")
[[ ${#VERSIONS[@]} -gt 0 ]] || VERSIONS=(3.9.1 4.0.1 4.4.0)
PORT="${COMPAT_PORT:-45092}"
[[ "$PORT" =~ ^[0-9]+$ ]] && (( PORT + 15 < 65536 )) || { echo "compat.sh: bad COMPAT_PORT $PORT" >&2; exit 2; }
OUT="$ROOT/target/compat"

EVERY_VERSION=(consume commits faults_real lifecycle settings security security_logs groups java_member)
FROM_4=(groups_consumer groups_migration groups_mixed)
# Tests of the every-version suites that also run a group.protocol=consumer member (ours
# or Java's), skipped before 4.0: a 3.9 broker answers ConsumerGroupHeartbeat with
# UNSUPPORTED_VERSION (Java: "The cluster does not support the new CONSUMER group
# protocol"), which is right for a broker without KIP-848, not a fault of ours.
SKIP_BEFORE_4=(
  # commits: one group of each protocol
  committing_to_a_group_with_an_active_member_fails_with_commit_failed_saying_why
  # security: one group of each protocol, over SASL_SSL
  a_group_of_ours_and_a_java_consumer_shares_partitions_over_sasl_ssl_with_both_protocols
  # groups: the listener under each protocol; the KIP-848 member's idle I/O thread
  the_listener_may_read_positions_and_pause_the_partitions_it_is_given
  a_stable_kip848_member_s_io_thread_is_idle_between_heartbeats
  # java_member: Java members with group.protocol=consumer
  consumer_protocol_members_split_and_hand_over
)

major_minor_ge() { # major_minor_ge VERSION MAJOR MINOR
  local ma mi
  ma="${1%%.*}"; mi="${1#*.}"; mi="${mi%%.*}"
  [[ "$ma" =~ ^[0-9]+$ && "$mi" =~ ^[0-9]+$ ]] || return 1
  (( ma > $2 || (ma == $2 && mi >= $3) ))
}

suites_for() { # suites_for VERSION: the suites to run against it, one per line
  local s wanted=("${EVERY_VERSION[@]}" "${FROM_4[@]}")
  if [[ -n "${COMPAT_SUITES:-}" ]]; then read -r -a wanted <<<"$COMPAT_SUITES"; fi
  for s in "${wanted[@]}"; do
    if ! major_minor_ge "$1" 4 0 && [[ " ${FROM_4[*]} " == *" $s "* ]]; then continue; fi
    echo "$s"
  done
}

# The brokers' environment for scripts/broker.sh; never passed to the tests (whose Java
# helpers would otherwise use that version's jars).
broker() { # broker VERSION ARGS...
  local v="$1"; shift
  KAFKA_VERSION="$v" KAFKA_RUN_DIR="target/kafka/compat-$v" KAFKA_PORT="$PORT" \
    KAFKA_CONTROLLER_PORT="$((PORT + 1))" scripts/broker.sh "$@"
}

ALL_SUITES=()
for v in "${VERSIONS[@]}"; do
  while read -r s; do
    [[ " ${ALL_SUITES[*]-} " == *" $s "* ]] || ALL_SUITES+=("$s")
  done < <(suites_for "$v")
done
[[ ${#ALL_SUITES[@]} -gt 0 ]] || { echo "compat.sh: no suites to run" >&2; exit 2; }

# Build everything first, so the brokers do not idle through a compilation. The group
# tests run our members as processes of their own (examples/group_member.rs).
echo "compat.sh: building the examples and the suites: ${ALL_SUITES[*]}" >&2
tests=()
for s in "${ALL_SUITES[@]}"; do tests+=(--test "$s"); done
cargo build --release --examples
cargo test --release --no-run "${tests[@]}"
# The pinned jars, for the Java helpers.
scripts/broker.sh libs >/dev/null

mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
failed=0
current=""
trap 'if [[ -n "$current" ]]; then broker "$current" stop >/dev/null 2>&1 || true; fi' EXIT

for v in "${VERSIONS[@]}"; do
  rm -rf "${OUT:?}/$v"
  mkdir -p "$OUT/$v"
  echo "compat.sh: Kafka $v on 127.0.0.1:$PORT" >&2
  current="$v"
  if ! bootstrap="$(broker "$v" start 2>"$OUT/$v/broker-start.log" | tail -n1)" || [[ -z "$bootstrap" ]]; then
    echo "Kafka $v: broker did not start (see $OUT/$v/broker-start.log)" | tee -a "$SUMMARY"
    failed=1
    broker "$v" stop >/dev/null 2>&1 || true
    current=""
    continue
  fi
  skip=()
  if ! major_minor_ge "$v" 4 0; then
    for t in "${SKIP_BEFORE_4[@]}"; do skip+=(--skip "$t"); done
  fi
  while read -r s; do
    log="$OUT/$v/$s.log"
    start=$SECONDS
    # shellcheck disable=SC2086
    if env -u KAFKA_VERSION -u KAFKA_RUN_DIR -u KAFKA_PORT -u KAFKA_CONTROLLER_PORT \
        KAFKA_BOOTSTRAP="$bootstrap" cargo test --release --test "$s" -- \
        ${skip[@]+"${skip[@]}"} ${COMPAT_TEST_ARGS:-} >"$log" 2>&1 </dev/null; then
      result="ok"
    else
      failed=1
      names="$(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$log" | tr '\n' ' ')"
      result="FAILED ${names:-(no test failed: see the log)}"
    fi
    counts="$(grep -E '^test result:' "$log" | tail -n1 | sed 's/^test result: [a-zA-Z]*\. //; s/; finished in.*//')"
    echo "Kafka $v $s: $result ($counts; $((SECONDS - start)) s)" | tee -a "$SUMMARY"
  done < <(suites_for "$v")
  broker "$v" stop >/dev/null 2>&1 || true
  current=""
done

echo "compat.sh: summary in $SUMMARY; logs in $OUT/<version>/" >&2
exit "$failed"
