#!/usr/bin/env bash
# Local single-node Kafka (KRaft, combined broker+controller) for tests,
# built from Maven Central jars (scripts/kafka/pom.xml). Binds 127.0.0.1 only.
#
# Usage: scripts/broker.sh libs|start|stop [--clean]|status
#
#   libs    download the jars (cached) into target/kafka/<version>/libs;
#           the last stdout line is that absolute directory
#   start   start the broker (fresh storage unless KAFKA_KEEP_DATA=1) unless one
#           started by this script (with the same run directory)
#           is already running; the last stdout line is the bootstrap address
#   stop    stop it (SIGTERM, then SIGKILL after 30 s); --clean also removes
#           the run directory (target/kafka/run by default)
#   status  prints "running <bootstrap> ..." (exit 0) or "stopped <bootstrap>"
#           (exit 3)
#
# Environment:
#   KAFKA_VERSION          Kafka version (default: kafka.version in the pom)
#   KAFKA_PORT             PLAINTEXT listener port (default 19092)
#   KAFKA_CONTROLLER_PORT  CONTROLLER listener port (default 19093)
#   KAFKA_HEAP_OPTS        JVM heap options (default "-Xms256m -Xmx1g")
#   KAFKA_START_TIMEOUT    seconds to wait for the broker (default 90)
#   KAFKA_RUN_DIR          run directory: configs, pid, logs and data (default
#                          target/kafka/run; a relative path is taken from the
#                          repository root). Brokers with different run
#                          directories (and ports) can run side by side.
#   KAFKA_KEEP_DATA        1: on start, keep the storage in the run directory if
#                          it is already formatted (topics survive restarts);
#                          unset (default): wipe and format fresh storage
#   KAFKA_EXTRA_PROPS      extra server.properties lines (key=value, one per
#                          line), appended last so they override the defaults,
#                          e.g. KAFKA_EXTRA_PROPS=connections.max.idle.ms=3000
#
# Kafka tools can be run against it with the same class path, e.g.
#   LIBS=$(scripts/broker.sh libs | tail -n1)
#   java -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties \
#        -cp "$LIBS/*" org.apache.kafka.tools.ConsumerPerformance \
#        --bootstrap-server 127.0.0.1:19092 --topic T --messages 1000
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
POM="$ROOT/scripts/kafka/pom.xml"
KAFKA_DIR="$ROOT/target/kafka"
RUN="${KAFKA_RUN_DIR:-$KAFKA_DIR/run}"
[[ "$RUN" == /* ]] || RUN="$ROOT/$RUN"
KEEP_DATA="${KAFKA_KEEP_DATA:-0}"
PID_FILE="$RUN/broker.pid"
INFO_FILE="$RUN/broker.info"
LOG_FILE="$RUN/broker.log"

PINNED_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM" | head -n1)"
VERSION="${KAFKA_VERSION:-$PINNED_VERSION}"
PORT="${KAFKA_PORT:-19092}"
CPORT="${KAFKA_CONTROLLER_PORT:-19093}"
HOST=127.0.0.1
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
LIBS="$KAFKA_DIR/$VERSION/libs"

log() { echo "broker.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# Serialise concurrent invocations. The fd is closed for the broker JVM.
lock() {
  mkdir -p "$KAFKA_DIR"
  exec 9>"$KAFKA_DIR/.broker.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
}

major_minor_ge() { # major_minor_ge VERSION MAJOR MINOR
  local ma mi
  ma="${1%%.*}"; mi="${1#*.}"; mi="${mi%%.*}"
  [[ "$ma" =~ ^[0-9]+$ && "$mi" =~ ^[0-9]+$ ]] || return 1
  (( ma > $2 || (ma == $2 && mi >= $3) ))
}

ensure_libs() {
  if [[ -f "$LIBS/kafka_2.13-$VERSION.jar" ]]; then return 0; fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found (needed to fetch Kafka $VERSION jars)"
  log "fetching Kafka $VERSION jars into $LIBS"
  local tmp="$LIBS.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$KAFKA_DIR"
  # (mvn -q output is kept aside: Maven 3.8 prints stray ANSI resets.)
  if ! mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
      -DoutputDirectory="$tmp" -Dkafka.version="$VERSION" >"$KAFKA_DIR/mvn-$VERSION.log" 2>&1; then
    cat "$KAFKA_DIR/mvn-$VERSION.log" >&2
    rm -rf "$tmp"
    die "mvn could not resolve Kafka $VERSION (see above)"
  fi
  [[ -f "$tmp/kafka_2.13-$VERSION.jar" ]] || { rm -rf "$tmp"; die "kafka_2.13-$VERSION.jar missing after mvn"; }
  rm -rf "$LIBS"
  mv "$tmp" "$LIBS"
}

# Class path for the broker / tools. Kafka 3.x ships reload4j + slf4j-reload4j;
# drop the log4j2 SLF4J binding there so there is exactly one binding.
classpath() {
  if major_minor_ge "$VERSION" 4 0; then
    echo "$LIBS/*"
  else
    local f cp=""
    for f in "$LIBS"/*.jar; do
      case "$(basename "$f")" in log4j-slf4j-impl-*|log4j-slf4j2-impl-*) continue ;; esac
      cp="${cp:+$cp:}$f"
    done
    echo "$cp"
  fi
}

running_pid() { # prints the pid if a broker started by this script is alive
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against pid reuse: the process must be our kafka.Kafka.
  if [[ -r "/proc/$pid/cmdline" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "kafka.Kafka $RUN/server.properties" || return 1
  fi
  echo "$pid"
}

info_get() { # info_get KEY -> value recorded for the running broker
  if [[ -f "$INFO_FILE" ]]; then sed -n "s/^$1=//p" "$INFO_FILE" | head -n1; fi
}

tcp_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Broker answers Metadata/ApiVersions and lists itself (i.e. registered and
# unfenced).
broker_answers() {
  local cls=org.apache.kafka.tools.BrokerApiVersionsCommand
  major_minor_ge "$VERSION" 4 0 || cls=kafka.admin.BrokerApiVersionsCommand
  timeout 30 java -Xshare:auto -XX:TieredStopAtLevel=1 -Xmx256m \
    -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2-tools.properties" \
    -Dlog4j.configuration="file:$RUN/log4j-tools.properties" \
    -cp "$(classpath)" "$cls" --bootstrap-server "$HOST:$1" 2>/dev/null \
    | grep -q "(id: 1 "
}

show_log_tail() {
  if [[ -f "$LOG_FILE" ]]; then
    # The cause is usually logged well before the shutdown noise at the end.
    if grep -qE "ERROR|FATAL" "$LOG_FILE"; then
      log "---- first errors in $LOG_FILE ----"
      grep -E -A3 "ERROR|FATAL" "$LOG_FILE" | head -n 40 >&2
    fi
    log "---- last 50 lines of $LOG_FILE ----"
    tail -n 50 "$LOG_FILE" >&2
  fi
  if [[ -s "$RUN/broker.out" ]]; then
    log "---- last 20 lines of $RUN/broker.out ----"
    tail -n 20 "$RUN/broker.out" >&2
  fi
}

# Wait for the broker process $1 to answer on port $2.
wait_ready() {
  local pid="$1" port="$2" deadline=$((SECONDS + START_TIMEOUT))
  while (( SECONDS < deadline )); do
    kill -0 "$pid" 2>/dev/null || { show_log_tail; die "broker (pid $pid) exited during startup"; }
    # Only pay for a JVM-based check once the broker logged that it started
    # (or, in case the log line changes in some version, after 20 s).
    if tcp_open "$port" && { grep -q "Kafka Server started" "$LOG_FILE" 2>/dev/null \
        || (( SECONDS > deadline - START_TIMEOUT + 20 )); } && broker_answers "$port"; then
      return 0
    fi
    sleep 0.25
  done
  show_log_tail
  die "broker (pid $pid) did not answer on $HOST:$port within ${START_TIMEOUT}s (still running; see $LOG_FILE)"
}

# Same format as `kafka.tools.StorageTool random-uuid` (URL-safe base64 of 16
# random bytes, not starting with '-'), without paying for a JVM start.
random_cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ ${#id} -eq 22 && "$id" != -* ]] && break
  done
  echo "$id"
}

write_configs() {
  mkdir -p "$RUN"
  cat >"$RUN/server.properties" <<EOF
# Generated by scripts/broker.sh for Kafka $VERSION -- do not edit.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CPORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
advertised.listeners=PLAINTEXT://$HOST:$PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$RUN/data

num.network.threads=2
num.io.threads=4
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
# Keep test data regardless of record timestamps (the 168 h default deletes
# records produced with old CreateTimes within minutes), and accept any
# CreateTime (the default rejects timestamps more than 1 h in the future).
log.retention.ms=-1
log.message.timestamp.after.max.ms=9223372036854775807

offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=3000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=500
group.consumer.min.session.timeout.ms=3000
group.consumer.session.timeout.ms=6000
EOF
  if major_minor_ge "$VERSION" 4 3; then
    echo "group.consumer.assignment.interval.ms=0" >>"$RUN/server.properties"
  fi
  if [[ -n "${KAFKA_EXTRA_PROPS:-}" ]]; then
    printf '%s\n' "$KAFKA_EXTRA_PROPS" >>"$RUN/server.properties"
  fi
  # Kafka 3.x logs through reload4j (log4j 1.x syntax).
  cat >"$RUN/log4j.properties" <<EOF
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=$LOG_FILE
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.network.RequestChannel\$=WARN
EOF
  cat >"$RUN/log4j-tools.properties" <<EOF
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
}

cmd_libs() {
  lock
  ensure_libs
  echo "$LIBS"
}

cmd_start() {
  lock
  ensure_libs
  local pid
  if pid="$(running_pid)"; then
    local rport rversion
    rport="$(info_get port)"; rport="${rport:-$PORT}"
    rversion="$(info_get version)"
    [[ "$rport" == "$PORT" ]] || log "warning: running broker listens on port $rport, not $PORT"
    [[ -z "$rversion" || "$rversion" == "$VERSION" ]] || log "warning: running broker is Kafka $rversion, not $VERSION"
    if ! tcp_open "$rport"; then
      log "broker (pid $pid) is running but not answering yet; waiting"
      wait_ready "$pid" "$rport"
    fi
    log "broker already running (pid $pid, Kafka ${rversion:-?})"
    echo "$HOST:$rport"
    return 0
  fi

  for p in "$PORT" "$CPORT"; do
    if tcp_open "$p"; then
      die "port $HOST:$p is already in use by another process (set KAFKA_PORT / KAFKA_CONTROLLER_PORT)"
    fi
  done

  local keep=0
  if [[ "$KEEP_DATA" == 1 && -f "$RUN/data/meta.properties" ]]; then
    keep=1
    log "KAFKA_KEEP_DATA=1: keeping the formatted storage in $RUN/data"
    if [[ -f "$LOG_FILE" ]]; then mv -f "$LOG_FILE" "$LOG_FILE.1"; fi
  else
    # Fresh storage every start for reproducible tests.
    rm -rf "$RUN"
  fi
  write_configs
  local cp java_log
  cp="$(classpath)"
  java_log=(-Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2-tools.properties"
            -Dlog4j.configuration="file:$RUN/log4j-tools.properties")

  if (( ! keep )); then
    local cluster_id
    cluster_id="$(random_cluster_id)"
    if ! java -Xmx256m -XX:TieredStopAtLevel=1 "${java_log[@]}" -cp "$cp" kafka.tools.StorageTool format \
        -t "$cluster_id" -c "$RUN/server.properties" >"$RUN/format.log" 2>&1; then
      cat "$RUN/format.log" >&2
      die "kafka.tools.StorageTool format failed"
    fi
  fi

  log "starting Kafka $VERSION on $HOST:$PORT (controller $HOST:$CPORT), log $LOG_FILE"
  # shellcheck disable=SC2086
  nohup java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
    -Dkafka.logs.dir="$RUN" \
    -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" \
    -Dlog4j.configuration="file:$RUN/log4j.properties" \
    -cp "$cp" kafka.Kafka "$RUN/server.properties" \
    >"$RUN/broker.out" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"
  printf 'version=%s\nport=%s\ncport=%s\n' "$VERSION" "$PORT" "$CPORT" >"$INFO_FILE"

  wait_ready "$pid" "$PORT"
  log "broker ready (pid $pid) after ${SECONDS}s"
  echo "$HOST:$PORT"
}

cmd_stop() {
  local clean=0
  [[ "${1:-}" == "--clean" ]] && clean=1
  lock
  local pid
  if pid="$(running_pid)"; then
    log "stopping broker (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "broker did not stop within 30s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    log "stopped"
  else
    log "broker not running"
  fi
  rm -f "$PID_FILE"
  if (( clean )); then rm -rf "$RUN"; fi
}

cmd_status() {
  local pid port
  port="$(info_get port)"; port="${port:-$PORT}"
  if pid="$(running_pid)" && tcp_open "$port"; then
    echo "running $HOST:$port (pid $pid, Kafka $(info_get version))"
    return 0
  fi
  if [[ -n "${pid:-}" ]]; then
    echo "stopped $HOST:$port (pid $pid alive but not answering)"
  else
    echo "stopped $HOST:$port"
  fi
  return 3
}

case "${1:-}" in
  libs) cmd_libs ;;
  start) cmd_start ;;
  stop) shift; cmd_stop "$@" ;;
  status) cmd_status ;;
  *) echo "usage: $0 libs|start|stop [--clean]|status" >&2; exit 2 ;;
esac
