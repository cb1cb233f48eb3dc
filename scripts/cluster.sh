#!/usr/bin/env bash
# Local 3-node Kafka cluster (KRaft) for failover tests: three combined broker+controller
# nodes on 127.0.0.1, a controller quorum of all three (any one node can die and the
# cluster keeps working), racks a, b, c. The same Kafka jars as scripts/broker.sh
# (Maven Central, scripts/kafka/pom.xml; `scripts/broker.sh libs` fetches them).
# PLAINTEXT only. Kafka 4.x.
#
# Usage: scripts/cluster.sh COMMAND [ARGS]
#
#   start             start all three nodes (fresh storage unless KAFKA_KEEP_DATA=1)
#                     unless they already run (then only missing nodes are started and
#                     frozen ones thawed); waits until every node answers and lists all
#                     three as live brokers, and the metadata quorum has a leader. The
#                     last stdout line is the bootstrap list
#                     127.0.0.1:19301,127.0.0.1:19302,127.0.0.1:19303
#   stop [--clean]    stop every node (SIGTERM, then SIGKILL after 30 s); --clean also
#                     removes the run directory
#   status            one line per node: "node N running|frozen|starting|stopped pid P
#                     port PORT rack R"; exit 0 if all three are running, 3 otherwise
#   bootstrap         prints the bootstrap list (all three nodes, whatever their state)
#
#   kill N            kill -9 node N (N = 1, 2, 3) and wait until it is gone
#   stop-node N       stop node N cleanly (SIGTERM: a controlled shutdown that moves its
#                     leaderships away first) and wait for it to exit (SIGKILL after 30 s)
#   freeze N          SIGSTOP node N: its sockets stay open but nothing answers
#   thaw N            SIGCONT node N
#   restart N         start a stopped or killed node N again on its existing storage and
#                     wait until it answers and is a live (unfenced) broker again
#   heal              thaw every frozen node, restart every stopped one, wait as start does
#
#   create-topic NAME PARTITIONS [--replicas 1,2] [KEY=VALUE ...]
#                     create a topic with replication factor 3 and these topic configs
#                     (e.g. unclean.leader.election.enable=true); waits until every
#                     partition has a leader and all its replicas in sync on every running
#                     node. --replicas puts every partition on exactly these nodes instead,
#                     the first its preferred leader (a topic on nodes 1 and 2 can lose both
#                     while node 3 keeps the controller quorum: tests/cluster_truncation.rs)
#   describe NAME     one line per partition, as the first running node sees it:
#                     partition=P leader=L epoch=E replicas=1,2,3 isr=1,2,3 offline=-
#                     (leader=-1: none; offline: replicas known to be offline, - if none)
#   leader NAME PARTITION
#                     the node id of the partition's leader (-1: none)
#   wait-isr NAME [SECONDS]
#                     wait until every running node sees every partition with a leader
#                     and 3 in-sync replicas (default 60 s); prints them as describe does
#   elect-preferred NAME
#                     move the leadership of every partition back to its first replica
#                     (automatic leader rebalancing is off) and wait until every running
#                     node sees it
#   elect-unclean NAME
#                     unclean leader election for every partition of NAME without a live
#                     leader (a live replica outside the ISR becomes the leader: the log is
#                     truncated to what it has), retried until one is alive; waits until
#                     every running node sees a live leader; prints them as describe does.
#                     A leader this script has killed or stopped counts as dead even
#                     while the controller has not fenced it yet
#   coordinator GROUP the node id of the group's coordinator
#   quorum            leader=N epoch=E high-watermark=H voters=1,2,3 lag=1:0,2:0,3:0
#
# The admin commands run scripts/java/ClusterAdmin.java (compiled once into
# target/kafka/cluster-admin/) against the running, unfrozen nodes only.
#
# Nodes (N = 1, 2, 3; BASE = KAFKA_CLUSTER_PORT, default 19300), all on 127.0.0.1:
#   node.id N, broker.rack a / b / c
#   PLAINTEXT   BASE+N     (19301, 19302, 19303) clients and inter-broker traffic
#   CONTROLLER  BASE+10+N  (19311, 19312, 19313) KRaft, static controller.quorum.voters
# Settings beyond the defaults (see write_config below): default.replication.factor=3,
# min.insync.replicas=2, offsets and transaction topics with replication factor 3 (min
# ISR 2), unclean.leader.election.enable=false (a topic can turn it on),
# auto.create.topics.enable=false, auto.leader.rebalance.enable=false (leaders move only
# when a test makes them: kill, stop-node, elect-preferred), replica.selector.class=
# RackAwareReplicaSelector (a consumer with client.rack=b may be told to fetch from the
# replica on node 2), fast failure detection: broker heartbeats every 500 ms, a broker is
# fenced (its leaderships move) 4 s after its last heartbeat, a follower leaves the ISR
# after 5 s behind; group.initial.rebalance.delay.ms=0 and short group timeouts as
# scripts/broker.sh has them.
#
# Run directory (KAFKA_CLUSTER_DIR, default target/kafka/cluster): nodeN/ holds
# server.properties, pid, broker.log (the node's log, kept across restarts of the node),
# broker.out (JVM stdout/stderr) and data/. On a failed start the log tails are printed.
#
# Memory: three broker JVMs with -Xms256m -Xmx768m each (KAFKA_CLUSTER_HEAP_OPTS):
# about 1.1 GiB resident for the three after tests/cluster.rs, 3 GiB at most. Idle, the
# three use about 12 % of one core (heartbeats, the quorum, replica fetchers).
#
# Environment:
#   KAFKA_CLUSTER_PORT       port base (default 19300; nodes use BASE+1..3, BASE+11..13).
#                            Keep the ports below the kernel's ephemeral range
#                            (net.ipv4.ip_local_port_range, 32768-60999 by default): a
#                            client retrying a node that is down can pick the node's own
#                            port as its source and connect to itself (TCP simultaneous
#                            open), and that socket keeps the node from binding its port
#                            when it restarts. The script warns when they overlap.
#   KAFKA_CLUSTER_DIR        run directory (default target/kafka/cluster; relative paths
#                            are taken from the repository root)
#   KAFKA_CLUSTER_HEAP_OPTS  JVM heap options per node (default "-Xms256m -Xmx768m")
#   KAFKA_CLUSTER_JVM_OPTS   other JVM options per node (default "-XX:TieredStopAtLevel=1":
#                            C1 only, which halves the start-up time on 2 busy cores)
#   KAFKA_VERSION            Kafka version (default: kafka.version in scripts/kafka/pom.xml)
#   KAFKA_START_TIMEOUT      seconds to wait for the nodes on start/restart (default 90)
#   KAFKA_KEEP_DATA          1: start keeps formatted storage (topics survive a stop/start)
#   KAFKA_CLUSTER_EXTRA_PROPS  extra server.properties lines for every node, appended last
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
KAFKA_DIR="$ROOT/target/kafka"
RUN="${KAFKA_CLUSTER_DIR:-$KAFKA_DIR/cluster}"
[[ "$RUN" == /* ]] || RUN="$ROOT/$RUN"
BASE="${KAFKA_CLUSTER_PORT:-19300}"
HOST=127.0.0.1
NODES=(1 2 3)
RACKS=(- a b c) # RACKS[N]
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
STOP_TIMEOUT=30
KEEP_DATA="${KAFKA_KEEP_DATA:-0}"
HEAP_OPTS="${KAFKA_CLUSTER_HEAP_OPTS:--Xms256m -Xmx768m}"
# C1 only: the nodes start about twice as fast on a busy 2-core machine, and test loads
# do not need C2's code.
JVM_OPTS="${KAFKA_CLUSTER_JVM_OPTS--XX:TieredStopAtLevel=1}"
PINNED_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$ROOT/scripts/kafka/pom.xml" | head -n1)"
VERSION="${KAFKA_VERSION:-$PINNED_VERSION}"
TOOLS_LOG4J="$ROOT/scripts/kafka/log4j2-tools.properties"

log() { echo "cluster.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

[[ "$BASE" =~ ^[0-9]+$ ]] && (( BASE > 0 && BASE + 13 < 65536 )) || die "KAFKA_CLUSTER_PORT must be a port number, not '$BASE'"
if read -r EPHEMERAL_LOW EPHEMERAL_HIGH </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null &&
  (( BASE + 13 >= EPHEMERAL_LOW && BASE + 1 <= EPHEMERAL_HIGH )); then
  echo "cluster.sh: warning: ports $((BASE + 1))-$((BASE + 13)) overlap the ephemeral range $EPHEMERAL_LOW-$EPHEMERAL_HIGH: a client retrying a stopped node can connect to itself and hold its port (choose KAFKA_CLUSTER_PORT below $EPHEMERAL_LOW)" >&2
fi
[[ "${VERSION%%.*}" =~ ^[0-9]+$ ]] && (( ${VERSION%%.*} >= 4 )) || die "scripts/cluster.sh needs Kafka 4.x (KAFKA_VERSION=$VERSION)"

port() { echo $((BASE + $1)); }
cport() { echo $((BASE + 10 + $1)); }
node_dir() { echo "$RUN/node$1"; }
bootstrap_list() {
  local n out=""
  for n in "${NODES[@]}"; do out="${out:+$out,}$HOST:$(port "$n")"; done
  echo "$out"
}
check_node() {
  [[ "${1:-}" =~ ^[1-3]$ ]] || die "node must be 1, 2 or 3, not '${1:-}'"
}

# Serialise the commands that start and stop nodes (per run directory). The fd is
# closed for the node JVMs.
lock() {
  mkdir -p "$(dirname "$RUN")"
  exec 9>"$RUN.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
}

LIBS=""
ensure_libs() {
  if [[ -z "$LIBS" ]]; then
    LIBS="$(KAFKA_VERSION="$VERSION" bash "$SCRIPT_DIR/broker.sh" libs | tail -n1)"
    [[ -f "$LIBS/kafka_2.13-$VERSION.jar" ]] || die "scripts/broker.sh libs gave '$LIBS', which has no kafka_2.13-$VERSION.jar"
  fi
}

# The process state letter of pid $1 (R, S, D, T, Z, ...), empty if there is none.
proc_state() {
  ps -o stat= -p "$1" 2>/dev/null | cut -c1 || true
}

# Prints the pid of node $1 if a node started by this script (with this run directory)
# is alive (a zombie is not).
running_pid() {
  local f pid state
  f="$(node_dir "$1")/pid"
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  state="$(proc_state "$pid")"
  [[ -n "$state" && "$state" != Z ]] || return 1
  # Guard against pid reuse: the process must be this node's kafka.Kafka.
  if [[ -r "/proc/$pid/cmdline" ]]; then
    { tr '\0' ' ' <"/proc/$pid/cmdline" || true; } | grep -q "kafka.Kafka $(node_dir "$1")/server.properties" || return 1
  else
    { ps -o args= -p "$pid" 2>/dev/null || true; } | grep -q "kafka.Kafka $(node_dir "$1")/server.properties" || return 1
  fi
  echo "$pid"
}

tcp_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# running | frozen | starting | stopped
node_state() {
  local pid
  if ! pid="$(running_pid "$1")"; then echo stopped; return; fi
  if [[ "$(proc_state "$pid")" == T ]]; then echo frozen; return; fi
  if tcp_open "$(port "$1")"; then echo running; else echo starting; fi
}

# Comma-separated addresses of the nodes that run and are not frozen.
live_bootstrap() {
  local n out=""
  for n in "${NODES[@]}"; do
    if [[ "$(node_state "$n")" == running ]]; then out="${out:+$out,}$HOST:$(port "$n")"; fi
  done
  [[ -n "$out" ]] || die "no node of the cluster in $RUN is running (scripts/cluster.sh status)"
  echo "$out"
}

live_nodes() {
  local n out=""
  for n in "${NODES[@]}"; do
    if [[ "$(node_state "$n")" == running ]]; then out="${out:+$out,}$n"; fi
  done
  echo "$out"
}

# scripts/java/ClusterAdmin.java, compiled once per source change (a single-file source
# launch compiles it again on every run, about a second more each time).
ADMIN_CLASSES=""
ensure_admin() {
  ensure_libs
  local src="$ROOT/scripts/java/ClusterAdmin.java" dir="$KAFKA_DIR/cluster-admin/$VERSION"
  if [[ ! -f "$dir/ClusterAdmin.class" || "$src" -nt "$dir/ClusterAdmin.class" ]]; then
    mkdir -p "$KAFKA_DIR/cluster-admin"
    (
      exec 8>"$KAFKA_DIR/cluster-admin/.lock"
      if command -v flock >/dev/null 2>&1; then flock 8; fi
      if [[ ! -f "$dir/ClusterAdmin.class" || "$src" -nt "$dir/ClusterAdmin.class" ]]; then
        local tmp="$dir.tmp.$$"
        rm -rf "$tmp"
        mkdir -p "$tmp"
        if ! javac -nowarn -d "$tmp" -cp "$LIBS/*" "$src" >"$tmp.log" 2>&1; then
          cat "$tmp.log" >&2
          rm -rf "$tmp" "$tmp.log"
          die "compiling scripts/java/ClusterAdmin.java failed (see above)"
        fi
        rm -rf "$dir" "$tmp.log"
        mv "$tmp" "$dir"
      fi
    )
  fi
  ADMIN_CLASSES="$dir"
}

# cluster_admin COMMAND [OPTIONS...]: ClusterAdmin against the live nodes.
cluster_admin() {
  ensure_admin
  local boot
  boot="$(live_bootstrap)"
  java -Xshare:auto -XX:TieredStopAtLevel=1 -Xmx256m -Dlog4j2.configurationFile="$TOOLS_LOG4J" \
    -cp "$ADMIN_CLASSES:$LIBS/*" ClusterAdmin "$1" --bootstrap "$boot" "${@:2}" 9>&-
}

show_log_tail() { # show_log_tail N
  local dir lf
  dir="$(node_dir "$1")"
  lf="$dir/broker.log"
  if [[ -f "$lf" ]]; then
    if grep -qE "ERROR|FATAL" "$lf"; then
      log "---- node $1: first errors in $lf ----"
      { grep -E -A3 "ERROR|FATAL" "$lf" || true; } | head -n 40 >&2
    fi
    log "---- node $1: last 30 lines of $lf ----"
    tail -n 30 "$lf" >&2
  fi
  if [[ -s "$dir/broker.out" ]]; then
    log "---- node $1: last 20 lines of $dir/broker.out ----"
    tail -n 20 "$dir/broker.out" >&2
  fi
}

write_config() { # write_config N
  local n="$1" dir voters="" v
  dir="$(node_dir "$n")"
  for v in "${NODES[@]}"; do voters="${voters:+$voters,}$v@$HOST:$(cport "$v")"; done
  mkdir -p "$dir"
  cat >"$dir/server.properties" <<EOF
# Generated by scripts/cluster.sh for Kafka $VERSION, node $n of 3 -- do not edit.
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://$HOST:$(port "$n"),CONTROLLER://$HOST:$(cport "$n")
advertised.listeners=PLAINTEXT://$HOST:$(port "$n")
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
broker.rack=${RACKS[$n]}
replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector

# Three JVMs share the machine: few threads each.
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
background.threads=4
num.recovery.threads.per.data.dir=1

num.partitions=1
default.replication.factor=3
min.insync.replicas=2
auto.create.topics.enable=false
unclean.leader.election.enable=false
# Leaders move only when a test makes them (kill, stop-node, elect-preferred), not on
# a timer in the middle of a test.
auto.leader.rebalance.enable=false
# Keep test data regardless of record timestamps, accept any CreateTime (see broker.sh).
log.retention.ms=-1
log.message.timestamp.after.max.ms=9223372036854775807

offsets.topic.replication.factor=3
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2

# Failure detection for tests: a node that stops heartbeating is fenced (and its
# partitions get new leaders) after 4 s; a follower 5 s behind leaves the ISR.
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=4000
replica.lag.time.max.ms=5000
controlled.shutdown.enable=true
controller.quorum.election.timeout.ms=1000
controller.quorum.fetch.timeout.ms=2000

group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=3000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=500
group.consumer.min.session.timeout.ms=3000
group.consumer.session.timeout.ms=6000
EOF
  if (( ${VERSION%%.*} > 4 )) || [[ "$VERSION" =~ ^4\.([3-9]|[1-9][0-9]) ]]; then
    echo "group.consumer.assignment.interval.ms=0" >>"$dir/server.properties"
  fi
  if [[ -n "${KAFKA_CLUSTER_EXTRA_PROPS:-}" ]]; then
    printf '%s\n' "$KAFKA_CLUSTER_EXTRA_PROPS" >>"$dir/server.properties"
  fi
}

# Same format as `kafka-storage random-uuid`, without a JVM.
random_cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ ${#id} -eq 22 && "$id" != -* ]] && break
  done
  echo "$id"
}

format_all() {
  local id n pids=() failed=0
  id="$(random_cluster_id)"
  for n in "${NODES[@]}"; do
    java -Xshare:auto -XX:TieredStopAtLevel=1 -Xmx256m -Dlog4j2.configurationFile="$TOOLS_LOG4J" \
      -cp "$LIBS/*" kafka.tools.StorageTool format -t "$id" -c "$(node_dir "$n")/server.properties" \
      >"$(node_dir "$n")/format.log" 2>&1 9>&- &
    pids+=($!)
  done
  for n in "${NODES[@]}"; do
    if ! wait "${pids[$((n - 1))]}"; then
      cat "$(node_dir "$n")/format.log" >&2
      failed=1
    fi
  done
  (( ! failed )) || die "kafka.tools.StorageTool format failed (see above)"
}

# Starts node $1's JVM in the background (storage must be formatted).
launch() {
  local n="$1" dir pid
  dir="$(node_dir "$n")"
  [[ -f "$dir/data/meta.properties" ]] || die "node $n has no formatted storage in $dir/data (scripts/cluster.sh start formats it)"
  # A node killed a moment ago may still be releasing its sockets on a busy machine:
  # give it up to 15 s before calling the ports taken. (A port in the ephemeral range can
  # also be held by a client socket connected to itself: see KAFKA_CLUSTER_PORT.)
  local waited=0
  while (tcp_open "$(port "$n")" || tcp_open "$(cport "$n")") && (( waited < 150 )); do
    sleep 0.1
    waited=$((waited + 1))
  done
  if tcp_open "$(port "$n")" || tcp_open "$(cport "$n")"; then
    log "sockets on those ports now:"
    ss -tanp 2>/dev/null | grep -E ":($(port "$n")|$(cport "$n"))\b" >&2 || true
    ps -eo pid,stat,etime,args 2>/dev/null | grep "[n]ode$n/server.properties" >&2 || true
    die "port $(port "$n") or $(cport "$n") of node $n is already in use by another process (set KAFKA_CLUSTER_PORT)"
  fi
  # Where this run's part of the log starts: readiness looks only at what comes after.
  local start=0
  if [[ -f "$dir/broker.log" ]]; then start="$(wc -c <"$dir/broker.log" | tr -d ' ')"; fi
  echo "$start" >"$dir/log.start"
  # shellcheck disable=SC2086
  nohup java $HEAP_OPTS $JVM_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExplicitGCInvokesConcurrent \
    -Djava.awt.headless=true -Dkafka.logs.dir="$dir" \
    -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" \
    >>"$dir/broker.out" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$dir/pid"
}

# Waits until node $1's process logged that it started and its port is open.
wait_started() {
  local n="$1" deadline="$2" dir pid start
  dir="$(node_dir "$n")"
  pid="$(cat "$dir/pid")"
  start="$(cat "$dir/log.start" 2>/dev/null || echo 0)"
  while :; do
    if ! running_pid "$n" >/dev/null; then
      show_log_tail "$n"
      die "node $n (pid $pid) exited during startup"
    fi
    # (pipefail: `grep -q` stops reading at the match, and a log grown past the pipe's
    # buffer since then would fail the writer with SIGPIPE and the whole test with it.)
    if tcp_open "$(port "$n")" && { tail -c +"$((start + 1))" "$dir/broker.log" 2>/dev/null || true; } | grep -q "Kafka Server started"; then
      return 0
    fi
    if (( SECONDS >= deadline )); then
      show_log_tail "$n"
      die "node $n (pid $pid) did not start within ${START_TIMEOUT}s (still running; see $dir/broker.log)"
    fi
    sleep 0.2
  done
}

# Waits until every running node lists all running nodes as live brokers and the
# quorum has a leader.
wait_ready() {
  local deadline="$1" left n
  left=$((deadline - SECONDS))
  (( left > 0 )) || left=1
  if ! cluster_admin wait-ready --nodes "$(live_nodes)" --timeout "$left" >&2; then
    for n in "${NODES[@]}"; do show_log_tail "$n"; done
    die "the cluster did not become ready within ${START_TIMEOUT}s (scripts/cluster.sh status)"
  fi
}

cmd_start() {
  lock
  ensure_libs
  local n state any=0 all=1 deadline
  for n in "${NODES[@]}"; do
    state="$(node_state "$n")"
    if [[ "$state" != stopped ]]; then any=1; fi
    if [[ "$state" != running ]]; then all=0; fi
  done
  deadline=$((SECONDS + START_TIMEOUT))
  if (( all )); then
    log "cluster already running ($RUN)"
  elif (( any )); then
    log "cluster partly running: starting the missing nodes"
    heal_nodes "$deadline"
  else
    local keep=0
    if [[ "$KEEP_DATA" == 1 ]]; then
      keep=1
      for n in "${NODES[@]}"; do [[ -f "$(node_dir "$n")/data/meta.properties" ]] || keep=0; done
    fi
    if (( keep )); then
      log "KAFKA_KEEP_DATA=1: keeping the formatted storage in $RUN"
      for n in "${NODES[@]}"; do write_config "$n"; done
    else
      # Fresh storage every start for reproducible tests.
      rm -rf "$RUN"
      for n in "${NODES[@]}"; do write_config "$n"; done
      format_all
    fi
    log "starting Kafka $VERSION nodes 1-3 on $HOST:$(port 1)-$(port 3) (controllers $(cport 1)-$(cport 3)), logs $RUN/node*/broker.log"
    for n in "${NODES[@]}"; do launch "$n"; done
    for n in "${NODES[@]}"; do wait_started "$n" "$deadline"; done
    wait_ready "$deadline"
    log "cluster ready after ${SECONDS}s"
  fi
  bootstrap_list
}

# Thaw frozen nodes, start stopped ones, wait until all are ready.
heal_nodes() {
  local deadline="$1" n started=()
  for n in "${NODES[@]}"; do
    case "$(node_state "$n")" in
      frozen) log "thawing node $n"; kill -CONT "$(running_pid "$n")" ;;
      stopped) log "restarting node $n"; launch "$n"; started+=("$n") ;;
    esac
  done
  for n in ${started[@]+"${started[@]}"}; do wait_started "$n" "$deadline"; done
  # Nodes another command is starting: until their port is open.
  for n in "${NODES[@]}"; do
    while [[ "$(node_state "$n")" == starting ]] && (( SECONDS < deadline )); do sleep 0.2; done
  done
  wait_ready "$deadline"
}

