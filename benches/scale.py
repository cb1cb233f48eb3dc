#!/usr/bin/env python3
"""Scale benchmark driver: `bash scripts/bench.sh --scale [--smoke]` (standard library only;
see benches/README.md, section "Scale").

One consumer given every partition of a topic of 1,000 / 5,000 / 10,000 partitions that hold
a few records each, while a steady producer writes a little: ours (examples/perf_scale.rs)
and the Java KafkaConsumer (scripts/java/ScaleConsumer.java), each by assign, by a classic
subscribe and by a KIP-848 subscribe, on the same topic, as separate processes one after
the other. Then a group of 50 of our members (threads of examples/perf_group.rs) joins and
25 leave, with each group protocol. Results: OUT/scale.json (every run's figures) and
OUT/scale.md (the tables, also printed).

The broker is a scripts/broker.sh broker of its own (plaintext only), sized for many
partitions (small index preallocation, a larger heap); its data is kept between runs
(KAFKA_KEEP_DATA=1), so the topics are made only once. --smoke: one 200-partition topic,
ours only, one run of each mode, a 10-member group, fresh broker storage; fails if any run
fails. Settings are overridable through the environment (see ENV below and the header of
scripts/bench.sh). `python3 benches/scale.py --report DIR` rewrites DIR/scale.md from
DIR/scale.json.
"""

import argparse
import datetime
import json
import os
import platform
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (helpers: java_cmd, proc_cpu_s, loadavg_1m, ...)
from report import fmt, summary  # noqa: E402
import readme_block as readme_block_mod  # noqa: E402

ROOT = bench.ROOT
PERF_SCALE = os.path.join(ROOT, "target/release/examples/perf_scale")
PERF_GROUP = os.path.join(ROOT, "target/release/examples/perf_group")

# Defaults of the full run and of the smoke run; every one can be set through the
# environment variable named in ENV.
FULL = {
    "partitions": "1000,5000,10000", "per_partition": 10, "record_bytes": 100,
    "steady_rate": 20, "runs": 3, "impls": "ours,java", "modes": "assign,classic,consumer",
    "idle_secs": 10, "settle_secs": 2, "timeout_secs": 120,
    "group_partitions": 1000, "group_members": 50, "group_leave": 25,
    "group_protocols": "classic,consumer", "group_idle_secs": 5, "group_heartbeat_ms": 500,
    "simulate": 1,
    "port": 29700, "run_dir": "target/kafka/scale", "heap": "-Xms1g -Xmx2g",
    "out": "benches/results",
}
SMOKE = {
    **FULL, "partitions": "200", "per_partition": 5, "runs": 1, "impls": "ours",
    "idle_secs": 2, "settle_secs": 1, "timeout_secs": 60,
    "group_partitions": 200, "group_members": 10, "group_leave": 5, "group_idle_secs": 1,
    "simulate": 0,
    "port": 29710, "run_dir": "target/kafka/scale-smoke", "heap": "-Xms256m -Xmx1g",
    "out": "target/bench-smoke",
}
ENV = {
    "partitions": "SCALE_PARTITIONS",          # comma-separated partition counts, one topic each
    "per_partition": "SCALE_PER_PARTITION",    # records written to each partition beforehand
    "record_bytes": "SCALE_RECORD_BYTES",      # their value size
    "steady_rate": "SCALE_STEADY_RATE",        # records/s of the steady producer (round robin)
    "runs": "SCALE_RUNS",                      # rounds (every client and mode once per round)
    "impls": "SCALE_IMPLS",                    # ours,java
    "modes": "SCALE_MODES",                    # assign,classic,consumer
    "idle_secs": "SCALE_IDLE_SECS",            # idle window once caught up
    "settle_secs": "SCALE_SETTLE_SECS",        # polling between caught up and the idle window
    "timeout_secs": "SCALE_TIMEOUT_SECS",      # a run fails if not caught up by then
    "group_partitions": "SCALE_GROUP_PARTITIONS",  # the group's topic (0: no group runs)
    "group_members": "SCALE_GROUP_MEMBERS",
    "group_leave": "SCALE_GROUP_LEAVE",
    "group_protocols": "SCALE_GROUP_PROTOCOLS",
    "group_idle_secs": "SCALE_GROUP_IDLE_SECS",
    "group_heartbeat_ms": "SCALE_GROUP_HEARTBEAT_MS",  # classic members' heartbeat.interval.ms
    "port": "SCALE_KAFKA_PORT",                # the broker's PLAINTEXT port (controller: +1)
    "run_dir": "SCALE_KAFKA_RUN_DIR",
    "heap": "SCALE_KAFKA_HEAP",                # the broker's KAFKA_HEAP_OPTS
    "simulate": "SCALE_SIMULATE",              # 1: also the 100,000-partition simulation
    "out": "SCALE_OUT",
}
# server.properties lines for many partitions (KAFKA_EXTRA_PROPS; SCALE_BROKER_PROPS adds
# more after these). Kafka preallocates each segment's offset and time index at
# log.index.size.max.bytes (10 MiB by default, sparse files that are memory-mapped: two
# maps per partition); 1 MiB indexes and 16 MiB segments keep that small. Logs are not
# preallocated (log.preallocate=false, the default).
BROKER_PROPS = [
    "log.segment.bytes=16777216",
    "log.index.size.max.bytes=1048576",
    # The consumer protocol's heartbeat interval (scripts/broker.sh's test setting, spelled
    # out): the classic members get the same interval (SCALE_GROUP_HEARTBEAT_MS).
    "group.consumer.heartbeat.interval.ms=500",
    # A fetch that waits (fetch.max.wait.ms) watches every partition of its session in the
    # fetch purgatory, and a completed one leaves its watch entries behind until the next
    # purge, by default after 1,000 watched operations: at 10,000 partitions that is up to
    # ten million stale entries, and the broker's garbage collector, not the clients, sets
    # the pace of the idle figures. Purging every 100 keeps them a tenth of that.
    "fetch.purgatory.purge.interval.requests=100",
]
JAVA_HEAP = ["-Xmx1g"]
RUN_SLACK_S = 90  # a run process gets timeout + idle + settle + this before it is killed
STOP_TIMEOUT_S = 300  # for the broker's clean shutdown


def log(msg):
    print(f"scale: {msg}", file=sys.stderr, flush=True)


