#!/usr/bin/env bash
# Local single-node Kafka (KRaft, combined broker+controller) for tests,
# built from Maven Central jars (scripts/kafka/pom.xml). Binds 127.0.0.1 only.
#
# Usage: scripts/broker.sh libs|certs|start|stop [--clean]|status
#
#   libs    download the jars (cached) into target/kafka/<version>/libs;
#           the last stdout line is that absolute directory
#   certs   generate the test certificates unless cached (see below); the last
#           stdout line is their absolute directory
#   start   start the broker (fresh storage unless KAFKA_KEEP_DATA=1) unless one
#           started by this script (with the same run directory)
#           is already running; the last stdout line is the PLAINTEXT bootstrap
#           address
#   stop    stop it (SIGTERM, then SIGKILL after 30 s); --clean also removes
#           the run directory (target/kafka/run by default)
#   status  prints "running <bootstrap> ..." (exit 0) and then one line per
#           secured listener ("listener NAME HOST:PORT") and "certs DIR"; or
#           "stopped <bootstrap>" (exit 3)
#
# Listeners, all on 127.0.0.1; PORT is KAFKA_PORT (default 19092), so a second
# broker with another KAFKA_PORT gets its own set. They are recorded in
# <run dir>/broker.info (keys ssl, mtls, sasl_plaintext, sasl_ssl, reauth,
# ssl_wrongname, certs).
#   PLAINTEXT       PORT     (19092) no authentication; principal User:ANONYMOUS
#   CONTROLLER      KAFKA_CONTROLLER_PORT (19093), PLAINTEXT; also inter-broker
#                   traffic is PLAINTEXT (the PLAINTEXT listener)
#   SSL             PORT+10  (19102) one-way TLS (broker-bundle.pem); User:ANONYMOUS
#   MTLS            PORT+11  (19103) TLS with ssl.client.auth=required, client
#                   certificates signed by ca.pem; client.pem/client.key gives
#                   User:CN=kafka-consumer-test-client (the subject DN as is:
#                   default ssl.principal.mapping.rules)
#   SASL_PLAINTEXT  PORT+12  (19104) SASL over plain TCP
#                                    (PLAIN and SCRAM only: no OAUTHBEARER here)
#   SASL_SSL        PORT+13  (19105) SASL over one-way TLS
#   REAUTH          PORT+14  (19106) SASL_SSL with
#                   listener.name.reauth.connections.max.reauth.ms=6000: the
#                   broker tells clients their session lasts at most 6 s and
#                   closes connections that do not re-authenticate in time
#   SSL_WRONGNAME   PORT+15  (19107) one-way TLS with broker-wrongname-bundle.pem: a
#                   chain valid for ca.pem but only for DNS name wrong.example,
#                   so hostname verification fails (and passes without it)
# The SASL listeners offer PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER.
#
# Users (same password on every SASL listener and mechanism; principal User:NAME):
#   admin  admin-secret  super user
#   alice  alice-secret  super user (happy-path tests need no ACLs)
#   bob    bob-secret    no ACLs: authorization failures unless a test grants
#                        some (scripts/java/TestAdmin.java acl-add / acl-remove)
#   PLAIN: per-listener JAAS PlainLoginModule (user_NAME="PASSWORD").
#   SCRAM-SHA-256 and SCRAM-SHA-512: credentials for all three users written
#   into the metadata log when the storage is formatted (StorageTool --add-scram;
#   4096 iterations).
#   OAUTHBEARER: Kafka's default unsecured validator (no JWKS endpoint, no
#   server callback handler configured): any unsigned JWS
#   base64url({"alg":"none"}) "." base64url({"sub":NAME,"iat":..,"exp":..}) "."
#   is accepted and NAME (the "sub" claim) is the principal. Java clients:
#   OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";
# Authorization: StandardAuthorizer; super.users = User:ANONYMOUS (PLAINTEXT,
# CONTROLLER, SSL, SSL_WRONGNAME: the plaintext tests need no ACLs), User:admin,
# User:alice, User:CN=kafka-consumer-test-client. Everyone else is denied unless
# an ACL allows it (allow.everyone.if.no.acl.found=false).
#
# Certificates: generated once by scripts/java/TestCerts.java (JDK only: keytool
# plus java.security) into target/kafka/certs, shared by all run directories,
# regenerated only when a file is missing or a certificate expires within 30
# days (rm -rf target/kafka/certs to force it; brokers already running keep the
# old ones). RSA 2048, SHA256withRSA, valid 3650 days. Private keys are
# unencrypted except in client-encrypted.key and client.p12.
#   ca.pem                    the CA (CN=kafka-consumer-test-ca, CA:true) that
#                             signed the broker and client certificates: the
#                             trust anchor for clients (Java: ssl.truststore.type=PEM,
#                             ssl.truststore.location=ca.pem)
#   broker.pem                the broker's certificate chain (broker cert with
#                             SAN IP:127.0.0.1, DNS:localhost; then ca.pem)
#   broker-bundle.pem         broker key + broker.pem: the broker's keystore
#                             (ssl.keystore.type=PEM)
#   broker-wrongname-bundle.pem  same key, certificate for DNS:wrong.example only
#   client.pem                client certificate chain (client cert, then ca.pem)
#   client.key                its private key, unencrypted PKCS#8 PEM
#                             ("BEGIN PRIVATE KEY")
#   client-bundle.pem         client.key + client.pem in one file (Java:
#                             ssl.keystore.type=PEM, ssl.keystore.location=...)
#   client-encrypted.key      the same key, encrypted PKCS#8 PEM ("BEGIN
#                             ENCRYPTED PRIVATE KEY"; PBES2/AES-256-CBC,
#                             password client-key-pass)
#   client.p12                the same key and chain as PKCS12 (store and key
#                             password kafka-test-pass)
#   expired-client.pem, expired-client.key, expired-client-bundle.pem
#                             the same subject and key, but a certificate valid
#                             only from 400 to 370 days before generation: the
#                             MTLS listener refuses it
#   other-ca.pem              an unrelated CA (CN=kafka-consumer-test-other-ca)
#                             that signed nothing here ("unknown CA" tests)
#   not-after                 epoch seconds when the first certificate expires
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
#   KAFKA_SECURITY         0: PLAINTEXT and CONTROLLER only, no authorizer, no
#                          certificates (default 1: the secured listeners above;
#                          always 0 for Kafka older than 3.5, whose StorageTool
#                          cannot add SCRAM credentials)
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
CERTS="$KAFKA_DIR/certs"
# What TestCerts.java writes; all must exist for the cache to count.
CERT_FILES=(ca.pem other-ca.pem broker.pem broker-bundle.pem broker-wrongname-bundle.pem client.pem
            client.key client-bundle.pem client-encrypted.key client.p12
            expired-client.pem expired-client.key expired-client-bundle.pem not-after)