cmd_heal() {
  lock
  ensure_libs
  heal_nodes $((SECONDS + START_TIMEOUT))
  log "all nodes running"
}

# Waits until pid $1 is gone (or a zombie); returns 1 after $2 seconds.
wait_gone() {
  local pid="$1" deadline=$((SECONDS + $2)) state
  while :; do
    state="$(proc_state "$pid")"
    [[ -z "$state" || "$state" == Z ]] && return 0
    (( SECONDS < deadline )) || return 1
    sleep 0.1
  done
}

cmd_stop() {
  local clean=0 n pid pids=()
  [[ "${1:-}" == "--clean" ]] && clean=1
  lock
  for n in "${NODES[@]}"; do
    if pid="$(running_pid "$n")"; then
      log "stopping node $n (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      kill -CONT "$pid" 2>/dev/null || true # a frozen node must run to act on SIGTERM
      pids+=("$n:$pid")
    fi
  done
  local deadline=$((SECONDS + STOP_TIMEOUT)) p
  for p in ${pids[@]+"${pids[@]}"}; do
    if ! wait_gone "${p#*:}" $((deadline - SECONDS)); then
      log "node ${p%%:*} (pid ${p#*:}) did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "${p#*:}" 2>/dev/null || true
      wait_gone "${p#*:}" 10 || die "node ${p%%:*} (pid ${p#*:}) survived SIGKILL"
    fi
  done
  if (( ${#pids[@]} )); then log "stopped"; else log "cluster not running"; fi
  for n in "${NODES[@]}"; do rm -f "$(node_dir "$n")/pid"; done
  if (( clean )); then rm -rf "$RUN" "$RUN.lock"; fi
}

cmd_status() {
  local n state pid all=0
  for n in "${NODES[@]}"; do
    state="$(node_state "$n")"
    pid="$(running_pid "$n" || echo -)"
    echo "node $n $state pid $pid port $(port "$n") rack ${RACKS[$n]}"
    [[ "$state" == running ]] || all=3
  done
  return "$all"
}

node_pid_or_die() { # node_pid_or_die N WHAT
  local pid
  pid="$(running_pid "$1")" || die "cannot $2 node $1: it is not running (scripts/cluster.sh status)"
  echo "$pid"
}

cmd_kill() {
  check_node "${1:-}"
  lock
  local pid
  pid="$(node_pid_or_die "$1" kill)"
  kill -KILL "$pid"
  wait_gone "$pid" 10 || die "node $1 (pid $pid) still there 10 s after SIGKILL"
  rm -f "$(node_dir "$1")/pid"
  log "killed node $1 (pid $pid)"
}

cmd_stop_node() {
  check_node "${1:-}"
  lock
  local pid
  pid="$(node_pid_or_die "$1" stop)"
  kill -TERM "$pid"
  kill -CONT "$pid" 2>/dev/null || true
  if ! wait_gone "$pid" "$STOP_TIMEOUT"; then
    log "node $1 (pid $pid) did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 10 || die "node $1 (pid $pid) survived SIGKILL"
  fi
  rm -f "$(node_dir "$1")/pid"
  log "stopped node $1 (pid $pid)"
}

cmd_freeze() {
  check_node "${1:-}"
  lock
  local pid
  pid="$(node_pid_or_die "$1" freeze)"
  kill -STOP "$pid"
  log "froze node $1 (pid $pid)"
}

cmd_thaw() {
  check_node "${1:-}"
  lock
  local pid
  pid="$(node_pid_or_die "$1" thaw)"
  kill -CONT "$pid"
  log "thawed node $1 (pid $pid)"
}

cmd_restart() {
  check_node "${1:-}"
  lock
  ensure_libs
  local pid deadline=$((SECONDS + START_TIMEOUT))
  if pid="$(running_pid "$1")"; then
    die "node $1 is $(node_state "$1") (pid $pid): kill or stop-node it first$([[ "$(node_state "$1")" == frozen ]] && echo ", or thaw it")"
  fi
  log "restarting node $1 on its storage in $(node_dir "$1")/data"
  launch "$1"
  wait_started "$1" "$deadline"
  wait_ready "$deadline"
  log "node $1 running again (pid $(running_pid "$1")) after ${SECONDS}s"
}

usage() {
  cat >&2 <<EOF
usage: $0 start | stop [--clean] | status | bootstrap | heal
          | kill N | stop-node N | freeze N | thaw N | restart N
          | create-topic NAME PARTITIONS [--replicas 1,2] [KEY=VALUE ...] | describe NAME
          | leader NAME PARTITION | wait-isr NAME [SECONDS] | elect-preferred NAME
          | elect-unclean NAME
          | coordinator GROUP | quorum
(see the comment at the top of scripts/cluster.sh)
EOF
  exit 2
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
  start) cmd_start ;;
  stop) cmd_stop "$@" ;;
  status) cmd_status ;;
  bootstrap) bootstrap_list ;;
  heal) cmd_heal ;;
  kill) cmd_kill "$@" ;;
  stop-node) cmd_stop_node "$@" ;;
  freeze) cmd_freeze "$@" ;;
  thaw) cmd_thaw "$@" ;;
  restart) cmd_restart "$@" ;;
  create-topic)
    [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || usage
    topic="$1" parts="$2"
    shift 2
    cfg=()
    while [[ $# -gt 0 ]]; do
      kv="$1"
      shift
      if [[ "$kv" == --replicas ]]; then
        [[ $# -gt 0 && "$1" =~ ^[1-3](,[1-3])*$ ]] || die "--replicas wants node ids like 1,2"
        cfg+=(--replicas "$1")
        shift
        continue
      fi
      [[ "$kv" == *=* ]] || die "topic config '$kv' is not KEY=VALUE"
      cfg+=(--config "$kv")
    done
    cluster_admin create-topic --topic "$topic" --partitions "$parts" --rf 3 ${cfg[@]+"${cfg[@]}"}
    ;;
  describe) [[ $# -eq 1 ]] || usage; cluster_admin describe --topic "$1" ;;
  leader) [[ $# -eq 2 && "$2" =~ ^[0-9]+$ ]] || usage; cluster_admin leader --topic "$1" --partition "$2" ;;
  wait-isr)
    [[ $# -ge 1 && $# -le 2 ]] || usage
    cluster_admin wait-isr --topic "$1" --timeout "${2:-60}"
    ;;
  elect-preferred) [[ $# -eq 1 ]] || usage; cluster_admin elect-preferred --topic "$1" ;;
  elect-unclean) [[ $# -eq 1 ]] || usage; cluster_admin elect-unclean --topic "$1" --nodes "$(live_nodes)" ;;
  coordinator) [[ $# -eq 1 ]] || usage; cluster_admin coordinator --group "$1" ;;
  quorum) [[ $# -eq 0 ]] || usage; cluster_admin quorum ;;
  *) usage ;;
esac
