#!/usr/bin/env bash
# The main job on a fresh machine: start the local Kafka broker, produce sample data
# (100,000 records, 6 partitions, lz4, with headers and null keys/values) with the Java
# producer, then read the whole topic with our consumer (examples/consume.rs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TOPIC="${TOPIC:-sample}"
COUNT="${COUNT:-100000}"
BOOTSTRAP="$(scripts/broker.sh start | tail -n1)"
LIBS="$(scripts/broker.sh libs | tail -n1)"
echo "demo.sh: producing $COUNT records to $TOPIC at $BOOTSTRAP"
java -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties -cp "$LIBS/*" \
  scripts/java/TestProducer.java --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --partitions 6 \
  --count "$COUNT" --compression lz4 --value-size 100
cargo run --release --quiet --example consume -- "$BOOTSTRAP" "$TOPIC"
echo "demo.sh: the broker is still running; stop it with scripts/broker.sh stop"