log() { echo "broker.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# (Not ${1,,}: that needs bash 4, and macOS ships bash 3.2.)
lower() { echo "$1" | tr '[:upper:]' '[:lower:]'; }

[[ "$PORT" =~ ^[0-9]+$ && "$CPORT" =~ ^[0-9]+$ ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must be numbers"
SECURITY="${KAFKA_SECURITY:-1}"
# Secured listeners, in port order: NAME PROTOCOL (port PORT+10, PORT+11, ...).
SECURE_LISTENERS=(SSL:SSL MTLS:SSL SASL_PLAINTEXT:SASL_PLAINTEXT SASL_SSL:SASL_SSL
                  REAUTH:SASL_SSL SSL_WRONGNAME:SSL)
SASL_MECHANISMS=(PLAIN SCRAM-SHA-256 SCRAM-SHA-512 OAUTHBEARER)
# The SASL users (NAME=PASSWORD), for PLAIN's JAAS config and the SCRAM credentials.
SASL_USERS=(admin=admin-secret alice=alice-secret bob=bob-secret)

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

# Secured listeners on? (Kafka < 3.5: StorageTool has no --add-scram.)
security_on() {
  [[ "$SECURITY" == 1 ]] && major_minor_ge "$VERSION" 3 5
}

# Prints "NAME PROTOCOL PORT" per secured listener.
secure_listeners() {
  local i=0 l
  for l in "${SECURE_LISTENERS[@]}"; do
    echo "${l%%:*} ${l#*:} $((PORT + 10 + i))"
    i=$((i + 1))
  done
}

certs_fresh() {
  local f not_after
  for f in "${CERT_FILES[@]}"; do [[ -s "$CERTS/$f" ]] || return 1; done
  not_after="$(cat "$CERTS/not-after")"
  [[ "$not_after" =~ ^[0-9]+$ ]] && (( not_after > $(date +%s) + 30 * 86400 ))
}

# The certificates are generated once (a few seconds: RSA key generation and a
# JVM) and shared by every run directory, so broker starts stay fast.
ensure_certs() {
  if certs_fresh; then return 0; fi
  command -v java >/dev/null 2>&1 || die "java not found (needed to generate the test certificates)"
  log "generating test certificates into $CERTS (once; kept until 30 days before they expire)"
  local tmp="$CERTS.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$KAFKA_DIR"
  # keytool runs inside TestCerts' JVM (one JVM instead of ~15): its entry
  # point is in a non-exported JDK package.
  if ! java -Xshare:auto --add-exports java.base/sun.security.tools.keytool=ALL-UNNAMED \
      "$ROOT/scripts/java/TestCerts.java" "$tmp" >"$KAFKA_DIR/certs.log" 2>&1; then
    cat "$KAFKA_DIR/certs.log" >&2
    rm -rf "$tmp"
    die "generating the test certificates failed (scripts/java/TestCerts.java, see above)"
  fi
  # Replace as a whole: a half-written set never looks fresh.
  rm -rf "$CERTS"
  mv "$tmp" "$CERTS"
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
    { tr '\0' ' ' <"/proc/$pid/cmdline" || true; } | grep -q "kafka.Kafka $RUN/server.properties" || return 1
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
  # The whole output goes to grep: with pipefail, a writer cut off by `grep -q` at its
  # match would fail the check.
  timeout 30 java -Xshare:auto -XX:TieredStopAtLevel=1 -Xmx256m \
    -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2-tools.properties" \
    -Dlog4j.configuration="file:$RUN/log4j-tools.properties" \
    -cp "$(classpath)" "$cls" --bootstrap-server "$HOST:$1" 2>/dev/null \
    | grep -c "(id: 1 " >/dev/null
}

show_log_tail() {
  if [[ -f "$LOG_FILE" ]]; then
    # The cause is usually logged well before the shutdown noise at the end.
    if grep -qE "ERROR|FATAL" "$LOG_FILE"; then
      log "---- first errors in $LOG_FILE ----"
      { grep -E -A3 "ERROR|FATAL" "$LOG_FILE" || true; } | head -n 40 >&2
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
  local listeners="PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT"
  local advertised="PLAINTEXT://$HOST:$PORT"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  local name proto port
  if security_on; then
    # Every client-facing listener must be advertised: a client is sent the
    # broker's address on the listener its request came in on.
    while read -r name proto port; do
      listeners+=",$name://$HOST:$port"
      advertised+=",$name://$HOST:$port"
      protocols+=",$name:$proto"
    done < <(secure_listeners)
  fi
  cat >"$RUN/server.properties" <<EOF
# Generated by scripts/broker.sh for Kafka $VERSION -- do not edit.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CPORT
listeners=$listeners
advertised.listeners=$advertised
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=$protocols
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
  if security_on; then write_security_configs >>"$RUN/server.properties"; fi
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

# server.properties lines for the secured listeners (see the header).
write_security_configs() {
  local plain_users="" u l m
  for u in "${SASL_USERS[@]}"; do plain_users+=" user_${u%%=*}=\"${u#*=}\""; done
  cat <<EOF

# ---- Secured listeners (scripts/broker.sh header: ports, users, certificates) ----
# ANONYMOUS is what PLAINTEXT, CONTROLLER and one-way TLS clients are: super user,
# so the plaintext tests need no ACLs. The mTLS principal is the client
# certificate's subject DN as is (default ssl.principal.mapping.rules).
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:admin;User:alice;User:CN=kafka-consumer-test-client
allow.everyone.if.no.acl.found=false

# PEM keystores with unencrypted keys (no passwords): a PKCS12 keystore costs
# 100-300 ms of PBKDF2 per TLS listener at startup.
ssl.keystore.type=PEM
ssl.keystore.location=$CERTS/broker-bundle.pem
ssl.truststore.type=PEM
ssl.truststore.location=$CERTS/ca.pem
listener.name.mtls.ssl.client.auth=required
listener.name.ssl_wrongname.ssl.keystore.location=$CERTS/broker-wrongname-bundle.pem

sasl.enabled.mechanisms=$(IFS=,; echo "${SASL_MECHANISMS[*]}")
# OAUTHBEARER: no sasl.oauthbearer.jwks.endpoint.url and no server callback
# handler, so the broker uses its unsecured (alg "none") JWS validator.
EOF
  for l in sasl_plaintext sasl_ssl reauth; do
    for m in "${SASL_MECHANISMS[@]}"; do
      m="$(lower "$m")"
      case "$m" in
        plain) echo "listener.name.$l.$m.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required$plain_users;" ;;
        scram-*) echo "listener.name.$l.$m.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;" ;;
        oauthbearer) echo "listener.name.$l.$m.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"admin\";" ;;
      esac
    done
  done
  cat <<EOF
# Short sessions on REAUTH only: clients must re-authenticate every < 6 s.
listener.name.reauth.connections.max.reauth.ms=6000
# SASL_PLAINTEXT offers no OAUTHBEARER, so a test can ask for a mechanism a listener
# does not enable (OAUTHBEARER is tested on SASL_SSL and REAUTH).
listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
EOF
}

cmd_certs() {
  lock
  ensure_certs
  echo "$CERTS"
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
    if security_on && [[ -z "$(info_get ssl)" ]]; then
      log "warning: running broker has no secured listeners (started by an older broker.sh or with KAFKA_SECURITY=0); restart it for the TLS/SASL tests: scripts/broker.sh stop"
    fi
    if ! tcp_open "$rport"; then
      log "broker (pid $pid) is running but not answering yet; waiting"
      wait_ready "$pid" "$rport"
    fi
    log "broker already running (pid $pid, Kafka ${rversion:-?})"
    echo "$HOST:$rport"
    return 0
  fi

  local ports=("$PORT" "$CPORT") name proto port
  if security_on; then
    while read -r name proto port; do ports+=("$port"); done < <(secure_listeners)
  elif [[ "$SECURITY" == 1 ]]; then
    log "Kafka $VERSION < 3.5: PLAINTEXT only (no secured listeners)"
  fi
  for port in "${ports[@]}"; do
    if tcp_open "$port"; then
      die "port $HOST:$port is already in use by another process (set KAFKA_PORT / KAFKA_CONTROLLER_PORT; the secured listeners use KAFKA_PORT+10..+15)"
    fi
  done
  if security_on; then ensure_certs; fi

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
    local cluster_id scram=() u m
    cluster_id="$(random_cluster_id)"
    if security_on; then
      # SCRAM credentials live in the metadata log; written at format time they
      # exist before the first client connects, at no extra cost.
      for u in "${SASL_USERS[@]}"; do
        for m in SCRAM-SHA-256 SCRAM-SHA-512; do
          scram+=(--add-scram "$m=[name=${u%%=*},password=${u#*=}]")
        done
      done
    fi
    if ! java -Xmx256m -XX:TieredStopAtLevel=1 "${java_log[@]}" -cp "$cp" kafka.tools.StorageTool format \
        -t "$cluster_id" -c "$RUN/server.properties" ${scram[@]+"${scram[@]}"} >"$RUN/format.log" 2>&1; then
      cat "$RUN/format.log" >&2
      die "kafka.tools.StorageTool format failed"
    fi
  fi

  log "starting Kafka $VERSION on $HOST:$PORT (controller $HOST:$CPORT$(security_on && echo "; secured listeners on $((PORT + 10))-$((PORT + 15))")), log $LOG_FILE"
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
  if security_on; then
    while read -r name proto port; do echo "$(lower "$name")=$HOST:$port"; done < <(secure_listeners) >>"$INFO_FILE"
    echo "certs=$CERTS" >>"$INFO_FILE"
  fi

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
    local name proto lport addr
    while read -r name proto lport; do
      addr="$(info_get "$(lower "$name")")"
      if [[ -n "$addr" ]]; then echo "listener $name $addr"; fi
    done < <(secure_listeners)
    addr="$(info_get certs)"
    if [[ -n "$addr" ]]; then echo "certs $addr"; fi
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
  certs) cmd_certs ;;
  start) cmd_start ;;
  stop) shift; cmd_stop "$@" ;;
  status) cmd_status ;;
  *) echo "usage: $0 libs|certs|start|stop [--clean]|status" >&2; exit 2 ;;
esac