def settings(smoke):
    base = SMOKE if smoke else FULL
    s = {}
    for k, default in base.items():
        raw = os.environ.get(ENV[k])
        if raw is None or raw == "":
            s[k] = default
        elif isinstance(default, int):
            s[k] = int(raw)
        else:
            s[k] = raw
    s["partitions"] = [int(x) for x in str(s["partitions"]).split(",") if x]
    for k in ("impls", "modes", "group_protocols"):
        s[k] = [x for x in str(s[k]).split(",") if x]
    s["broker_props"] = BROKER_PROPS + [l for l in os.environ.get("SCALE_BROKER_PROPS", "").splitlines() if l]
    return s


# ---------------------------------------------------------------------------- simulation

SIM_LINE = re.compile(r"^  (\S.*?)\s+([0-9.]+) ms$")
SIM_HEAP = re.compile(r"heap per idle partition: fetcher ([0-9.]+) B, metadata cache ([0-9.]+) B")


def simulate():
    """tests/scale_sim.rs: every path a real broker here cannot hold, at 100,000 partitions,
    through the sans-IO components and the simulated brokers; one run, the times it prints."""
    log("simulation: cargo test --release --test scale_sim (100,000 partitions)")
    t0 = time.time()
    p = subprocess.run(["cargo", "test", "--release", "--quiet", "--test", "scale_sim", "--",
                        "--nocapture", "--test-threads", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    sim = {"steps": [], "exit_code": p.returncode, "wall_s": round(time.time() - t0, 1)}
    for line in p.stdout.splitlines():
        m = SIM_LINE.match(line)
        if m:
            sim["steps"].append({"what": m.group(1), "ms": float(m.group(2))})
        m = SIM_HEAP.search(line)
        if m:
            sim["heap_per_idle_partition"] = {"fetcher": float(m.group(1)), "metadata": float(m.group(2))}
    if p.returncode != 0 or not sim["steps"]:
        sim["error"] = f"exit code {p.returncode}, {len(sim['steps'])} steps"
        sim["output_tail"] = p.stdout[-2000:]
        log(f"simulation FAILED: {sim['error']}\n{sim['output_tail']}")
    else:
        slow = max(sim["steps"], key=lambda x: x["ms"])
        log(f"simulation: {len(sim['steps'])} paths, the slowest {slow['ms']:.1f} ms ({slow['what']})")
    return sim


def simulation_table(result):
    sim = result.get("simulation")
    if not sim:
        return []
    out = ["### 100,000 partitions in simulation", ""]
    if "error" in sim:
        return out + [f"FAILED: {sim['error']}", ""]
    out += ["The paths a broker on this machine cannot hold, at 100,000 partitions, through the "
            "sans-IO components and the simulated brokers (`tests/scale_sim.rs`, release build, one "
            "run; the test asserts the results, not the times). Target: each within a second.", "",
            "| path | ms |", "|---|---|"]
    out += [f"| {x['what']} | {x['ms']:,.1f} |" for x in sim["steps"]]
    heap = sim.get("heap_per_idle_partition")
    if heap:
        out += ["", f"Heap per idle partition, by what dropping it frees: fetcher {heap['fetcher']:,.0f} B, "
                    f"metadata cache {heap['metadata']:,.0f} B."]
    return out + [""]


# ---------------------------------------------------------------------------- the broker

class Broker:
    def __init__(self, s, smoke):
        self.s = s
        run_dir = s["run_dir"]
        self.run_dir = run_dir if os.path.isabs(run_dir) else os.path.join(ROOT, run_dir)
        self.env = {
            **os.environ,
            "KAFKA_RUN_DIR": self.run_dir,
            "KAFKA_PORT": str(s["port"]),
            "KAFKA_CONTROLLER_PORT": str(int(os.environ.get("SCALE_KAFKA_CONTROLLER_PORT", s["port"] + 1))),
            "KAFKA_SECURITY": "0",
            "KAFKA_KEEP_DATA": "0" if smoke else "1",
            "KAFKA_HEAP_OPTS": s["heap"],
            # Starting on 16,000 partitions takes a minute, more after an unclean stop.
            "KAFKA_START_TIMEOUT": os.environ.get("KAFKA_START_TIMEOUT", "600"),
            "KAFKA_EXTRA_PROPS": "\n".join(s["broker_props"]),
        }
        self.started = False

    def cmd(self, *args):
        p = subprocess.run([os.path.join(ROOT, "scripts/broker.sh"), *args], env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return p

    def start(self):
        running = self.cmd("status").returncode == 0
        p = self.cmd("start")
        if p.returncode != 0:
            raise RuntimeError(f"broker.sh start failed:\n{p.stdout}\n{p.stderr[-3000:]}")
        self.started = not running
        self.bootstrap = p.stdout.strip().splitlines()[-1]
        info = {}
        with open(os.path.join(self.run_dir, "broker.info")) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    info[k] = v
        self.version = info.get("version", "?")
        return self.bootstrap

    def stop(self):
        """Stops the broker if this run started it. A broker with many partitions takes
        longer than the 30 s broker.sh waits before SIGKILL, and a killed one recovers every
        log at its next start: so SIGTERM first, and up to STOP_TIMEOUT_S for it to finish."""
        if not self.started:
            return
        pid = self.pid()
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
                deadline = time.time() + STOP_TIMEOUT_S
                while time.time() < deadline and os.path.exists(f"/proc/{pid}"):
                    time.sleep(0.5)
            except ProcessLookupError:
                pass
        self.cmd("stop")

    def pid(self):
        return bench.broker_pid(self.run_dir)


def check_limits(s):
    """The broker holds a file open per partition and maps two indexes: make sure the
    limits it inherits from here allow it (raising the soft descriptor limit if we may)."""
    total = sum(set(s["partitions"]) | ({s["group_partitions"]} if s["group_partitions"] else set()))
    need_fds = total + 4000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need_fds:
        if hard == resource.RLIM_INFINITY or hard >= need_fds:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need_fds if hard == resource.RLIM_INFINITY
                                                        else hard, hard))
            log(f"raised the open-file limit from {soft} to {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")
        else:
            raise RuntimeError(f"{total:,} partitions need about {need_fds:,} open files in the broker; "
                               f"the hard limit is {hard} (raise it, e.g. `ulimit -n {need_fds}` as root "
                               "or in /etc/security/limits.conf)")
    need_maps = 2 * total + 10000
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            maps = int(f.read())
    except (OSError, ValueError):
        maps = None
    if maps is not None and maps < need_maps:
        raise RuntimeError(f"{total:,} partitions need about {need_maps:,} memory maps in the broker; "
                           f"vm.max_map_count is {maps} (`sudo sysctl -w vm.max_map_count={need_maps}`)")
    return {"partitions_total": total, "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            "max_map_count": maps}


# ---------------------------------------------------------------------------- topics

def topic_name(n):
    return f"scale-{n}"


def java(libs, source, *args, heap=("-Xmx512m",)):
    return ["java", *heap, f"-Dlog4j2.configurationFile={ROOT}/scripts/kafka/log4j2-tools.properties",
            "-cp", f"{libs}/*", os.path.join(ROOT, "scripts/java", source), *args]


def ensure_topic(libs, broker, s, n, logdir):
    """The topic scale-N with N partitions holding at least per_partition records each,
    made once (a marker in the run directory says with which settings)."""
    topic = topic_name(n)
    want = {"topic": topic, "partitions": n, "per_partition": s["per_partition"],
            "record_bytes": s["record_bytes"]}
    marker = os.path.join(broker.run_dir, "datasets", topic + ".json")
    try:
        with open(marker) as f:
            ok = json.load(f) == want
    except (OSError, ValueError):
        ok = False
    # A broker that has just started may not answer for every partition yet: a topic with
    # the right marker gets a few minutes before it is taken for broken.
    deadline = time.time() + (300 if ok else 0)
    while True:
        try:
            offsets = bench.end_offsets(libs, broker.bootstrap, topic).get(topic)
        except RuntimeError as e:  # GetOffsetShell failed (a broker still starting)
            if time.time() > deadline:
                raise
            log(f"{topic}: {str(e).splitlines()[0]}; trying again")
            offsets = None
        complete = offsets and len(offsets) == n and min(offsets.values()) >= s["per_partition"]
        if ok and complete:
            log(f"{topic}: cached ({n:,} partitions, {s['per_partition']} records or more each)")
            return
        if time.time() > deadline:
            break
        time.sleep(5)
    if offsets:
        log(f"{topic}: not as wanted; deleting it")
        bench.run_tool(java(libs, "TestAdmin.java", "delete-topic", "--bootstrap", broker.bootstrap,
                            "--topic", topic), timeout=300)
    try:
        os.remove(marker)
    except OSError:
        pass
    log(f"{topic}: creating {n:,} partitions and writing {s['per_partition']} records of "
        f"{s['record_bytes']} B to each")
    p = bench.run_tool(java(libs, "ScaleFill.java", "--bootstrap", broker.bootstrap, "--topic", topic,
                            "--partitions", str(n), "--per-partition", str(s["per_partition"]),
                            "--size", str(s["record_bytes"]), "--create", heap=("-Xmx1g",)),
                       timeout=1200)
    log(f"{topic}: " + "; ".join(p.stdout.strip().splitlines()))
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    with open(marker, "w") as f:
        json.dump(want, f)


class SteadyProducer:
    """scripts/java/SeqProducer.java writing round robin to every partition of a topic."""

    def __init__(self, libs, bootstrap, topic, partitions, rate, logdir):
        self.log_path = os.path.join(logdir, f"producer-{topic}.out")
        self.out = open(self.log_path, "w")
        self.err = open(os.path.join(logdir, f"producer-{topic}.err"), "w")
        self.p = subprocess.Popen(java(libs, "SeqProducer.java", "--bootstrap", bootstrap, "--topic", topic,
                                       "--partitions", str(partitions), "--rate", str(rate), "--acks", "1"),
                                  stdin=subprocess.PIPE, stdout=self.out, stderr=self.err, text=True)
        deadline = time.time() + 90
        while not self.acked():
            if self.p.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the steady producer on {topic} did not start (see {self.log_path})")
            time.sleep(0.2)
        time.sleep(2)  # past its JVM's start-up

    def acked(self):
        with open(self.log_path) as f:
            return any(l.startswith("ack ") for l in f)

    def stop(self):
        try:
            self.p.stdin.write("stop\n")
            self.p.stdin.close()
            self.p.wait(timeout=150)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()
        self.out.close()
        self.err.close()
        done = None
        with open(self.log_path) as f:
            for l in f:
                if l.startswith("done "):
                    sent, acked, failed = (int(x) for x in l.split()[1:4])
                    done = {"sent": sent, "acked": acked, "failed": failed}
        return done


# ---------------------------------------------------------------------------- runs

def run_process(argv, label, logdir, broker, timeout):
    """Runs one measuring process; returns its JSON figures plus what was seen from outside."""
    out_path = os.path.join(logdir, f"{label}.out")
    err_path = os.path.join(logdir, f"{label}.err")
    bpid = broker.pid()
    load0 = bench.loadavg_1m()
    b0 = bench.proc_cpu_s(bpid) if bpid else None
    busy0 = bench.machine_busy_s()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        t0 = time.time()
        p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        try:
            _, status, ru = os.wait4(p.pid, 0) if timeout is None else wait_with_timeout(p, timeout)
        finally:
            if p.poll() is None:
                p.kill()
        wall = time.time() - t0
    b1 = bench.proc_cpu_s(bpid) if bpid else None
    busy1 = bench.machine_busy_s()
    rec = {"label": label, "exit_code": os.waitstatus_to_exitcode(status) if status is not None else None,
           "wall_s": round(wall, 3), "process_cpu_s": round(ru.ru_utime + ru.ru_stime, 3) if ru else None,
           "max_rss_kib": ru.ru_maxrss if ru else None, "loadavg_1m_before": load0,
           "broker_cpu_s": round(b1 - b0, 2) if b0 is not None and b1 is not None else None}
    if rec["broker_cpu_s"] is not None and rec["process_cpu_s"] is not None:
        rec["other_cpu_s"] = round(busy1 - busy0 - rec["process_cpu_s"] - rec["broker_cpu_s"], 2)
    with open(out_path) as f:
        lines = [l for l in f.read().splitlines() if l.startswith("{")]
    if lines:
        try:
            rec.update(json.loads(lines[-1]))
        except ValueError as e:
            rec["error"] = f"cannot parse output: {e}"
    else:
        rec.setdefault("error", "no JSON line")
    if rec["exit_code"] != 0:
        rec.setdefault("error", f"exit code {rec['exit_code']}")
    if "error" in rec:
        with open(err_path) as f:
            rec["stderr_tail"] = f.read()[-2000:]
    return rec


def wait_with_timeout(p, timeout):
    deadline = time.time() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return pid, status, ru
        if time.time() > deadline:
            p.kill()
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = -9
            return p.pid, status, ru
        time.sleep(0.05)


def consumer_argv(impl, mode, libs, bootstrap, n, s):
    topic = topic_name(n)
    common = ["--idle-secs", str(s["idle_secs"]), "--settle-secs", str(s["settle_secs"]),
              "--timeout-secs", str(s["timeout_secs"])]
    if impl == "ours":
        return [PERF_SCALE, bootstrap, topic, str(n), str(s["per_partition"]), "--mode", mode, *common]
    return java(libs, "ScaleConsumer.java", "--bootstrap", bootstrap, "--topic", topic,
                "--partitions", str(n), "--per-partition", str(s["per_partition"]), "--mode", mode,
                *common, heap=JAVA_HEAP)


def describe(rec):
    if "error" in rec:
        return f"FAILED: {rec['error']}"
    fr = rec.get("first_record_s") or {}
    idle = rec.get("idle") or {}
    io = idle.get("io_thread_cpu_pct")
    return (f"first record of every partition {fr.get('max', 0):.3f} s, "
            f"{rec.get('records_per_s') or 0:,.0f} records/s, {rec.get('cpu_us_per_record') or 0:.2f} µs CPU/record, "
            f"idle: I/O thread {'–' if io is None else f'{io:.2f} %'}, process "
            f"{idle.get('process_cpu_pct', 0):.2f} %")


# ---------------------------------------------------------------------------- tables

MODE_NAMES = {"assign": "assign", "classic": "subscribe, classic", "consumer": "subscribe, consumer (KIP-848)"}


def stat(runs, path):
    vals = []
    for r in runs:
        v = r
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        if v is not None:
            vals.append(v)
    return summary(vals)


def cell(runs, path, digits=2, scale=1.0):
    return fmt(stat(runs, path), digits, scale)


def single_tables(result):
    s = result["settings"]
    out = []
    runs = [r for r in result["runs"] if "error" not in r]
    for n in s["partitions"]:
        out.append(f"### One consumer, {n:,} partitions")
        out.append("")
        out.append("| client, mode | assignment applied s | first record s: p50 / p99 / **every partition** "
                   "| caught up s | records/s | CPU µs per record | RSS growth MiB (B per partition) "
                   "| poll ms: p50 / p99 / max | idle: I/O thread % of a core | idle: process % of a core "
                   "| idle: delivery ms p50 / max | close s | failed |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for impl in s["impls"]:
            for mode in s["modes"]:
                rs = [r for r in runs if r["impl"] == impl and r["mode"] == mode and r["partitions"] == n]
                failed = sum(1 for r in result["runs"] if r.get("impl_arg") == impl and r.get("mode_arg") == mode
                             and r.get("n_arg") == n and "error" in r)
                if not rs and not failed:
                    continue
                growth = stat(rs, ("rss_growth_mib",))
                out.append(
                    f"| {impl}, {MODE_NAMES.get(mode, mode)} | {cell(rs, ('assigned_s',), 3)} "
                    f"| {cell(rs, ('first_record_s', 'p50'), 3)} / {cell(rs, ('first_record_s', 'p99'), 3)} / "
                    f"**{cell(rs, ('first_record_s', 'max'), 3)}** | {cell(rs, ('caught_up_s',), 3)} "
                    f"| {cell(rs, ('records_per_s',), 0)} | {cell(rs, ('cpu_us_per_record',), 2)} "
                    f"| {fmt(growth, 1)} ({cell(rs, ('rss_bytes_per_partition',), 0)}) "
                    f"| {cell(rs, ('poll_ms', 'p50'), 3)} / {cell(rs, ('poll_ms', 'p99'), 2)} / "
                    f"{cell(rs, ('poll_ms', 'max'), 1)} "
                    f"| {cell(rs, ('idle', 'io_thread_cpu_pct'), 2)} | {cell(rs, ('idle', 'process_cpu_pct'), 2)} "
                    f"| {cell(rs, ('idle', 'delivery_ms', 'p50'), 0)} / {cell(rs, ('idle', 'delivery_ms', 'max'), 0)} "
                    f"| {cell(rs, ('close_s',), 3)} | {failed} |")
        out.append("")
    # RSS per partition from the slope between the smallest and the largest topic: the
    # consumer's fixed memory (buffers, threads, connections) cancels out.
    sizes = sorted(s["partitions"])
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        rows = []
        for impl in s["impls"]:
            for mode in s["modes"]:
                a = stat([r for r in runs if r["impl"] == impl and r["mode"] == mode and r["partitions"] == lo],
                         ("rss_kib",))
                b = stat([r for r in runs if r["impl"] == impl and r["mode"] == mode and r["partitions"] == hi],
                         ("rss_kib",))
                if a and b:
                    slope = (b["median"] - a["median"]) * 1024 / (hi - lo)
                    rows.append(f"| {impl}, {MODE_NAMES.get(mode, mode)} | {a['median'] / 1024:,.1f} "
                                f"| {b['median'] / 1024:,.1f} | {slope:,.0f} |")
        if rows:
            out.append(f"RSS per partition, from the growth between {lo:,} and {hi:,} partitions "
                       "(medians; the process's fixed memory cancels out):")
            out.append("")
            out.append(f"| client, mode | RSS MiB at {lo:,} | RSS MiB at {hi:,} | bytes per added partition |")
            out.append("|---|---|---|---|")
            out.extend(rows)
            out.append("")
    return out


def group_table(result):
    g = [r for r in result["group_runs"]]
    if not g:
        return []
    s = result["settings"]
    m, leave = s["group_members"], s["group_leave"]
    out = [f"### A group of {m} of our members on {s['group_partitions']:,} partitions: all join, "
           f"then {leave} leave", ""]
    out.append(f"| protocol | join: converged s | join: CPU s | idle, {m} members: process / I/O threads, "
               f"% of a core | {leave} leave: converged s | leave: CPU s | close ms p50 / max "
               f"| idle, {m - leave} members: process / I/O threads % | partitions handed out: join / leave "
               "| metrics(): rebalances per member, join / leave (p50, max) "
               "| metrics(): a member's last rebalance ms, join / leave (p50, max) | RSS MiB | failed |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for proto in s["group_protocols"]:
        rs = [r for r in g if r.get("protocol") == proto and "error" not in r]
        failed = sum(1 for r in g if r.get("protocol_arg") == proto and "error" in r)
        name = "classic, cooperative-sticky" if proto == "classic" else "consumer (KIP-848), broker's assignor"
        out.append(
            f"| {name} | {cell(rs, ('join', 'converged_s'), 3)} | {cell(rs, ('join', 'cpu_s'), 3)} "
            f"| {cell(rs, ('idle_all', 'process_cpu_pct'), 2)} / {cell(rs, ('idle_all', 'io_threads_cpu_pct'), 2)} "
            f"| {cell(rs, ('leave_phase', 'converged_s'), 3)} | {cell(rs, ('leave_phase', 'cpu_s'), 3)} "
            f"| {cell(rs, ('leave_phase', 'close_ms', 'p50'), 1)} / {cell(rs, ('leave_phase', 'close_ms', 'max'), 1)} "
            f"| {cell(rs, ('idle_rest', 'process_cpu_pct'), 2)} / {cell(rs, ('idle_rest', 'io_threads_cpu_pct'), 2)} "
            f"| {cell(rs, ('join', 'partitions_assigned'), 0)} / {cell(rs, ('leave_phase', 'partitions_assigned'), 0)} "
            f"| {pair(rs, ('join', 'metrics', 'rebalances'), 0)} / {pair(rs, ('leave_phase', 'metrics', 'rebalances'), 0)} "
            f"| {pair(rs, ('join', 'metrics', 'rebalance_latency_ms'), 0)} / "
            f"{pair(rs, ('leave_phase', 'metrics', 'rebalance_latency_ms'), 0)} "
            f"| {cell(rs, ('rss_kib',), 1, 1 / 1024)} | {failed} |")
    out.append("")
    return out


def pair(runs, path, digits):
    """`p50, max` of a member distribution (medians over the runs), or – when no run has it."""
    a, b = stat(runs, path + ("p50",)), stat(runs, path + ("max",))
    if not a or not b:
        return "–"
    return f"{a['median']:,.{digits}f}, {b['median']:,.{digits}f}"


def metrics_table(result):
    """What each client's own metrics() said of its runs (the figures it has)."""
    s = result["settings"]
    runs = [r for r in result["runs"] if "error" not in r and r.get("metrics")]
    if not runs:
        return []
    out = ["### What the clients' own metrics say", "",
           "From the client's `metrics()` (ours: `Consumer::metrics()`; Java: `KafkaConsumer.metrics()`, "
           "the client-wide values) at caught up and over the idle window, medians [min–max]. "
           "*records consumed*: `records-consumed-total` at caught up (ours checks it equals the records "
           "the application counted, and fails the run otherwise). *fetches*: `fetch-total` until caught "
           "up; *fetch latency*: `fetch-latency-avg` (both clients over the same window: two samples of "
           "30 s, Java's defaults). *idle fetches/s, requests/s*: the growth of `fetch-total` and "
           "`request-total` over the idle window: a fetch waits on the broker until a record arrives or "
           "`fetch.max.wait.ms` (500 ms) passes, so with the steady producer's "
           f"{s['steady_rate']} records/s and `fetch.min.bytes=1` a client that delivers each record "
           f"at once makes about {s['steady_rate']} fetches/s, and one that asked only on the timeout "
           "2 per broker).", "",
           "| client, mode | partitions | records consumed | fetches to caught up | fetch latency avg ms "
           "| idle: fetches/s | idle: requests/s |",
           "|---|---|---|---|---|---|---|"]
    for n in s["partitions"]:
        for impl in s["impls"]:
            for mode in s["modes"]:
                rs = [r for r in runs if r["impl"] == impl and r["mode"] == mode and r["partitions"] == n]
                if not rs:
                    continue
                out.append(
                    f"| {impl}, {MODE_NAMES.get(mode, mode)} | {n:,} "
                    f"| {cell(rs, ('metrics', 'records_consumed_total'), 0)} "
                    f"| {cell(rs, ('metrics', 'fetch_total'), 0)} "
                    f"| {cell(rs, ('metrics', 'fetch_latency_avg_ms'), 1)} "
                    f"| {cell(rs, ('metrics', 'idle_fetches_per_s'), 2)} "
                    f"| {cell(rs, ('metrics', 'idle_requests_per_s'), 2)} |")
    out.append("")
    return out


# (figure, path, better) for the "no worse than Java" check.
COMPARED = [
    ("first record of every partition", ("first_record_s", "max"), "lower"),
    ("records/s", ("records_per_s",), "higher"),
    ("CPU per record", ("cpu_us_per_record",), "lower"),
    ("RSS growth", ("rss_growth_mib",), "lower"),
    ("poll p99", ("poll_ms", "p99"), "lower"),
    ("poll max", ("poll_ms", "max"), "lower"),
    ("idle process CPU", ("idle", "process_cpu_pct"), "lower"),
    ("idle delivery p50", ("idle", "delivery_ms", "p50"), "lower"),
    ("close", ("close_s",), "lower"),
]


def targets(result):
    s = result["settings"]
    runs = [r for r in result["runs"] if "error" not in r]
    n = max(s["partitions"])
    out = [f"Targets at {n:,} partitions (reported, not asserted; medians):", ""]
    for mode in s["modes"]:
        ours = [r for r in runs if r["impl"] == "ours" and r["mode"] == mode and r["partitions"] == n]
        if not ours:
            continue
        first = stat(ours, ("first_record_s", "max"))
        io = stat(ours, ("idle", "io_thread_cpu_pct"))
        line = f"- ours, {MODE_NAMES.get(mode, mode)}: first record of every partition " \
               f"{first['median']:.2f} s ({'within' if first['median'] <= 2 else '**over**'} 2 s); " \
               f"idle I/O thread {io['median']:.2f} % of a core " \
               f"({'under' if io['median'] < 2 else '**not under**'} 2 %)"
        javas = [r for r in runs if r["impl"] == "java" and r["mode"] == mode and r["partitions"] == n]
        if javas:
            worse, par = [], []
            for name, path, better in COMPARED:
                a, b = stat(ours, path), stat(javas, path)
                if not a or not b:
                    continue
                ratio = a["median"] / b["median"] if b["median"] else float("inf")
                if better == "higher":
                    ratio = 1 / ratio if ratio else float("inf")
                # ratio > 1: ours is worse; within 5 % counts as on par.
                if ratio > 1.05:
                    worse.append(f"{name} ({a['median']:.3g} vs {b['median']:.3g})")
                elif ratio > 1:
                    par.append(f"{name} ({a['median']:.3g} vs {b['median']:.3g})")
            line += "; against Java: " + ("no worse on any figure compared" if not worse
                                          else "**worse on** " + ", ".join(worse))
            if par:
                line += " (within 5 %: " + ", ".join(par) + ")"
        out.append(line)
    out.append("")
    return out


def markdown(result):
    m = result["meta"]
    s = result["settings"]
    L = ["# Scale: one consumer on many partitions, and a 50-member group", ""]
    L.append(f"Generated by `bash scripts/bench.sh --scale{' --smoke' if m['smoke'] else ''}` on "
             f"{m['date_utc']} (this repository at {m['git_commit']}"
             + (f" plus uncommitted changes in {m['git_src_modified_files']} file(s) under src/"
                if m["git_src_modified_files"] else "")
             + f"); raw per-run figures in [`scale.json`](scale.json). How it works and what each "
             "figure means: [`benches/README.md`](../README.md#scale).")
    L.append("")
    L.append(f"- Machine: {m['nproc']} cores, {m['cpu_model']}, {m['mem_total_gib']} GiB RAM, Linux "
             f"{m['kernel']}; the broker, the consumer and the steady producer share it. 1-minute load "
             f"average {m['loadavg_1m']['start']} at the start, {m['loadavg_1m']['end']} at the end; "
             f"CPU used by anything but the measured process and the broker during a run: median "
             f"{m['other_cpu_s']['median']} s, max {m['other_cpu_s']['max']} s (the steady producer "
             "included).")
    L.append(f"- Broker: Kafka {m['broker']['version']}, one KRaft broker+controller (scripts/broker.sh, "
             f"plaintext), JVM `{s['heap']}`, extra settings "
             + ", ".join(f"`{p}`" for p in s["broker_props"])
             + f"; {m['limits']['partitions_total']:,} partitions in all on it; open-file limit "
             f"{m['limits']['nofile']}, vm.max_map_count {m['limits']['max_map_count']}.")
    L.append(f"- Topics `scale-N`: N partitions, {s['per_partition']} records of {s['record_bytes']} B "
             f"written to each beforehand (scripts/java/ScaleFill.java); during the runs "
             f"scripts/java/SeqProducer.java writes {s['steady_rate']} records/s round robin over the "
             "partitions (acks=1). Before the runs on a topic, ours reads it once untimed (a broker "
             "just started may still be taking up its partitions' leadership, and a segment's first "
             "read loads its index).")
    L.append(f"- {s['runs']} round(s); in each, every client and mode once, as a fresh process, in a "
             f"rotating order; idle window {s['idle_secs']} s after {s['settle_secs']} s of settling. "
             f"ours: {m['ours']}; java: kafka-clients {m['kafka_clients']} "
             f"(scripts/java/ScaleConsumer.java, JVM `{' '.join(JAVA_HEAP)}`).")
    for n in m.get("notes") or []:
        L.append(f"- Note: {n}")
    d = m["duration_s"]
    L.append(f"- Time taken: broker and topics {d['setup']} s, single-consumer runs {d['runs']} s, "
             f"group runs {d['group']} s.")
    L.append("")
    L.append("Each cell: median [min–max] over the successful runs. *first record*: from `assign` / "
             "`subscribe` to a partition's first record, over the partitions. *caught up*: every "
             "partition's pre-written records returned. *CPU per record*: the process's CPU from "
             "making the consumer to caught up over the records returned (the JVM's JIT and GC "
             "included, its start-up not). *RSS growth*: VmRSS after the idle window minus right after "
             "the consumer was made (for the JVM mostly heap growth). *poll*: the `poll(100 ms)` calls "
             "that returned records until caught up (a call that had to wait for its records "
             "includes the wait). *idle*: the window after "
             "caught up, the application still polling: ours' I/O thread (`kafka-consumer`), and for "
             "Java the `consumer_background_thread` of the KIP-848 consumer (the classic Java consumer "
             "does its I/O on the application thread: no I/O thread to measure, compare the process "
             "column); *delivery*: now minus CreateTime of the steady producer's records returned in "
             "the window.")
    L.append("")
    L.extend(targets(result))
    L.extend(single_tables(result))
    L.extend(metrics_table(result))
    L.extend(group_table(result))
    if result["group_runs"]:
        L.append(f"Group: {s['group_members']} members as threads of one process (each its own consumer "
                 f"and I/O thread), a fresh group per run, `auto.offset.reset=earliest`, no commits (a "
                 f"partition that moves is read again from the start, so it delivers at once); classic "
                 f"members with `heartbeat.interval.ms={s['group_heartbeat_ms']}`, the consumer protocol "
                 "with the broker's `group.consumer.heartbeat.interval.ms=500`. *converged*: every "
                 "partition owned by exactly one member in the group that has returned a record of it "
                 "since it got it, and every member owning its even share (checked every 5 ms), from "
                 "the moment all call `subscribe` (join) or the leaving members call `close` (leave). "
                 "*CPU*: the process's, over the phase. *partitions handed out*: what "
                 f"`on_partitions_assigned` gave out during the phase ({s['group_partitions']:,} is the "
                 "minimum for the join: more means partitions moved between members on the way). "
                 "*metrics()*: the members' own `Consumer::metrics()`, taken after the phase's idle "
                 "window from the members in the group then: how much each one's `rebalance-total` grew "
                 "over the phase, and `last-rebalance-latency` of those that rebalanced (the member's "
                 "own view: from its first step of the rebalance to its end, not the group's "
                 "convergence); p50 and max over the members, median over the runs.")
        L.append("")
    L.extend(simulation_table(result))
    return "\n".join(L) + "\n"


def readme_block(result):
    """The README's scale figures (between its bench:scale markers): the largest topic's
    medians side by side, the targets, and the group's convergence."""
    s, m = result["settings"], result["meta"]
    runs = [r for r in result["runs"] if "error" not in r]
    n = max(s["partitions"])
    sizes = " / ".join(f"{p:,}" for p in sorted(s["partitions"]))
    L = [f"Scale (`bash scripts/bench.sh --scale`; method in "
         "[`benches/README.md`](benches/README.md#scale), every table in "
         "[`benches/results/scale.md`](benches/results/scale.md)): one consumer given "
         f"{sizes} partitions of a topic with {s['per_partition']} records of {s['record_bytes']} B in "
         f"each and a producer adding {s['steady_rate']} records/s, ours and the Java `KafkaConsumer` "
         f"{m['kafka_clients']} on the same broker, {s['runs']} interleaved rounds on the 2-core machine "
         f"(load average {m['loadavg_1m']['start']} at the start). At {n:,} partitions, medians:", "",
         "| client, mode | first record of every partition s | records/s | CPU µs per record "
         "| RSS B per partition | idle: I/O thread / process, % of a core | close s |",
         "|---|---|---|---|---|---|---|"]
    for impl in s["impls"]:
        for mode in s["modes"]:
            rs = [r for r in runs if r["impl"] == impl and r["mode"] == mode and r["partitions"] == n]
            if not rs:
                continue
            io = stat(rs, ("idle", "io_thread_cpu_pct"))
            L.append(f"| {'ours' if impl == 'ours' else 'Java'}, {MODE_NAMES.get(mode, mode)} "
                     f"| {med(rs, ('first_record_s', 'max'), 2)} | {med(rs, ('records_per_s',), 0)} "
                     f"| {med(rs, ('cpu_us_per_record',), 2)} | {med(rs, ('rss_bytes_per_partition',), 0)} "
                     f"| {fmt_med(io, 2) if io else '–'} / {med(rs, ('idle', 'process_cpu_pct'), 2)} "
                     f"| {med(rs, ('close_s',), 3)} |")
    L.append("")
    L.extend(t for t in targets(result)[2:] if t)
    g = [r for r in result["group_runs"] if "error" not in r]
    if g:
        parts = []
        for proto in s["group_protocols"]:
            rs = [r for r in g if r.get("protocol") == proto]
            if rs:
                parts.append(f"{'classic cooperative-sticky' if proto == 'classic' else 'the consumer protocol'} "
                             f"{med(rs, ('join', 'converged_s'), 2)} s to join, "
                             f"{med(rs, ('leave_phase', 'converged_s'), 2)} s after {s['group_leave']} leave")
        failed = sum(1 for r in result["group_runs"] if "error" in r)
        L.append(f"- A group of {s['group_members']} of our members on {s['group_partitions']:,} partitions "
                 f"converges (every partition owned once and delivering): " + "; ".join(parts)
                 + f" (medians; {failed} failed runs).")
    sim = result.get("simulation")
    if sim and "error" not in sim:
        slow = max(sim["steps"], key=lambda x: x["ms"])
        L.append(f"- At 100,000 partitions in simulation (`tests/scale_sim.rs`: metadata, fetch planning and "
                 f"sessions, offset lookups, commits, the three assignors, KIP-848 reconciliation) every "
                 f"path takes at most {slow['ms']:,.0f} ms ({slow['what']}; target: a second).")
    wrapped = []
    for line in L:
        if line.startswith("|") or not line:
            wrapped.append(line)
        else:
            wrapped.append(textwrap.fill(line, 95, subsequent_indent="  " if line.startswith("- ") else "",
                                         break_on_hyphens=False, break_long_words=False))
    return "\n".join(wrapped) + "\n"


def med(runs, path, digits):
    v = stat(runs, path)
    return fmt_med(v, digits) if v else "–"


def fmt_med(v, digits):
    return f"{v['median']:,.{digits}f}"


# ---------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--report", metavar="DIR", help="only rewrite DIR/scale.md from DIR/scale.json")
    ap.add_argument("--simulate", metavar="DIR",
                    help="only run the 100,000-partition simulation, put it into DIR/scale.json and "
                         "rewrite DIR/scale.md")
    args = ap.parse_args()
    if args.report or args.simulate:
        d = args.report or args.simulate
        with open(os.path.join(d, "scale.json")) as f:
            result = json.load(f)
        if args.simulate:
            result["simulation"] = simulate()
            with open(os.path.join(d, "scale.json"), "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
            if "error" in result["simulation"]:
                return 1
        args.report = d
        text = markdown(result)
        with open(os.path.join(args.report, "scale.md"), "w") as f:
            f.write(text)
        print(text)
        return publish(args.report, result)
    s = settings(args.smoke)
    if os.environ.get("SCALE_NOTE"):
        args.note.append(os.environ["SCALE_NOTE"])
    bad = [i for i in s["impls"] if i not in ("ours", "java")] + \
          [m for m in s["modes"] if m not in MODE_NAMES] + \
          [p for p in s["group_protocols"] if p not in ("classic", "consumer")]
    if bad:
        ap.error(f"unknown client, mode or protocol: {', '.join(bad)}")
    out_dir = s["out"] if os.path.isabs(s["out"]) else os.path.join(ROOT, s["out"])
    logdir = os.path.join(ROOT, "target/bench-logs", "scale-smoke" if args.smoke else "scale")
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(logdir, exist_ok=True)

    t0 = time.time()
    simulation = simulate() if s["simulate"] else None
    log("building examples/perf_scale and examples/perf_group (release)")
    subprocess.run(["cargo", "build", "--release", "--quiet", "--example", "perf_scale",
                    "--example", "perf_group"], cwd=ROOT, check=True)
    libs = subprocess.run([os.path.join(ROOT, "scripts/broker.sh"), "libs"], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.strip().splitlines()[-1]
    limits = check_limits(s)
    broker = Broker(s, args.smoke)
    load_start = bench.loadavg_1m()
    runs, group_runs, warmups, producers = [], [], [], {}
    try:
        bootstrap = broker.start()
        log(f"broker (Kafka {broker.version}) at {bootstrap}, run directory {broker.run_dir}")
        sizes = sorted(set(s["partitions"]))
        topics = sorted(set(sizes) | ({s["group_partitions"]} if s["group_partitions"] else set()))
        for n in topics:
            ensure_topic(libs, broker, s, n, logdir)
        t_setup = time.time()
        t_group = 0.0
        combos = [(i, m) for i in s["impls"] for m in s["modes"]]
        for n in topics:
            # Untimed: a broker that has just started may still be taking up the leadership
            # of its partitions for a while after it listens (ListOffsets then answers
            # UNKNOWN_LEADER_EPOCH, for tens of seconds at 16,000 partitions), and the first
            # read of a segment loads its index. One read of everything by ours first.
            warm = run_process([PERF_SCALE, bootstrap, topic_name(n), str(n), str(s["per_partition"]),
                                "--idle-secs", "0", "--settle-secs", "0", "--timeout-secs", "600"],
                               f"warmup-{n}", logdir, broker, 600 + RUN_SLACK_S)
            warmups.append(warm)
            log(f"{topic_name(n)}: warm-up read (untimed): "
                + (f"FAILED: {warm['error']}" if "error" in warm else
                   f"every partition read after {warm['caught_up_s']:.2f} s"))
            producer = SteadyProducer(libs, bootstrap, topic_name(n), n, s["steady_rate"], logdir)
            try:
                if n in sizes:
                    for r in range(s["runs"]):
                        k = r % len(combos)
                        for impl, mode in combos[k:] + combos[:k]:
                            label = f"{impl}-{mode}-{n}-{r + 1}"
                            rec = run_process(consumer_argv(impl, mode, libs, bootstrap, n, s), label, logdir,
                                              broker, s["timeout_secs"] + s["idle_secs"] + s["settle_secs"]
                                              + RUN_SLACK_S)
                            rec.update({"impl_arg": impl, "mode_arg": mode, "n_arg": n, "round": r + 1})
                            if rec.get("rss_kib") and rec.get("rss_base_kib") is not None:
                                rec["rss_growth_mib"] = (rec["rss_kib"] - rec["rss_base_kib"]) / 1024
                            runs.append(rec)
                            log(f"{n:,} partitions, round {r + 1}, {impl} {mode}: {describe(rec)}")
                            time.sleep(1)
                if n == s["group_partitions"]:
                    tg = time.time()
                    for r in range(s["runs"]):
                        for proto in s["group_protocols"]:
                            argv = [PERF_GROUP, bootstrap, topic_name(n), str(n), "--protocol", proto,
                                    "--members", str(s["group_members"]), "--leave", str(s["group_leave"]),
                                    "--idle-secs", str(s["group_idle_secs"]),
                                    "--timeout-secs", str(s["timeout_secs"] + 60)]
                            if proto == "classic":
                                argv += ["--set", f"heartbeat.interval.ms={s['group_heartbeat_ms']}"]
                            rec = run_process(argv, f"group-{proto}-{n}-{r + 1}", logdir, broker,
                                              2 * (s["timeout_secs"] + 60) + 2 * s["group_idle_secs"] + RUN_SLACK_S)
                            rec.update({"protocol_arg": proto, "round": r + 1})
                            group_runs.append(rec)
                            if "error" in rec:
                                log(f"group {proto}, round {r + 1}: FAILED: {rec['error']}")
                            else:
                                log(f"group {proto}, round {r + 1}: {s['group_members']} join, converged in "
                                    f"{rec['join']['converged_s']:.3f} s; {s['group_leave']} leave, converged in "
                                    f"{rec['leave_phase']['converged_s']:.3f} s")
                            time.sleep(1)
                    t_group += time.time() - tg
            finally:
                producers[topic_name(n)] = producer.stop()
        t_end = time.time()
    finally:
        broker.stop()

    other = [r["other_cpu_s"] for r in runs + group_runs if r.get("other_cpu_s") is not None]
    dirty = bench.sh(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock"])
    clients = sorted(f for f in os.listdir(libs) if f.startswith("kafka-clients-"))
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), None)
    with open("/proc/meminfo") as f:
        mem = next((int(l.split()[1]) for l in f if l.startswith("MemTotal:")), 0)
    meta = {
        "smoke": args.smoke,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git_commit": bench.sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
        "git_src_modified_files": len(dirty.splitlines()) if dirty else 0,
        "nproc": os.cpu_count(), "cpu_model": cpu, "mem_total_gib": round(mem / 1024 / 1024, 1),
        "kernel": platform.release(),
        "broker": {"version": broker.version, "bootstrap": broker.bootstrap},
        "limits": limits,
        "kafka_clients": clients[0].removesuffix(".jar").removeprefix("kafka-clients-") if clients else None,
        "ours": "examples/perf_scale.rs and examples/perf_group.rs, release build",
        "loadavg_1m": {"start": load_start, "end": bench.loadavg_1m()},
        "other_cpu_s": {"median": round(sorted(other)[len(other) // 2], 2) if other else None,
                        "max": max(other) if other else None},
        "steady_producer": producers,
        "notes": args.note,
        "duration_s": {"setup": round(t_setup - t0), "runs": round(t_end - t_setup - t_group),
                       "group": round(t_group)},
    }
    result = {"meta": meta, "settings": s, "warmups": warmups, "runs": runs, "group_runs": group_runs}
    if simulation:
        result["simulation"] = simulation
    with open(os.path.join(out_dir, "scale.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    text = markdown(result)
    with open(os.path.join(out_dir, "scale.md"), "w") as f:
        f.write(text)
    print(text)
    failed = [r for r in warmups + runs + group_runs if "error" in r]
    if simulation and "error" in simulation:
        failed.append({"label": "simulation", "error": simulation["error"]})
    for r in failed:
        log(f"FAILED: {r['label']}: {r['error']}")
    log(f"wrote {os.path.join(out_dir, 'scale.md')} and scale.json in {time.time() - t0:.0f} s")
    return publish(out_dir, result) or (1 if failed else 0)


def publish(out_dir, result):
    """A full run written to benches/results also rewrites the README's scale figures."""
    if result["meta"]["smoke"] or not readme_block_mod.publishes(out_dir):
        return 0
    err = readme_block_mod.replace_block("scale", readme_block(result))
    if err:
        log(err)
        return 1
    log("README.md: the scale figures (bench:scale block) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
