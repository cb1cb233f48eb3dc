#!/usr/bin/env bash
# The rebalance timeline (examples/rebalance_timeline.rs): on the local broker (started if
# it is not running), one consumer group of our members goes through a scale-out and a
# scale-in (A; B joins at 6 s, C at 12 s; C leaves at 20 s, B at 26 s) while a producer
# writes 2,000 records/s to a fresh 12-partition topic, once with the classic protocol
# (cooperative-sticky) and once with group.protocol=consumer (KIP-848, uniform). Draws who
# owned which partition and when records arrived, both runs side by side, as an SVG
# (docs/rebalance-timeline.svg, the picture in the README), and prints the figures.
#
#   OUT=/tmp/t.svg bash scripts/timeline.sh                      # somewhere else
#   PROTOCOLS=classic-eager,classic,consumer bash scripts/timeline.sh   # also eager range
#   RATE=5000 bash scripts/timeline.sh                           # another producer rate
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT="${OUT:-docs/rebalance-timeline.svg}"
PROTOCOLS="${PROTOCOLS:-classic,consumer}"
RATE="${RATE:-2000}"
BOOTSTRAP="$(scripts/broker.sh start | tail -n1)"
LIBS="$(scripts/broker.sh libs | tail -n1)"
cargo build --release --quiet --example rebalance_timeline
echo "timeline.sh: protocols $PROTOCOLS on $BOOTSTRAP (about 45 s each)"
target/release/examples/rebalance_timeline --bootstrap "$BOOTSTRAP" --out "$OUT" \
  --protocols "$PROTOCOLS" --kafka-libs "$LIBS" --rate "$RATE"
echo "timeline.sh: the picture is $(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")"
echo "timeline.sh: the broker is still running; stop it with scripts/broker.sh stop"
