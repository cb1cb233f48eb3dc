#!/usr/bin/env python3
"""Rebalance benchmark: our consumer, the Java KafkaConsumer and librdkafka side by side
while a consumer group changes (run by `bash scripts/bench.sh --rebalance`, which builds the
members and starts the broker; see benches/README.md). Standard library only.

One run of a contender: a fresh topic (32 partitions) and group; a producer
(scripts/java/SeqProducer.java) writes sequence-numbered records at a steady rate
throughout; four members, each a process of its own, form the group ("start"); a fifth
joins ("join"); one leaves with `close` ("close"); one is killed with SIGKILL ("kill").
Before each next step the group must be stable: every partition owned by exactly one live
member, every live member owning some, every partition delivering to its owner since the
step, and no ownership change for SETTLE seconds. Then the producer stops, the members that
are left must deliver every record the broker acknowledged, and the partitions must still
be owned once each; then they close.

Members print JSON lines with wall-clock milliseconds (the machine's one clock):
examples/group_member.rs --format json (ours), scripts/java/GroupMember.java --format json
(Java), benches/rdkafka rdkafka-group-member (librdkafka). The analysis uses only those
lines, the producer's acknowledgements and the moments of close and kill:

- convergence of a step: from the step (the new member's `ready`; the `close` command
  written; the SIGKILL; for "start", the last of the four `ready`s) to the moment every
  partition is owned by the member that owns it when the group is stable and that member
  has delivered a record of it since both the step and the start of its ownership (the
  latest such first delivery over the partitions);
- longest delivery gap of the partitions that kept their owner (the same member before the
  step and after convergence, revoked in between or not): the longest time between two
  deliveries of such a partition by that member, from its last delivery before the step to
  its first delivery after convergence; and the longest stall of those partitions: the
  same, counted only while a record was waiting (from the later of the previous delivery and
  the next delivered record's timestamp, CreateTime on this machine's clock, to its
  delivery), so that a pause of the producer or the machine does not count;
- duplicates: (partition, offset) pairs delivered more than once, over all members, counted
  in the step during which the repeat delivery happened; for "kill", also how many of them
  the killed member had delivered after its last commit of that partition (expected: it
  never committed them);
- the clients' own figures: after each step has converged, every live member of ours and
  Java's is sent `metrics` and prints its client's metrics (`Consumer::metrics`,
  `consumer.metrics()`) as a `metrics` line, and one more just before it closes; the report
  sets the per-step changes (rebalances, time in rebalances, failed rebalances) beside the
  convergence, and checks `records_consumed_total` against the records lines (a mismatch
  is a warning noted in the run, not a failure);
- a run fails, and is reported as failed, when a step does not converge within
  EVENT_TIMEOUT, when a partition ends unowned or owned twice, when an acknowledged record
  is never delivered, or when a member reports an error or dies unasked.

Writes OUT/rebalance.json, OUT/rebalance.md and OUT/rebalance-<contender>.svg (one
timeline per contender, all its runs), and the members' raw output into LOGDIR.
`--report-only OUT` redoes the report and the pictures from OUT/rebalance.json. When OUT
is benches/results (a full run, or `--report-only benches/results`), the README's
`bench:rebalance` block is regenerated from the results (benches/readme_block.py).
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from html import escape

from readme_block import publishes, replace_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The Java programs log WARN and above to stderr (by default log4j2 writes to stdout, where
# the members' JSON lines go).
JAVA_LOG = f"-Dlog4j2.configurationFile={ROOT}/scripts/kafka/log4j2-tools.properties"

# The classic contenders' session and heartbeat: the broker's consumer-protocol settings
# (scripts/broker.sh: group.consumer.session.timeout.ms=6000, heartbeat 500 ms), so every
# contender detects a dead member and hears of a rebalance equally fast.
CLASSIC = {"session_timeout_ms": 6000, "heartbeat_ms": 500}
# Fetch settings for everyone (the Java defaults, spelled out; librdkafka's names differ).
FETCH_MAX_WAIT_MS = 500
COMMIT_EVERY_MS = 1000
EVENT_TIMEOUT_S = 60
DRAIN_TIMEOUT_S = 60
BUCKET_MS = 250
STEPS = ("start", "join", "close", "kill")

CONTENDERS = {
    "ours-eager": ("ours", "classic", "range"),
    "ours-cooperative": ("ours", "classic", "cooperative-sticky"),
    "ours-consumer": ("ours", "consumer", None),
    "java-cooperative": ("java", "classic", "cooperative-sticky"),
    "java-consumer": ("java", "consumer", None),
    "rdkafka-cooperative": ("rdkafka", "classic", "cooperative-sticky"),
    "rdkafka-consumer": ("rdkafka", "consumer", None),
}
DESCRIPTIONS = {
    "ours": "kafka-consumer (this crate), examples/group_member.rs",
    "java": "Apache Kafka KafkaConsumer, scripts/java/GroupMember.java",
    "rdkafka": "librdkafka via rust-rdkafka BaseConsumer, benches/rdkafka rdkafka-group-member",
}
# (ours, peer) pairs on the same protocol for the ratio table.
RATIO_PAIRS = [
    ("ours-cooperative", "java-cooperative"),
    ("ours-cooperative", "rdkafka-cooperative"),
    ("ours-consumer", "java-consumer"),
    ("ours-consumer", "rdkafka-consumer"),
]
# The members that answer the `metrics` command with their client's own figures (ours:
# Consumer::metrics; Java: consumer.metrics()); librdkafka's prints none.
METRICS_KINDS = ("ours", "java")
METRICS_TIMEOUT_S = 15
MEMBER_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"]


def log(msg):
    print(f"rebalance: {msg}", file=sys.stderr, flush=True)


def now_ms():
    return time.time() * 1000.0


def sh(cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def tp_partition(tp):
    return int(tp.rsplit("-", 1)[1])


# ---------------------------------------------------------------------------- processes

class Member:
    """A group member process and what it printed, parsed as it arrives."""

    def __init__(self, name, argv, logdir, reports_metrics=False):
        self.name = name
        self.reports_metrics = reports_metrics  # answers the `metrics` command
        self.metrics = []          # its `metrics` lines, each with "at" and "delivered"
        self.metrics_label = None  # "at" of the next `metrics` line: a step, or "final"
        self.delivered = 0         # records delivered so far (the records lines' `n`)
        self.lock = threading.Lock()
        self.events = []           # parsed JSON lines, in order
        self.owned = {}            # partition -> ms its current ownership started
        self.last_change = None    # ms of the last non-empty assigned/revoked/lost
        self.deliveries = {}       # partition -> [ms, ...] of records lines
        self.ready = None
        self.errors = []
        self.warnings = []
        self.ended = None          # ms its stdout closed
        self.killed_at = None
        self.close_sent = None
        self.raw = open(os.path.join(logdir, f"{name}.out"), "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(os.path.join(logdir, f"{name}.err"), "w"),
                                     text=True, bufsize=1)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.raw.write(line)
            try:
                ev = json.loads(line)
                if not isinstance(ev, dict) or "t" not in ev or "ev" not in ev:
                    raise ValueError
            except ValueError:
                ev = {"t": now_ms(), "ev": "error", "msg": "unparsed line: " + line.strip()}
            with self.lock:
                self._apply(ev)
        with self.lock:
            self.ended = now_ms()
            self.owned.clear()
        self.raw.close()

    def _apply(self, ev):
        self.events.append(ev)
        kind, t = ev["ev"], ev["t"]
        if kind == "ready":
            self.ready = t
        elif kind == "assigned":
            for tp in ev["parts"]:
                self.owned[tp_partition(tp)] = t
            if ev["parts"]:
                self.last_change = t
        elif kind in ("revoked", "lost"):
            for tp in ev["parts"]:
                self.owned.pop(tp_partition(tp), None)
            if ev["parts"]:
                self.last_change = t
        elif kind == "records":
            self.deliveries.setdefault(tp_partition(ev["tp"]), []).append(t)
            self.delivered += ev.get("n", 0)
        elif kind == "metrics":
            snap = {k: v for k, v in ev.items() if k != "ev"}
            snap["at"] = self.metrics_label
            snap["delivered"] = self.delivered
            self.metrics.append(snap)
        elif kind == "error":
            self.errors.append(ev.get("msg", ""))
        elif kind == "warn":
            self.warnings.append(ev.get("msg", ""))

    def send(self, line):
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def kill(self):
        self.killed_at = now_ms()
        try:
            self.proc.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.thread.join(timeout=10)
        with self.lock:
            self.owned.clear()

    def close(self):
        # Ours and Java's print a last `metrics` line before they close.
        with self.lock:
            self.metrics_label = "final"
        self.close_sent = now_ms()
        self.send("close")

    def alive(self):
        return self.proc.poll() is None and self.killed_at is None

    def stop(self, timeout=30):
        """Closes it (if alive) and waits; kills it after `timeout` seconds."""
        if self.proc.poll() is None and self.close_sent is None:
            self.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.errors.append(f"did not exit within {timeout} s of close; killed")
        self.thread.join(timeout=10)


class Producer:
    """SeqProducer: its acknowledgements, (partition, offset) -> sequence number."""

    def __init__(self, args, topic, logdir):
        self.acked = {}
        self.failed = 0
        self.done = None
        self.error = None
        self.first_ack = threading.Event()
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", JAVA_LOG, "-cp", f"{args.java_classes}:{args.libs}/*", "SeqProducer",
             "--bootstrap", args.bootstrap, "--topic", topic, "--partitions", str(args.partitions),
             "--rate", str(args.rate), "--acks", "all"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(os.path.join(logdir, "producer.err"), "w"), text=True, bufsize=1)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            w = line.split()
            if not w:
                continue
            if w[0] == "ack":
                self.acked[(int(w[1]), int(w[2]))] = int(w[3])
                self.first_ack.set()
            elif w[0] == "fail":
                self.failed += 1
            elif w[0] == "done":
                self.done = [int(x) for x in w[1:4]]
            elif w[0] == "error":
                self.error = line.strip()
                self.first_ack.set()

    def stop(self):
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=150)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.error = self.error or "producer did not stop within 150 s"
        self.thread.join(timeout=10)


def member_argv(kind, protocol, assignor, group, topic, args, binaries):
    common = ["--bootstrap", args.bootstrap, "--group", group, "--topics", topic,
              "--protocol", protocol, "--auto-offset-reset", "earliest", "--commit", "revoke",
              "--commit-every-ms", str(COMMIT_EVERY_MS), "--format", "json"]
    if protocol == "classic":
        common += ["--assignor", assignor,
                   "--session-timeout-ms", str(CLASSIC["session_timeout_ms"]),
                   "--heartbeat-ms", str(CLASSIC["heartbeat_ms"])]
    if kind == "ours":
        # --on-error continue: a failed periodic commit is a warning, as for the others.
        return [binaries["ours"], *common, "--on-error", "continue",
                "--set", f"fetch.max.wait.ms={FETCH_MAX_WAIT_MS}", "--set", "fetch.min.bytes=1"]
    if kind == "java":
        return ["java", "-Xmx512m", JAVA_LOG, "-cp", f"{args.java_classes}:{args.libs}/*", "GroupMember",
                *common, "--prop", f"fetch.max.wait.ms={FETCH_MAX_WAIT_MS}",
                "--prop", "fetch.min.bytes=1"]
    return [binaries["rdkafka"], *common, "--set", f"fetch.wait.max.ms={FETCH_MAX_WAIT_MS}",
            "--set", "fetch.min.bytes=1"]


# ---------------------------------------------------------------------------- one run

def group_state(members, partitions, step_ms):
    """(stable-but-for-settling, why not): every partition owned by exactly one live member,
    every live member owning some, every partition delivered by its owner since the step and
    the start of the ownership; also the latest ownership change."""
    live = [m for m in members if m.alive() and m.close_sent is None]
    owners = {p: [] for p in range(partitions)}
    last_change = 0
    for m in members:
        with m.lock:
            owned = dict(m.owned)
            last_change = max(last_change, m.last_change or 0)
            deliveries = {p: list(v[-50:]) for p, v in m.deliveries.items() if p in owned}
        for p, since in owned.items():
            owners.setdefault(p, []).append((m, since, deliveries.get(p, [])))
    for m in members:
        if not m.alive() and m.killed_at is None and m.close_sent is None:
            return False, f"{m.name} exited unasked", last_change
    for p, os_ in owners.items():
        if len(os_) != 1:
            return False, f"partition {p} has {len(os_)} owners", last_change
        m, since, ds = os_[0]
        if m not in live:
            return False, f"partition {p} is owned by {m.name}, which is leaving", last_change
        if not any(t >= max(since, step_ms) for t in ds):
            return False, f"partition {p} has not delivered to {m.name} yet", last_change
    for m in live:
        with m.lock:
            if not m.owned:
                return False, f"{m.name} owns nothing", last_change
    return True, "", last_change


def wait_stable(members, args, step_ms, what):
    """Waits until the group is stable (see group_state) and has been for SETTLE seconds;
    returns (ms when found stable, None) or (None, why not)."""
    deadline = time.time() + EVENT_TIMEOUT_S
    why = ""
    while time.time() < deadline:
        for m in members:
            with m.lock:
                if m.errors:
                    return None, f"{what}: {m.name} reported an error: {m.errors[0]}"
        ok, why, last_change = group_state(members, args.partitions, step_ms)
        if ok and now_ms() - max(last_change, step_ms) >= args.settle * 1000:
            return now_ms(), None
        time.sleep(0.1)
    return None, f"{what}: not stable within {EVENT_TIMEOUT_S} s ({why})"


def run_once(contender, run_no, round_no, topic, args, binaries, logdir):
    kind, protocol, assignor = CONTENDERS[contender]
    group = f"{topic}-group"
    rdir = os.path.join(logdir, f"{contender}-{run_no}")
    os.makedirs(rdir, exist_ok=True)
    failures = []
    metrics_notes = []
    steps = {}
    members = []
    t0 = now_ms()
    producer = Producer(args, topic, rdir)

    def spawn(i):
        m = Member(f"m{i}", member_argv(kind, protocol, assignor, group, topic, args, binaries), rdir,
                   reports_metrics=kind in METRICS_KINDS)
        members.append(m)
        return m

    def wait_ready(ms, what):
        deadline = time.time() + 90
        while time.time() < deadline:
            if all(m.ready is not None for m in ms):
                return True
            if any(m.errors or m.proc.poll() is not None for m in ms):
                break
            time.sleep(0.05)
        bad = [m.name + (f" ({m.errors[0]})" if m.errors else "") for m in ms if m.ready is None]
        failures.append(f"{what}: {', '.join(bad)} not ready")
        return False

    try:
        if not producer.first_ack.wait(90) or producer.error:
            failures.append(f"producer: {producer.error or 'no acknowledgement within 90 s'}")
            raise StopIteration
        # start: four members at once.
        first = [spawn(i) for i in range(4)]
        if not wait_ready(first, "start"):
            raise StopIteration
        plan = [
            ("start", lambda: max(m.ready for m in first)),
            ("join", None),
            ("close", None),
            ("kill", None),
        ]
        for step, _ in plan:
            if step == "start":
                e = max(m.ready for m in first)
            elif step == "join":
                joiner = spawn(4)
                if not wait_ready([joiner], "join"):
                    raise StopIteration
                e = joiner.ready
            elif step == "close":
                leaver = members[1]
                leaver.close()
                e = leaver.close_sent
            else:
                victim = members[2]
                victim.kill()
                e = victim.killed_at
            stable, why = wait_stable(members, args, e, step)
            steps[step] = {"at_ms": e, "stable_ms": stable}
            if why:
                failures.append(why)
                raise StopIteration
            silent = ask_metrics(members, step)
            if silent:
                metrics_notes.append(f"{step}: no metrics line from {', '.join(silent)} "
                                     f"within {METRICS_TIMEOUT_S} s")
            if step == "close":
                leaver.stop()
                if leaver.proc.returncode != 0:
                    failures.append(f"close: {leaver.name} exited with {leaver.proc.returncode}")
    except StopIteration:
        pass
    # The producer stops; what it had acknowledged must all be delivered.
    stop_ms = now_ms()
    producer.stop()
    if producer.error:
        failures.append(f"producer: {producer.error}")
    acked = dict(producer.acked)
    drained = False
    if not failures:
        deadline = time.time() + DRAIN_TIMEOUT_S
        while time.time() < deadline and not drained:
            time.sleep(0.25)
            drained = not missing_records(members, acked, limit=1)
    # The end state: every partition owned once by a live member.
    end_ms = now_ms()
    end_owners = {p: [] for p in range(args.partitions)}
    for m in members:
        if m.alive():
            with m.lock:
                for p in m.owned:
                    end_owners.setdefault(p, []).append(m.name)
    for m in members:
        m.stop()
    for m in members:
        if m.errors:
            failures.append(f"{m.name}: {m.errors[0]}")
        elif m.killed_at is None and m.proc.returncode != 0:
            failures.append(f"{m.name} exited with {m.proc.returncode}")
    bad_owners = {p: o for p, o in end_owners.items() if len(o) != 1}
    if bad_owners:
        failures.append("end: partitions not owned exactly once: " + ", ".join(
            f"{p} by {o or 'nobody'}" for p, o in sorted(bad_owners.items())[:8]))
    missing = missing_records(members, acked)
    if missing:
        failures.append(f"end: {len(missing)} acknowledged records never delivered, e.g. "
                        + ", ".join(f"seq {acked[k]} (partition {k[0]} offset {k[1]})"
                                    for k in missing[:5]))
    run = {
        "contender": contender, "run": run_no, "round": round_no, "topic": topic,
        "group": group, "t0_ms": t0, "producer_stop_ms": stop_ms, "end_ms": end_ms,
        "steps": steps,
        "produced": len(acked), "producer_failed": producer.failed,
        "members": [{"name": m.name, "role": role_of(m, members),
                     "events": m.events, "killed_ms": m.killed_at,
                     "close_ms": m.close_sent, "ended_ms": m.ended,
                     "warnings": m.warnings[:5], "warning_count": len(m.warnings),
                     "exit": m.proc.returncode, "metrics": m.metrics} for m in members],
        "acked": sorted([p, o] for (p, o) in acked),
        "failures": failures,
    }
    run["metrics_notes"] = metrics_notes + metrics_mismatches(run)
    for n in run["metrics_notes"]:
        log(f"WARNING: {contender} run {run_no}: metrics: {n}")
    return run


def ask_metrics(members, label):
    """Sends `metrics` to every live member that answers it and waits for the answers (the
    member answers between two polls, so every records line it printed before counts in
    its figures); returns the names of those that did not answer in time."""
    asked = []
    for m in members:
        if m.reports_metrics and m.alive() and m.close_sent is None:
            with m.lock:
                m.metrics_label = label
                asked.append((m, len(m.metrics)))
            m.send("metrics")
    deadline = time.time() + METRICS_TIMEOUT_S
    while time.time() < deadline:
        if all(len(m.metrics) > n or not m.alive() for m, n in asked):
            break
        time.sleep(0.05)
    return [m.name for m, n in asked if len(m.metrics) <= n]


def metrics_mismatches(run):
    """The cross-check of each `metrics` line: the records the member delivered before it
    (the records lines' `n`) against the client's `records_consumed_total`. Both count the
    records `poll` returned, on the thread that printed them, so they agree exactly (ours
    and Java's did in every line of the smoke runs of both contenders when this was
    written). Still a mismatch is a warning of the run, not a failure: it says a client's
    metric (or a member) miscounts, not that the group misbehaved, and the run's figures
    stand."""
    out = []
    for m in run["members"]:
        for snap in m.get("metrics") or []:
            total = snap.get("records_consumed_total")
            if total is not None and total != snap["delivered"]:
                out.append(f"{m['name']} at {snap['at']}: records_consumed_total {total:,} but "
                           f"{snap['delivered']:,} records delivered in its records lines")
    return out


def role_of(m, members):
    i = members.index(m)
    return {1: "closed", 2: "killed", 4: "joined"}.get(i, "stays")


def delivered_offsets(members):
    seen = {}
    for m in members:
        with m.lock:
            evs = [e for e in m.events if e["ev"] == "records"]
        for e in evs:
            s = seen.setdefault(tp_partition(e["tp"]), set())
            for a, b in e["ranges"]:
                s.update(range(a, b + 1))
    return seen


def missing_records(members, acked, limit=None):
    seen = delivered_offsets(members)
    out = []
    for k in sorted(acked):
        if k[1] not in seen.get(k[0], ()):
            out.append(k)
            if limit and len(out) >= limit:
                break
    return out


# ---------------------------------------------------------------------------- analysis

def intervals(run):
    """Ownership intervals: [(member index, partition, start ms, end ms)]; a member owns
    nothing once killed or ended."""
    out = []
    for i, m in enumerate(run["members"]):
        stop = min(x for x in (m["killed_ms"], m["ended_ms"], run["end_ms"]) if x is not None)
        open_ = {}
        for e in m["events"]:
            if e["ev"] == "assigned":
                for tp in e["parts"]:
                    open_.setdefault(tp_partition(tp), e["t"])
            elif e["ev"] in ("revoked", "lost"):
                for tp in e["parts"]:
                    s = open_.pop(tp_partition(tp), None)
                    if s is not None:
                        out.append((i, tp_partition(tp), s, min(e["t"], stop)))
        for p, s in open_.items():
            out.append((i, p, s, stop))
    return [iv for iv in out if iv[3] >= iv[2]]


def deliveries(run):
    """{(member, partition): [(ms, first record's timestamp), ...]} and
    {(partition, offset): [(ms, member), ...]}."""
    by_mp, by_rec = {}, {}
    for i, m in enumerate(run["members"]):
        for e in m["events"]:
            if e["ev"] != "records":
                continue
            p = tp_partition(e["tp"])
            by_mp.setdefault((i, p), []).append((e["t"], e.get("ts", -1)))
            for a, b in e["ranges"]:
                for o in range(a, b + 1):
                    by_rec.setdefault((p, o), []).append((e["t"], i))
    for v in by_mp.values():
        v.sort()
    return by_mp, by_rec


def analyse(run, partitions):
    ivs = intervals(run)
    by_mp, by_rec = deliveries(run)
    steps = run["steps"]

    def owner_at(p, t):
        return [iv for iv in ivs if iv[1] == p and iv[2] <= t < iv[3]]

    results = {}
    for step in STEPS:
        s = steps.get(step)
        if not s or s.get("stable_ms") is None:
            continue
        e, w = s["at_ms"], s["stable_ms"]
        conv, ready_at = 0.0, {}
        final = {}
        for p in range(partitions):
            own = owner_at(p, w)
            if len(own) != 1:
                conv = None
                break
            i, _, start, _ = own[0]
            final[p] = i
            first = next((t for t, _ in by_mp.get((i, p), []) if t >= max(start, e)), None)
            if first is None:
                conv = None
                break
            ready_at[p] = first
            conv = max(conv, first - e)
        kept, gap, gap_p, stall, stall_p = 0, None, None, None, None
        if conv is not None:
            for p, i in final.items():
                before = owner_at(p, e - 0.001) if step != "start" else []
                if not before or [iv[0] for iv in before] != [i]:
                    continue
                kept += 1
                ts = by_mp.get((i, p), [])
                prev = [d for d in ts if d[0] < e]
                span = [d for d in ts if e <= d[0] <= e + conv]
                after = [d for d in ts if d[0] > e + conv][:1]
                seq = prev[-1:] + span + after
                for (a, _), (b, b_ts) in zip(seq, seq[1:]):
                    if gap is None or b - a > gap:
                        gap, gap_p = b - a, p
                    # Records waiting: from when the next delivered record existed (its
                    # timestamp, CreateTime on the producer's clock, this machine's) or the
                    # previous delivery, whichever is later, to its delivery.
                    waited = b - max(a, b_ts) if b_ts >= 0 else b - a
                    if stall is None or waited > stall:
                        stall, stall_p = waited, p
        results[step] = {"at_ms": e, "stable_ms": w,
                         "convergence_ms": None if conv is None else round(conv),
                         "kept": kept if conv is not None else None,
                         "max_gap_ms": None if gap is None else round(gap),
                         "max_gap_partition": gap_p,
                         "max_stall_ms": None if stall is None else round(max(stall, 0)),
                         "max_stall_partition": stall_p, "duplicates": 0}
    # Duplicates, by the step during which the repeat came.
    starts = sorted((steps[s]["at_ms"], s) for s in STEPS if s in steps)
    killed = next((i for i, m in enumerate(run["members"]) if m["killed_ms"]), None)
    last_commit = {}
    if killed is not None:
        km = run["members"][killed]
        for e in km["events"]:
            if e["ev"] == "committed" and e["t"] <= km["killed_ms"]:
                for tp, o in e["offsets"].items():
                    last_commit[tp_partition(tp)] = o
    dup_total, dup_by_step, dup_uncommitted = 0, {}, 0
    for (p, o), ds in by_rec.items():
        if len(ds) < 2:
            continue
        ds.sort()
        for t, _ in ds[1:]:
            dup_total += 1
            step = "start"
            for st, name in starts:
                if t >= st:
                    step = name
            dup_by_step[step] = dup_by_step.get(step, 0) + 1
            if (step == "kill" and ds[0][1] == killed and o >= last_commit.get(p, 0)):
                dup_uncommitted += 1
    for step, n in dup_by_step.items():
        if step in results:
            results[step]["duplicates"] = n
    if "kill" in results:
        results["kill"]["duplicates_uncommitted_by_killed"] = dup_uncommitted
    # Two members owning a partition at once (informational; a killed member owns nothing).
    overlap_ms = 0.0
    for p in range(partitions):
        pv = sorted((iv for iv in ivs if iv[1] == p), key=lambda iv: iv[2])
        for a, b in zip(pv, pv[1:]):
            if b[2] < a[3] and a[0] != b[0]:
                overlap_ms += min(a[3], b[3]) - b[2]
    delivered = sum(1 for _ in by_rec)
    return {"steps": results, "duplicates": dup_total, "distinct_delivered": delivered,
            "overlap_ms": round(overlap_ms), "ok": not run["failures"]}


def timeline(run):
    """What the pictures need, in little space (relative ms, 250 ms buckets): ownership
    intervals [member, partition, start, end], delivered buckets [member, partition,
    [bucket, ...]], buckets with repeated deliveries [partition, bucket]."""
    t0 = run["steps"].get("start", {}).get("at_ms", run["t0_ms"]) - 1000
    by_mp, by_rec = deliveries(run)
    rep = set()
    for (p, _), ds in by_rec.items():
        for t, _ in sorted(ds)[1:]:
            rep.add((p, int((t - t0) // BUCKET_MS)))
    return {
        "t0_ms": t0, "end_ms": run["end_ms"],
        "intervals": [[i, p, round(s - t0), round(e - t0)] for i, p, s, e in intervals(run)],
        "delivered": [[i, p, sorted({int((t - t0) // BUCKET_MS) for t, _ in ts if t >= t0})]
                      for (i, p), ts in sorted(by_mp.items())],
        "repeated": sorted([p, b] for p, b in rep),
    }


def compact(run):
    """The run as rebalance.json keeps it: the members' output replaced by the timeline
    (the raw output stays in the log directory)."""
    run["timeline"] = timeline(run)
    for m in run["members"]:
        evs = m.pop("events")
        m["ready_ms"] = next((e["t"] for e in evs if e["ev"] == "ready"), None)
        m["ownership_events"] = sum(1 for e in evs if e["ev"] in ("assigned", "revoked", "lost"))
    run.pop("acked", None)
    return run


# ---------------------------------------------------------------------------- report

def summary(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def fmt(s, unit="", digits=0):
    if s is None:
        return "–"
    f = f",.{digits}f"
    if s["n"] == 1 or s["min"] == s["max"]:
        return f"{s['median']:{f}}{unit}" + (f" (n={s['n']})" if s["n"] > 1 else "")
    return f"{s['median']:{f}}{unit} [{s['min']:{f}}–{s['max']:{f}}]"


def stats(data):
    out = {}
    contenders = list(dict.fromkeys(r["contender"] for r in data["runs"]))
    for c in contenders:
        rs = [r for r in data["runs"] if r["contender"] == c]
        out[c] = {"runs": len(rs), "failed": sum(1 for r in rs if r["failures"])}
        for step in STEPS:
            a = [r["analysis"]["steps"].get(step) for r in rs]
            a = [x for x in a if x]
            out[c][step] = {
                "convergence": summary([x["convergence_ms"] for x in a]),
                "gap": summary([x["max_gap_ms"] for x in a]),
                "stall": summary([x.get("max_stall_ms") for x in a]),
                "kept": summary([x["kept"] for x in a]),
                "duplicates": summary([x["duplicates"] for x in a]),
                "dups_uncommitted": summary([x.get("duplicates_uncommitted_by_killed")
                                             for x in a]),
                "converged": sum(1 for x in a if x["convergence_ms"] is not None),
            }
    return contenders, out


STEP_TITLES = {
    "start": "start: 4 members form the group (from the last `ready`)",
    "join": "join: a 5th member joins (from its `ready`)",
    "close": "close: a member leaves with `close` (from the command)",
    "kill": "kill: a member is killed with SIGKILL (from the kill; the session timeout, 6 s, "
            "is in the figure)",
}


def report_tables(data, contenders, st):
    lines = []
    for step in STEPS:
        lines.append(f"### {STEP_TITLES[step]}")
        lines.append("")
        kill = step == "kill"
        lines.append("| contender | convergence ms | kept partitions: longest delivery gap ms | "
                     "kept: longest stall ms (records waiting) | "
                     "duplicates" + (" (uncommitted by the killed member)" if kill else "")
                     + " | converged / runs |")
        lines.append("|---|---|---|---|---|---|")
        for c in contenders:
            s = st[c][step]
            kept = s["kept"]
            kept_txt = "–" if kept is None else (f"{kept['median']:.0f}" if kept["min"] == kept["max"]
                                                 else f"{kept['min']:.0f}–{kept['max']:.0f}")
            gap = (fmt(s["gap"]) + f" ({kept_txt} kept)") if s["gap"] else f"– ({kept_txt} kept)"
            dups = fmt(s["duplicates"])
            if kill and s["dups_uncommitted"]:
                dups += f" ({fmt(s['dups_uncommitted'])})"
            lines.append(f"| {c} | {fmt(s['convergence'])} | {gap} | {fmt(s['stall'])} | {dups} | "
                         f"{s['converged']} / {st[c]['runs']} |")
        lines.append("")
    lines.append("### Convergence, ours / peer on the same protocol (medians; < 1: ours faster)")
    lines.append("")
    lines.append("| pair | " + " | ".join(STEPS) + " |")
    lines.append("|---|" + "---|" * len(STEPS))
    for a, b in RATIO_PAIRS:
        if a not in st or b not in st:
            continue
        cells = []
        for step in STEPS:
            x, y = st[a][step]["convergence"], st[b][step]["convergence"]
            cells.append(f"{x['median'] / y['median']:.2f}" if x and y and y["median"] else "–")
        lines.append(f"| {a} / {b} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def step_metrics(run):
    """What the members' `metrics` lines say about each step: per step, for each member that
    answered after the step converged, the change since its previous line (its first one:
    since it started) of rebalance_total, rebalance_latency_total_ms and
    failed_rebalance_total, and its last_rebalance_latency_ms and commit_latency_avg_ms."""
    out = {}
    for m in run["members"]:
        prev = {}
        for snap in m.get("metrics") or []:
            if snap.get("at") in STEPS:
                def delta(k):
                    v = snap.get(k)
                    return None if v is None else v - (prev.get(k) or 0)
                out.setdefault(snap["at"], []).append({
                    "member": m["name"],
                    "rebalances": delta("rebalance_total"),
                    "latency_total_ms": delta("rebalance_latency_total_ms"),
                    "failed": delta("failed_rebalance_total"),
                    "last_latency_ms": snap.get("last_rebalance_latency_ms"),
                    "commit_latency_avg_ms": snap.get("commit_latency_avg_ms"),
                })
            prev = snap
    return out


def report_metrics(data, contenders, st):
    """The tables of what the clients measure themselves (their `metrics` lines)."""
    lines = ["### As the clients measure themselves (`metrics()`)", "",
             "From each live member's `metrics` line once the step had converged (ours: "
             "`Consumer::metrics`; Java: `consumer.metrics()`; librdkafka's member prints none), "
             "as the change since the member's previous line: **rebalances per member** "
             "(`rebalance-total`, min–max over the members and runs); **time in rebalances** "
             "(`rebalance-latency-total`: the longest any member spent in the step's "
             "rebalances, median [min–max] over the runs), ours also **last rebalance** "
             "(`last-rebalance-latency`, the longest over the members); the **convergence** "
             "measured from the JSON lines, for comparison; **failed rebalances** "
             "(`failed-rebalance-total`, all members and runs); **commit latency** "
             "(`commit-latency-avg` over the client's window, about the last minute, median "
             "over the members, then over the runs). A client's rebalance starts when it "
             "hears of one (its next heartbeat) and ends when its new assignment is in hand, "
             "before any record of it is fetched; the convergence starts at the step and ends "
             "at the last partition's first delivery to its final owner. Records: the records "
             "lines' `n` summed against `records-consumed-total` at each `metrics` line.", ""]
    without = []
    for c in contenders:
        rs = [r for r in data["runs"] if r["contender"] == c]
        per_run = [step_metrics(r) for r in rs]
        snaps = [snap for r in rs for m in r["members"] for snap in m.get("metrics") or []]
        if not snaps:
            without.append(c)
            continue
        ours = CONTENDERS.get(c, ("",))[0] == "ours"
        lines.append(f"**{c}**")
        lines.append("")
        lines.append("| step | rebalances per member | time in rebalances ms"
                     + (" | last rebalance ms" if ours else "")
                     + " | convergence ms (JSON lines) | failed rebalances | "
                     "commit latency avg ms |")
        lines.append("|---|---|---|" + ("---|" if ours else "") + "---|---|---|")
        for step in STEPS:
            ms = [sm.get(step, []) for sm in per_run]
            counts = [x["rebalances"] for m in ms for x in m if x["rebalances"] is not None]
            reb = "–" if not counts else (f"{min(counts)}" if min(counts) == max(counts)
                                          else f"{min(counts)}–{max(counts)}")

            def worst(m, key):
                v = [x[key] for x in m if x[key] is not None and x["rebalances"]]
                return max(v) if v else None

            lat = summary([worst(m, "latency_total_ms") for m in ms])
            last = summary([worst(m, "last_latency_ms") for m in ms])
            failed = [x["failed"] for m in ms for x in m if x["failed"] is not None]
            commit = summary([statistics.median(v) if v else None for v in
                              ([x["commit_latency_avg_ms"] for x in m
                                if x["commit_latency_avg_ms"] is not None] for m in ms)])
            lines.append(f"| {step} | {reb} | {fmt(lat, digits=1)}"
                         + (f" | {fmt(last, digits=1)}" if ours else "")
                         + f" | {fmt(st[c][step]['convergence'])} | "
                         f"{sum(failed) if failed else '–'} | {fmt(commit, digits=1)} |")
        checked = [snap for snap in snaps if snap.get("records_consumed_total") is not None]
        bad = [snap for snap in checked if snap["records_consumed_total"] != snap["delivered"]]
        lines.append("")
        lines.append(f"Records delivered (records lines) = `records-consumed-total` in "
                     f"{len(checked) - len(bad)} of {len(checked)} `metrics` lines"
                     + (" (**mismatches**: see the Runs table)." if bad else "."))
        lines.append("")
    if without:
        lines.append("No `metrics` lines (–) from " + ", ".join(f"`{c}`" for c in without)
                     + ": librdkafka's member does not print them, and runs before the "
                       "members had the `metrics` command have none.")
        lines.append("")
    return lines


def report_runs(data):
    lines = ["| contender | run | produced | delivered (distinct) | duplicates | "
             "overlap ms | warnings | result |", "|---|---|---|---|---|---|---|---|"]
    for r in data["runs"]:
        a = r["analysis"]
        res = "ok" if not r["failures"] else "**FAILED**: " + "; ".join(r["failures"])
        if r.get("metrics_notes"):
            res += "; metrics: " + "; ".join(r["metrics_notes"])
        lines.append(f"| {r['contender']} | {r['run']} | {r['produced']:,} | "
                     f"{a['distinct_delivered']:,} | {a['duplicates']:,} | {a['overlap_ms']:,} | "
                     f"{sum(m.get('warning_count', 0) for m in r['members'])} | {escape(res)} |")
    return lines


# The README's rebalance table: its rows in this order, under these names.
README_ROWS = [
    ("ours-eager", "ours, classic eager (`range`)"),
    ("ours-cooperative", "ours, `cooperative-sticky`"),
    ("java-cooperative", "Java, `cooperative-sticky`"),
    ("rdkafka-cooperative", "{rdkafka}, `cooperative-sticky`"),
    ("ours-consumer", "ours, `group.protocol=consumer`"),
    ("java-consumer", "Java, `group.protocol=consumer`"),
    ("rdkafka-consumer", "{rdkafka}, `group.protocol=consumer`"),
]
README_WIDTH = 92


def readme_block(data, st):
    """The text of README.md's `bench:rebalance` block: the paragraph, the table and the
    ratios, from the results."""
    meta = data["meta"]
    runs = meta["runs_per_contender"]
    rdk = "librdkafka"
    for c, d in meta["contenders"].items():
        m = re.search(r"\(librdkafka ([^)]+)\)", d)
        if c.startswith("rdkafka") and m:
            rdk = f"librdkafka {m.group(1)}"
    la = meta["loadavg_1m"]
    lo, hi = sorted((round(la["start"]), round(la["end"])))
    load = f"{lo}" if lo == hi else f"{lo}-{hi}"
    wait = meta.get("fetch_max_wait_ms", FETCH_MAX_WAIT_MS)
    session = meta.get("classic", CLASSIC)["session_timeout_ms"] / 1000
    intro = (
        "Rebalances (`bash scripts/bench.sh --rebalance`; method in "
        "[`benches/README.md`](benches/README.md#rebalances), all tables and a timeline per "
        "contender in [`benches/results/rebalance.md`](benches/results/rebalance.md)): a "
        f"{meta['partitions']}-partition topic, a producer writing {meta['rate']:,.0f} "
        "sequence-numbered records/s, a group of 4 member processes; a 5th joins, one leaves "
        f"with `close`, one is killed; {runs} interleaved run{'s' if runs != 1 else ''} per "
        f"contender, on the {meta['nproc']}-core machine at a load average of {load} (1 min, "
        "at the start and the end). Convergence is from the step (the joiner's `ready`, the "
        "`close`, the kill) until every partition is owned once and delivering, median "
        "[min–max] ms; the stall is the longest time a partition that kept its owner had a "
        "record waiting and got nothing (median of the join step / worst of all steps and "
        f"runs; **bold**: a median over `fetch.max.wait.ms`, {wait:,} ms); duplicates are "
        "records delivered twice, all members committing in their revoke callback:")
    out = textwrap.wrap(intro, README_WIDTH, break_long_words=False, break_on_hyphens=False)
    out.append("")
    out.append(f"| contender | join | close | kill ({session:g} s session timeout included) | "
               "kept partitions: stall ms | duplicates: join+close, all runs / kill, median | "
               "failed runs |")
    out.append("|---|---|---|---|---|---|---|")
    for c, label in README_ROWS:
        if c not in st:
            continue
        rs = [r for r in data["runs"] if r["contender"] == c]
        s = st[c]
        stall = s["join"]["stall"]
        stall_txt = fmt(None if stall is None else {**stall, "n": 1})
        if stall is not None and stall["median"] > wait:
            stall_txt = f"**{stall_txt}**"
        worst = [s[step]["stall"]["max"] for step in STEPS if s[step]["stall"]]
        dups = sum(r["analysis"]["steps"].get(step, {}).get("duplicates", 0)
                   for r in rs for step in ("join", "close"))
        kill_dups = s["kill"]["duplicates"]
        kill_dups = "–" if kill_dups is None else f"{kill_dups['median']:,.0f}"
        worst = f"{max(worst):,.0f}" if worst else "–"
        out.append(f"| {label.format(rdkafka=rdk)} | {fmt(s['join']['convergence'])} | "
                   f"{fmt(s['close']['convergence'])} | {fmt(s['kill']['convergence'])} | "
                   f"{stall_txt} / {worst} | {dups:,} / {kill_dups} | "
                   f"{s['failed']} of {s['runs']} |")
    out.append("")

    def ratios(a, b, labels):
        """The ratios of the join, close and kill medians, `**bold**` where ours is slower
        (consecutive ones in one span), or None."""
        if a not in st or b not in st:
            return None
        cells = []
        for step in ("join", "close", "kill"):
            x, y = st[a][step]["convergence"], st[b][step]["convergence"]
            r = f"{x['median'] / y['median']:.2f}" if x and y and y["median"] else "–"
            cells.append((r + (f" ({step})" if labels else ""), r != "–" and float(r) > 1))
        text, k = [], 0
        while k < len(cells):
            j = k
            while cells[k][1] and j + 1 < len(cells) and cells[j + 1][1]:
                j += 1
            span = ", ".join(c for c, _ in cells[k:j + 1])
            text.append(f"**{span}**" if cells[k][1] else span)
            k = j + 1
        return ", ".join(text)

    parts = []
    for peer, head in (("java", "Ours / Java on the same protocol (median convergence): "),
                       ("rdkafka", "Ours / librdkafka: ")):
        groups = []
        for proto, name in (("cooperative", "cooperative-sticky"), ("consumer", "consumer protocol")):
            r = ratios(f"ours-{proto}", f"{peer}-{proto}", labels=not parts and not groups)
            if r:
                groups.append(f"{name} {r}")
        if groups:
            parts.append(head + "; ".join(groups) + ".")
    if parts:
        out.extend(textwrap.wrap(" ".join(parts), README_WIDTH, initial_indent="- ",
                                 subsequent_indent="  ", break_long_words=False,
                                 break_on_hyphens=False))
    return "\n".join(out) + "\n"


def write_report(out_dir, data):
    contenders, st = stats(data)
    meta = data["meta"]
    md = ["# Rebalances side by side", ""]
    md.append(f"`bash scripts/bench.sh --rebalance{' --smoke' if meta['smoke'] else ''}`, "
              f"{meta['date_utc']}, commit {meta['git_commit']}"
              + (" (with uncommitted changes in src/)" if meta.get("git_src_modified_files") else "")
              + f"; {meta['nproc']} cores ({meta['cpu_model']}), Kafka {meta['kafka_version']} "
              f"(one local broker, scripts/broker.sh); {meta['runs_per_contender']} run(s) per "
              f"contender, interleaved; took {meta['duration_s'] / 60:.0f} min; load average "
              f"(1 min) {meta['loadavg_1m']['start']:.1f} at the start, "
              f"{meta['loadavg_1m']['end']:.1f} at the end.")
    md.append("")
    for n in meta.get("notes") or []:
        md.append(f"Note: {n}")
        md.append("")
    md.append(f"Each run: a fresh topic of {meta['partitions']} partitions, a producer writing "
              f"{meta['rate']:,.0f} sequence-numbered records/s (acks=all) throughout; 4 members "
              "(each a process) form a group, a 5th joins, member 1 leaves with `close`, member "
              "2 is killed; each step waits until the group is stable (every partition owned once "
              f"and delivering, no change for {meta['settle_s']} s). Every member commits the "
              "consumed offsets of revoked partitions in its revoke callback (synchronously) "
              f"and all it consumed every {COMMIT_EVERY_MS} ms. Classic contenders: "
              f"`session.timeout.ms={CLASSIC['session_timeout_ms']}`, "
              f"`heartbeat.interval.ms={CLASSIC['heartbeat_ms']}`; consumer protocol: the "
              "broker's `group.consumer.session.timeout.ms=6000`, "
              "`group.consumer.heartbeat.interval.ms=500`, its default assignor (uniform). "
              f"`fetch.max.wait.ms={FETCH_MAX_WAIT_MS}`, `fetch.min.bytes=1`, "
              "`auto.offset.reset=earliest` for all. Medians [min–max] over the runs; method "
              "and definitions in [`benches/README.md`](../README.md#rebalances).")
    md.append("")
    md.append("Contenders: " + "; ".join(
        f"`{c}`: {meta['contenders'][c]}" for c in contenders) + ".")
    md.append("")
    md.extend(report_tables(data, contenders, st))
    md.extend(report_metrics(data, contenders, st))
    md.append("### Runs")
    md.append("")
    md.extend(report_runs(data))
    md.append("")
    md.append("Timelines (every run of a contender, one panel each): " + ", ".join(
        f"[{c}](rebalance-{c}.svg)" for c in contenders) + ".")
    md.append("")
    text = "\n".join(md)
    with open(os.path.join(out_dir, "rebalance.md"), "w") as f:
        f.write(text)
    for c in contenders:
        with open(os.path.join(out_dir, f"rebalance-{c}.svg"), "w") as f:
            f.write(svg(c, [r for r in data["runs"] if r["contender"] == c], data["meta"]))
    print("\n".join(report_tables(data, contenders, st)))
    if publishes(out_dir) and not meta["smoke"]:
        err = replace_block("rebalance", readme_block(data, st))
        print(f"rebalance: README.md: {err}" if err else
              "rebalance: README.md's bench:rebalance block follows these results",
              file=sys.stderr)
    failed = [r for r in data["runs"] if r["failures"]]
    for r in failed:
        print(f"FAILED: {r['contender']} run {r['run']}: {'; '.join(r['failures'])}")
    return len(failed)


def svg(contender, runs, meta):
    """Per run a panel: a row per partition, coloured by owner (pale: owned, full: records
    delivered in that 250 ms), red ticks for repeated deliveries, the steps as lines."""
    parts = meta["partitions"]
    row = 5 if parts > 16 else 10
    left, width = 60, 900
    panel_h = parts * row + 40
    height = 50 + len(runs) * (panel_h + 20) + 20
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 20}" height="{height}" '
         'font-family="sans-serif" font-size="11">',
         f'<rect width="100%" height="100%" fill="white"/>',
         f'<text x="{left}" y="18" font-size="14" font-weight="bold">{escape(contender)}: '
         f'{parts} partitions, {meta["rate"]:,.0f} records/s</text>']
    lx = left
    for i, name in enumerate(["m0", "m1 (closed)", "m2 (killed)", "m3", "m4 (joins)"]):
        o.append(f'<rect x="{lx}" y="28" width="10" height="10" fill="{MEMBER_COLORS[i]}"/>'
                 f'<text x="{lx + 14}" y="37">{name}</text>')
        lx += 95
    o.append(f'<rect x="{lx}" y="28" width="10" height="10" fill="#d62728"/>'
             f'<text x="{lx + 14}" y="37">delivered again</text>')
    o.append(f'<rect x="{lx + 120}" y="28" width="10" height="10" fill="#fff3b0"/>'
             f'<text x="{lx + 134}" y="37">until converged</text>')
    y0 = 50
    for r in runs:
        a = r["analysis"]
        tl = r["timeline"]
        t_start = tl["t0_ms"]
        t_end = tl["end_ms"]
        span = max(t_end - t_start, 1)

        def x(t):
            return left + (t - t_start) / span * width

        title = f"run {r['run']}" + ("" if not r["failures"] else " — FAILED: " + "; ".join(r["failures"]))
        o.append(f'<text x="{left}" y="{y0 + 12}" font-weight="bold">{escape(title[:160])}</text>')
        top = y0 + 20
        for step in STEPS:
            s = a["steps"].get(step)
            if s and s["convergence_ms"] is not None:
                o.append(f'<rect x="{x(s["at_ms"]):.1f}" y="{top}" '
                         f'width="{max(s["convergence_ms"] / span * width, 1):.1f}" '
                         f'height="{parts * row}" fill="#fff3b0"/>')
        for i, p, s, e in tl["intervals"]:
            s, e = t_start + s, t_start + e
            o.append(f'<rect x="{x(s):.1f}" y="{top + p * row}" width="{max(x(e) - x(s), 0.5):.1f}" '
                     f'height="{row - 1}" fill="{MEMBER_COLORS[i % 5]}" fill-opacity="0.3"/>')
        bw = BUCKET_MS / span * width
        for i, p, buckets in tl["delivered"]:
            # Runs of consecutive buckets as one rectangle.
            k = 0
            while k < len(buckets):
                j = k
                while j + 1 < len(buckets) and buckets[j + 1] == buckets[j] + 1:
                    j += 1
                o.append(f'<rect x="{x(t_start + buckets[k] * BUCKET_MS):.1f}" y="{top + p * row}" '
                         f'width="{(j - k + 1) * bw:.1f}" height="{row - 1}" '
                         f'fill="{MEMBER_COLORS[i % 5]}"/>')
                k = j + 1
        for p, b in tl["repeated"]:
            o.append(f'<rect x="{x(t_start + b * BUCKET_MS):.1f}" y="{top + p * row}" '
                     f'width="{BUCKET_MS / span * width:.1f}" height="{row - 1}" fill="#d62728"/>')
        for step in STEPS:
            s = r["steps"].get(step)
            if not s:
                continue
            xx = x(s["at_ms"])
            conv = a["steps"].get(step, {}).get("convergence_ms")
            label = step + (f" {conv / 1000:.2f} s" if conv is not None else " (not converged)")
            o.append(f'<line x1="{xx:.1f}" y1="{top - 2}" x2="{xx:.1f}" y2="{top + parts * row}" '
                     'stroke="black" stroke-dasharray="3,2"/>')
            o.append(f'<text x="{xx + 2:.1f}" y="{top + parts * row + 12}">{escape(label)}</text>')
        o.append(f'<text x="{left - 4}" y="{top + row}" text-anchor="end">p0</text>')
        o.append(f'<text x="{left - 4}" y="{top + parts * row}" text-anchor="end">p{parts - 1}</text>')
        secs = int(span // 1000)
        step_s = 5 if secs > 20 else 2
        for sec in range(0, secs + 1, step_s):
            xx = x(t_start + sec * 1000)
            o.append(f'<text x="{xx:.1f}" y="{top + parts * row + 26}" fill="#666" '
                     f'text-anchor="middle">{sec} s</text>')
        y0 += panel_h + 20
    o.append("</svg>")
    return "\n".join(o) + "\n"


# ---------------------------------------------------------------------------- main

def loadavg_1m():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def private_copy(src, tmpdir, name):
    dst = os.path.join(tmpdir, name)
    shutil.copy2(src, dst)
    return dst


def create_topics(args, topics):
    p = subprocess.run(["java", JAVA_LOG, "-cp", f"{args.java_classes}:{args.libs}/*", "TestAdmin",
                        "create-topics", "--bootstrap", args.bootstrap, "--topics",
                        ",".join(topics), "--partitions", str(args.partitions)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"creating the topics failed:\n{p.stdout}\n{p.stderr}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report-only", metavar="OUT")
    ap.add_argument("--bootstrap")
    ap.add_argument("--libs", help="the Kafka jars (scripts/broker.sh libs)")
    ap.add_argument("--java-classes", help="GroupMember, SeqProducer and TestAdmin, compiled")
    ap.add_argument("--out", default=os.path.join(ROOT, "benches/results"))
    ap.add_argument("--logdir", default=os.path.join(ROOT, "target/bench-logs/rebalance"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--partitions", type=int, default=32)
    ap.add_argument("--rate", type=float, default=640)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--kafka-version")
    ap.add_argument("--note", action="append", default=[])
    args = ap.parse_args()
    if args.report_only:
        with open(os.path.join(args.report_only, "rebalance.json")) as f:
            data = json.load(f)
        return 1 if write_report(args.report_only, data) else 0

    contenders = [c for c in args.contenders.split(",") if c]
    unknown = [c for c in contenders if c not in CONTENDERS]
    if unknown:
        ap.error(f"unknown contenders {unknown}; known: {', '.join(CONTENDERS)}")
    session = time.strftime("%H%M%S")
    logdir = os.path.join(args.logdir, session)
    os.makedirs(logdir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    binaries = {}
    kinds = {CONTENDERS[c][0] for c in contenders}
    if "ours" in kinds:
        binaries["ours"] = private_copy(os.path.join(ROOT, "target/release/examples/group_member"),
                                        logdir, "group_member")
    if "rdkafka" in kinds:
        binaries["rdkafka"] = private_copy(
            os.path.join(ROOT, "benches/rdkafka/target/release/rdkafka-group-member"),
            logdir, "rdkafka-group-member")
    started = time.time()
    load_start = loadavg_1m()
    plan = []
    for r in range(args.runs):
        order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
        for c in order:
            plan.append((c, r + 1, r + 1, f"rebal-{session}-{c}-{r + 1}"))
    log(f"creating {len(plan)} topics of {args.partitions} partitions")
    create_topics(args, [p[3] for p in plan])
    runs = []
    for n, (c, run_no, round_no, topic) in enumerate(plan, 1):
        t = time.time()
        log(f"[{n}/{len(plan)}] {c} run {run_no}")
        run = run_once(c, run_no, round_no, topic, args, binaries, logdir)
        run["analysis"] = analyse(run, args.partitions)
        runs.append(compact(run))
        conv = ", ".join(f"{s} {v['convergence_ms']} ms" for s, v in run["analysis"]["steps"].items())
        log(f"[{n}/{len(plan)}] {c} run {run_no}: {time.time() - t:.0f} s; convergence {conv}; "
            f"duplicates {run['analysis']['duplicates']}"
            + ("" if not run["failures"] else f"; FAILED: {'; '.join(run['failures'])}"))
    dirty = sh(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock"])
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), None)
    rdk_version = None
    if "rdkafka" in kinds:
        v = sh([os.path.join(ROOT, "benches/rdkafka/target/release/rdkafka-perf-consume"),
                "--version"])
        try:
            rdk_version = json.loads(v)["librdkafka"]
        except (TypeError, ValueError, KeyError):
            rdk_version = None
    clients = sorted(f for f in os.listdir(args.libs) if f.startswith("kafka-clients-"))
    descs = {}
    for c in contenders:
        kind, protocol, assignor = CONTENDERS[c]
        d = DESCRIPTIONS[kind]
        if kind == "rdkafka" and rdk_version:
            d += f" (librdkafka {rdk_version})"
        if kind == "java" and clients:
            d += f" (kafka-clients {clients[0].removesuffix('.jar').removeprefix('kafka-clients-')})"
        d += (f", `group.protocol=classic`, `partition.assignment.strategy={assignor}`"
              if protocol == "classic" else ", `group.protocol=consumer`")
        descs[c] = d
    meta = {
        "smoke": args.smoke, "date_utc": datetime.datetime.now(datetime.timezone.utc)
        .strftime("%Y-%m-%d %H:%M UTC"),
        "git_commit": sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
        "git_src_modified_files": len(dirty.splitlines()) if dirty else 0,
        "nproc": os.cpu_count(), "cpu_model": cpu, "kernel": platform.release(),
        "kafka_version": args.kafka_version, "bootstrap": args.bootstrap,
        "partitions": args.partitions, "rate": args.rate, "settle_s": args.settle,
        "runs_per_contender": args.runs, "contenders": descs,
        "classic": CLASSIC, "fetch_max_wait_ms": FETCH_MAX_WAIT_MS,
        "commit_every_ms": COMMIT_EVERY_MS, "notes": args.note,
        "duration_s": round(time.time() - started),
        "loadavg_1m": {"start": load_start, "end": loadavg_1m()},
    }
    data = {"meta": meta, "runs": runs}
    with open(os.path.join(args.out, "rebalance.json"), "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    failed = write_report(args.out, data)
    log(f"done in {meta['duration_s'] / 60:.1f} min; {len(runs) - failed} of {len(runs)} runs ok; "
        f"results in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
