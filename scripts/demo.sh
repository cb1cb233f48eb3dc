#!/usr/bin/env bash
# The main job on a fresh machine: start the local Kafka broker, produce sample data
# (100,000 records, 6 partitions, lz4, with headers and null keys/values) with the Java
# producer, read the whole topic with our consumer (examples/consume.rs, partitions
# assigned by hand), then share it in a consumer group of three of our members
# (examples/group_demo.rs): B and C join after A, C leaves, its partitions move; a
# timeline shows who owned what and how many records each processed, and the run checks
# that every record was processed exactly once. Then the same group story with the KIP-848
# protocol (group.protocol=consumer: the broker assigns, rebalances are incremental).
#
#   ASSIGNOR=range bash scripts/demo.sh      # the eager assignor instead of cooperative-sticky
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TOPIC="${TOPIC:-sample-$(date +%s)}"
COUNT="${COUNT:-100000}"
ASSIGNOR="${ASSIGNOR:-cooperative-sticky}"
BOOTSTRAP="$(scripts/broker.sh start | tail -n1)"
LIBS="$(scripts/broker.sh libs | tail -n1)"
echo "demo.sh: producing $COUNT records to $TOPIC at $BOOTSTRAP"
java -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties -cp "$LIBS/*" \
  scripts/java/TestProducer.java --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --partitions 6 \
  --count "$COUNT" --compression lz4 --value-size 100
cargo build --release --quiet --example consume --example group_demo
target/release/examples/consume "$BOOTSTRAP" "$TOPIC"
echo "demo.sh: a consumer group of three members shares $TOPIC ($ASSIGNOR)"
target/release/examples/group_demo "$BOOTSTRAP" "$TOPIC" "$COUNT" "$ASSIGNOR"
echo "demo.sh: the same with the KIP-848 consumer group protocol (group.protocol=consumer)"
target/release/examples/group_demo "$BOOTSTRAP" "$TOPIC" "$COUNT" consumer
echo "demo.sh: the broker is still running; stop it with scripts/broker.sh stop"
