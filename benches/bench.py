#!/usr/bin/env python3
"""Benchmark driver, run by scripts/bench.sh (stdlib only; see benches/README.md).

Makes sure every dataset topic holds exactly the expected records (producing it with
Kafka's ProducerPerformance if not), reads each dataset once untimed (page-cache warm-up),
then runs every contender --runs times per dataset, interleaved and in rotating order, as
separate processes. For each run it records the consumer's own figures (records, value
bytes, elapsed), the process's user+system CPU seconds and peak RSS (os.wait4 rusage), the
broker's CPU seconds during the run, and for Java also the CPU spent inside the fetch window
(sampled from /proc). Writes OUT/runs.json; benches/report.py turns it into tables and a chart.

--tls: the TLS mode. Two datasets (100 B uncompressed, 1 KiB lz4), every contender over both
PLAINTEXT and SSL (the broker's SSL listener, --ssl-bootstrap, certificate signed by --ca),
the two transports of a contender being two entries of the same interleaved rotation.
Writes OUT/tls.json. --tls-smoke (with --smoke): also reads the smoke datasets with `ours`
over both transports, once each, into OUT/tls.json.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK")
PARTITIONS = 8
RUN_TIMEOUT_S = 600

# Fetch settings shared by all contenders (the Java client's defaults, spelled out).
FETCH = {
    "fetch.min.bytes": "1",
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "1048576",
    "fetch.max.wait.ms": "500",
}
JAVA_HEAP = ["-Xmx1g"]

FULL_DATASETS = [
    {"topic": f"bench-{label}-{codec}", "records": n, "size": size, "compression": codec}
    for (label, n, size) in [("100b", 5_000_000, 100), ("1k", 500_000, 1024)]
    for codec in ("none", "lz4", "zstd")
]
SMOKE_DATASETS = [
    {"topic": f"smoke-100b-{codec}", "records": 100_000, "size": 100, "compression": codec}
    for codec in ("none", "lz4")
]
# The TLS mode's datasets: the 100-byte uncompressed one (most records per byte: per-record
# costs dominate) and the 1 KiB lz4 one (most bytes per record through TLS).
TLS_DATASETS = [d for d in FULL_DATASETS if d["topic"] in ("bench-100b-none", "bench-1k-lz4")]
TRANSPORTS = ("plaintext", "ssl")
# Producer settings for the datasets (ProducerPerformance --command-property).
PRODUCER_PROPS = {"batch.size": "65536", "linger.ms": "10", "acks": "1"}


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def java_cmd(libs, cls, *args, heap=("-Xmx512m",)):
    return [
        "java", *heap,
        f"-Dlog4j2.configurationFile={ROOT}/scripts/kafka/log4j2-tools.properties",
        "-cp", f"{libs}/*", cls, *args,
    ]


def run_tool(cmd, check=True, timeout=900):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:8])} ... failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


# ---------------------------------------------------------------------------- datasets

def end_offsets(libs, bootstrap, pattern):
    """{topic: {partition: latest offset}} for topics matching the regex."""
    p = run_tool(java_cmd(libs, "org.apache.kafka.tools.GetOffsetShell",
                          "--bootstrap-server", bootstrap, "--topic", pattern), check=False)
    out = {}
    for line in p.stdout.splitlines():
        m = re.fullmatch(r"(.+):(\d+):(-?\d+)", line.strip())
        if m:
            out.setdefault(m.group(1), {})[int(m.group(2))] = int(m.group(3))
    if p.returncode != 0 and "Could not match any topic" not in p.stdout + p.stderr:
        raise RuntimeError(f"GetOffsetShell failed:\n{p.stdout}\n{p.stderr}")
    return out


def marker_path(run_dir, ds):
    return os.path.join(run_dir, "datasets", ds["topic"] + ".json")


def dataset_ok(ds, offsets, run_dir):
    parts = offsets.get(ds["topic"])
    if not parts or len(parts) != PARTITIONS or sum(parts.values()) != ds["records"]:
        return False
    try:
        with open(marker_path(run_dir, ds)) as f:
            return json.load(f) == ds
    except (OSError, ValueError):
        # Unknown origin (no marker): trust the record count only if it matches.
        return True


def produce_dataset(libs, bootstrap, ds, exists, run_dir):
    topic = ds["topic"]
    tc = "org.apache.kafka.tools.TopicCommand"
    try:
        os.remove(marker_path(run_dir, ds))
    except OSError:
        pass
    if exists:
        log(f"{topic}: wrong contents; deleting the topic")
        run_tool(java_cmd(libs, tc, "--bootstrap-server", bootstrap, "--delete", "--topic", topic))
    deadline = time.time() + 120
    while True:  # a just-deleted topic may still be "marked for deletion"
        p = run_tool(java_cmd(libs, tc, "--bootstrap-server", bootstrap, "--create",
                              "--topic", topic, "--partitions", str(PARTITIONS),
                              "--replication-factor", "1"), check=False)
        if p.returncode == 0:
            break
        if time.time() > deadline:
            raise RuntimeError(f"cannot create {topic}:\n{p.stdout}\n{p.stderr}")
        time.sleep(2)
    props = {"bootstrap.servers": bootstrap, "compression.type": ds["compression"],
             **PRODUCER_PROPS}
    log(f"{topic}: producing {ds['records']:,} records of {ds['size']} B "
        f"({ds['compression']}) with ProducerPerformance")
    t0 = time.time()
    p = run_tool(java_cmd(libs, "org.apache.kafka.tools.ProducerPerformance",
                          "--bootstrap-server", bootstrap, "--topic", topic,
                          "--num-records", str(ds["records"]), "--record-size", str(ds["size"]),
                          "--throughput", "-1", "--command-property",
                          *[f"{k}={v}" for k, v in props.items()], heap=("-Xmx1g",)),
                 timeout=1800)
    summary = [l for l in p.stdout.splitlines() if "records sent" in l]
    log(f"{topic}: produced in {time.time() - t0:.0f} s: {summary[-1] if summary else '?'}")


def ensure_datasets(libs, bootstrap, datasets, run_dir, pattern):
    offsets = end_offsets(libs, bootstrap, pattern)
    produced = False
    for ds in datasets:
        if dataset_ok(ds, offsets, run_dir):
            log(f"{ds['topic']}: cached ({ds['records']:,} records)")
            continue
        produce_dataset(libs, bootstrap, ds, ds["topic"] in offsets, run_dir)
        produced = True
    if produced:
        offsets = end_offsets(libs, bootstrap, pattern)
    for ds in datasets:
        parts = offsets.get(ds["topic"], {})
        total = sum(parts.values())
        if len(parts) != PARTITIONS or total != ds["records"]:
            raise RuntimeError(f"{ds['topic']}: {len(parts)} partitions, {total} records after "
                               f"producing; expected {PARTITIONS} and {ds['records']}")
        os.makedirs(os.path.dirname(marker_path(run_dir, ds)), exist_ok=True)
        with open(marker_path(run_dir, ds), "w") as f:
            json.dump(ds, f)
        ds["partition_records"] = [parts[p] for p in sorted(parts)]
        ds["disk_bytes"] = topic_disk_bytes(run_dir, ds["topic"])


def topic_disk_bytes(run_dir, topic):
    data = os.path.join(run_dir, "data")
    total = 0
    if not os.path.isdir(data):
        return None
    for d in os.listdir(data):
        if re.fullmatch(re.escape(topic) + r"-\d+", d):
            for f in os.listdir(os.path.join(data, d)):
                if f.endswith(".log"):
                    total += os.path.getsize(os.path.join(data, d, f))
    return total


# ---------------------------------------------------------------------------- contenders

class Contender:
    def __init__(self, name, kind, argv_fn, desc, only_compression=None, transport=None):
        self.name, self.kind, self.argv_fn, self.desc = name, kind, argv_fn, desc
        # Run only on datasets with this compression (None: on every dataset).
        self.only_compression = only_compression
        # TLS mode: "plaintext" or "ssl" (None: the plaintext benchmark, not recorded).
        self.transport = transport

    @property
    def label(self):
        return self.name if self.transport is None else f"{self.name}/{self.transport}"

    def applies(self, ds):
        return self.only_compression is None or ds["compression"] == self.only_compression


def private_copy(src, tmpdir, name):
    """A private copy of a binary: a concurrent `cargo build` must not swap it mid-benchmark."""
    dst = os.path.join(tmpdir, name)
    if not os.path.exists(dst):
        shutil.copy2(src, dst)
    return dst


# Binaries, relative to the repository (built by scripts/bench.sh).
BINARIES = {
    "ours": "target/release/examples/perf_consume",
    "ours-zstd-native": "target/zstd-native/release/examples/perf_consume",
    # benches/ours-tls: examples/perf_consume.rs with exactly one TLS crypto provider.
    "ours-graviola": "target/tls-graviola/release/perf_consume",
    "ours-ring": "target/tls-ring/release/perf_consume",
    "rdkafka": "benches/rdkafka/target/release/rdkafka-perf-consume",
    # benches/rdkafka with its `ssl` feature (librdkafka with OpenSSL), for the TLS mode.
    "rdkafka-ssl": "target/rdkafka-ssl/release/rdkafka-perf-consume",
}
TLS_CONTENDERS = ("ours", "ours-graviola", "ours-ring", "java", "rdkafka", "rdkafka-nocrc",
                  "rdkafka-tuned")


def make_contenders(names, args, tmpdir, transport=None):
    """The named contenders. transport None: the plaintext benchmark; "plaintext" or "ssl":
    the TLS mode's variants (the same binaries and settings for both transports, plus the
    security settings for "ssl")."""
    ssl = transport == "ssl"
    bootstrap = args.ssl_bootstrap if ssl else args.bootstrap
    tag = f"-{transport}" if transport else ""

    def binary(key):
        return private_copy(os.path.join(ROOT, BINARIES[key]), tmpdir, key)

    def ours_argv(key, *extra, group=False):
        exe = binary(key)

        def argv(ds, run_id):
            a = [exe, bootstrap, ds["topic"], str(ds["records"]), *extra]
            if group:  # a fresh group each run: no commits to start from
                a += ["--group", f"bench-{run_id}"]
            if transport:
                a.append("--tls-info")  # both transports: the same logger, same binary
            if ssl:
                a += ["--set", "security.protocol=SSL", "--set", "ssl.truststore.type=PEM",
                      "--set", f"ssl.truststore.location={args.ca}"]
            return a
        return argv

    def rdk_argv(*extra):
        exe = binary("rdkafka-ssl" if transport else "rdkafka")

        def argv(ds, _):
            a = [exe, bootstrap, ds["topic"], str(ds["records"]), *extra]
            if ssl:
                a += ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={args.ca}"]
            return a
        return argv

    java_cfg = os.path.join(tmpdir, f"java-consumer{tag}.properties")
    with open(java_cfg, "w") as f:
        f.write("# Written by benches/bench.py for ConsumerPerformance --command-config.\n")
        props = {**FETCH, "auto.offset.reset": "earliest", "enable.auto.commit": "false",
                 "client.id": "java-perf-consume"}
        if ssl:
            props.update({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                          "ssl.truststore.location": args.ca})
        for k, v in props.items():
            f.write(f"{k}={v}\n")

    def java_argv(ds, run_id):
        # ConsumerPerformance overrides group.id (--group), max.partition.fetch.bytes
        # (--fetch-size) and receive.buffer.bytes (--socket-buffer-size) from its own
        # options, and always sets check.crcs=false, so those go on the command line.
        return java_cmd(args.libs, "org.apache.kafka.tools.ConsumerPerformance",
                        "--bootstrap-server", bootstrap, "--topic", ds["topic"],
                        "--num-records", str(ds["records"]), "--timeout", "60000",
                        "--command-config", java_cfg, "--group", f"bench-{run_id}",
                        "--fetch-size", FETCH["max.partition.fetch.bytes"],
                        "--socket-buffer-size=-1", heap=JAVA_HEAP)

    rdk_build = (" (built with its `ssl` feature: librdkafka with the system's OpenSSL, "
                 "for both transports)" if transport else "")
    specs = {
        "ours": lambda: Contender("ours", "rust", ours_argv("ours"),
                                  "kafka-consumer (this crate), examples/perf_consume.rs, check.crcs=true (default)"
                                  + (" (the example build: its dev-dependency on the crate turns on "
                                     "`tls-graviola`)" if transport else "")),
        "ours-nocrc": lambda: Contender("ours-nocrc", "rust", ours_argv("ours", "--no-crc"),
                                        "kafka-consumer (this crate), check.crcs=false"),
        # The group path (issue 17 item 3): the same binary and fetch settings, reading
        # through subscribe as the only member of a fresh group; elapsed_s includes the join.
        "ours-subscribe-classic": lambda: Contender(
            "ours-subscribe-classic", "rust",
            ours_argv("ours", "--subscribe", "classic", group=True),
            "kafka-consumer, examples/perf_consume.rs --subscribe classic: subscribe as the only "
            "member of a fresh group (classic protocol, default assignors), "
            "auto.offset.reset=earliest, no commits; elapsed from the first poll, so the join "
            "counts"),
        "ours-subscribe-consumer": lambda: Contender(
            "ours-subscribe-consumer", "rust",
            ours_argv("ours", "--subscribe", "consumer", group=True),
            "kafka-consumer, examples/perf_consume.rs --subscribe consumer: as "
            "ours-subscribe-classic with group.protocol=consumer (KIP-848)"),
        "ours-zstd-native": lambda: Contender(
            "ours-zstd-native", "rust", ours_argv("ours-zstd-native"),
            "kafka-consumer built with the opt-in `zstd-native` feature (libzstd instead of the "
            "default build's own pure-Rust decoder), check.crcs=true; zstd datasets only",
            only_compression="zstd"),
        "ours-graviola": lambda: Contender(
            "ours-graviola", "rust", ours_argv("ours-graviola"),
            "kafka-consumer with `--features tls-graviola` only (rustls + graviola, no C): "
            "examples/perf_consume.rs built by benches/ours-tls, check.crcs=true"),
        "ours-ring": lambda: Contender(
            "ours-ring", "rust", ours_argv("ours-ring"),
            "kafka-consumer with `--features tls-ring` only (rustls + ring): "
            "examples/perf_consume.rs built by benches/ours-tls, check.crcs=true"),
        "java": lambda: Contender("java", "java", java_argv,
                                  "Apache Kafka ConsumerPerformance (kafka-clients KafkaConsumer, subscribe + group join); "
                                  "check.crcs=false forced by the tool"
                                  + ("; TLS by the JDK's SunJSSE" if transport else "")),
        "rdkafka": lambda: Contender("rdkafka", "rust", rdk_argv(),
                                     "librdkafka via rdkafka BaseConsumer, benches/rdkafka, check.crcs=true"
                                     + rdk_build),
        "rdkafka-nocrc": lambda: Contender("rdkafka-nocrc", "rust", rdk_argv("--no-crc"),
                                           "librdkafka via rdkafka BaseConsumer, check.crcs=false "
                                           "(librdkafka's default)" + rdk_build),
        # librdkafka stops fetching a partition for fetch.queue.backoff.ms (default 1000)
        # once its local queue holds queued.min.messages (100,000) records; a consumer that
        # drains faster than that then sits idle. Not part of the requested set: shown so
        # that the default's stalls are not mistaken for librdkafka's speed.
        "rdkafka-tuned": lambda: Contender("rdkafka-tuned", "rust",
                                           rdk_argv("-X", "fetch.queue.backoff.ms=10"),
                                           "as rdkafka (check.crcs=true) plus fetch.queue.backoff.ms=10 "
                                           "(default 1000: see benches/README.md)" + rdk_build),
    }
    out = []
    for n in names:
        c = specs[n]()
        c.transport = transport
        out.append(c)
    return out


def proc_cpu_s(pid):
    """utime+stime of every thread of pid, in seconds, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def loadavg_1m():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def machine_busy_s():
    """CPU seconds all cores spent busy since boot (/proc/stat, everything but idle/iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest* are included in user/nice)
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / CLK_TCK


def broker_pid(run_dir):
    try:
        with open(os.path.join(run_dir, "broker.pid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


class Sampler(threading.Thread):
    """Samples (wall time, cpu seconds) of a process every 20 ms until stopped."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.samples, self.stop = pid, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            c = proc_cpu_s(self.pid)
            if c is not None:
                self.samples.append((time.time(), c))
            self.stop.wait(0.02)

    def cpu_at(self, t):
        s = self.samples
        if not s or t < s[0][0] or t > s[-1][0]:
            return None
        for (t0, c0), (t1, c1) in zip(s, s[1:]):
            if t0 <= t <= t1:
                return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)
        return s[-1][1]


def parse_java(stdout, ds):
    lines = [l for l in stdout.splitlines() if l.strip()]
    hdr = next((i for i, l in enumerate(lines) if l.startswith("start.time")), None)
    keys = [k.strip() for k in lines[hdr].split(",")] if hdr is not None else []
    data = [l for l in lines[(hdr or 0) + 1:]
            if l[:1].isdigit() and len(l.split(",")) == len(keys)]
    if not keys or not data:
        raise ValueError("no ConsumerPerformance result line")
    vals = [v.strip() for v in data[0].split(",")]
    row = dict(zip(keys, vals))
    fetch_ms = int(row["fetch.time.ms"])
    end = datetime.datetime.strptime(row["end.time"], "%Y-%m-%d %H:%M:%S:%f").timestamp()
    return {
        "records": int(row["data.consumed.in.nMsg"]),
        # The tool reports MiB (key + value bytes; the datasets have null keys).
        "bytes": round(float(row["data.consumed.in.MB"]) * 1024 * 1024),
        "elapsed_s": fetch_ms / 1000.0,
        "java_rebalance_ms": int(row["rebalance.time.ms"]),
        "java_fetch_window": [end - fetch_ms / 1000.0, end],
        "warning": "WARNING" in stdout,
    }


def run_one(contender, ds, run_id, args, logdir):
    argv = contender.argv_fn(ds, run_id)
    out_path = os.path.join(logdir, f"{run_id}.out")
    err_path = os.path.join(logdir, f"{run_id}.err")
    bpid = broker_pid(args.run_dir)
    load0 = loadavg_1m()
    broker_cpu0 = proc_cpu_s(bpid) if bpid else None
    busy0 = machine_busy_s()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        t0 = time.time()
        p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        sampler = Sampler(p.pid)
        sampler.start()
        done = threading.Event()
        killer = threading.Timer(RUN_TIMEOUT_S, lambda: done.is_set() or os.kill(p.pid, 9))
        killer.start()
        _, status, ru = os.wait4(p.pid, 0)
        done.set()
        killer.cancel()
        wall = time.time() - t0
        sampler.stop.set()
        sampler.join()
        p.returncode = os.waitstatus_to_exitcode(status)
    broker_cpu1 = proc_cpu_s(bpid) if bpid else None
    busy1 = machine_busy_s()
    with open(out_path) as f:
        stdout = f.read()
    rec = {
        "run_id": run_id, "contender": contender.name, "dataset": ds["topic"],
        **({"transport": contender.transport} if contender.transport else {}),
        "exit_code": p.returncode, "wall_s": round(wall, 4),
        "cpu_user_s": ru.ru_utime, "cpu_sys_s": ru.ru_stime, "cpu_s": ru.ru_utime + ru.ru_stime,
        "max_rss_kib": ru.ru_maxrss,
        "broker_cpu_s": (round(broker_cpu1 - broker_cpu0, 2)
                         if broker_cpu0 is not None and broker_cpu1 is not None else None),
    }
    if contender.transport:
        rec["loadavg_1m_before"] = load0
    # CPU used by everything else on the machine meanwhile (this driver included): a check
    # that nothing else competed for the cores during the run.
    if rec["broker_cpu_s"] is not None:
        rec["other_cpu_s"] = round(busy1 - busy0 - rec["cpu_s"] - rec["broker_cpu_s"], 2)
    try:
        if contender.kind == "java":
            r = parse_java(stdout, ds)
            w0, w1 = r.pop("java_fetch_window")
            c0, c1 = sampler.cpu_at(w0), sampler.cpu_at(w1)
            rec["cpu_fetch_window_s"] = round(c1 - c0, 3) if c0 is not None and c1 is not None else None
            if r.pop("warning"):
                rec["error"] = "ConsumerPerformance: timeout before all records"
        else:
            line = [l for l in stdout.splitlines() if l.startswith("{")][-1]
            r = json.loads(line)
        rec.update(r)
    except (ValueError, IndexError, KeyError) as e:
        rec["error"] = f"cannot parse output: {e}"
    if p.returncode != 0:
        rec["error"] = f"exit code {p.returncode}"
    if rec.get("records") != ds["records"] and "error" not in rec:
        rec["error"] = f"read {rec.get('records')} of {ds['records']} records"
    if "error" in rec:
        with open(err_path) as f:
            rec["stderr_tail"] = f.read()[-2000:]
    return rec


# ---------------------------------------------------------------------------- meta

def sh(cmd):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        return p.stdout.strip() if p.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info(args, contenders):
    cpu = None
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kib = None
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    crate_version = None
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        m = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.M)
        crate_version = m.group(1) if m else None
    clients = sorted(f for f in os.listdir(args.libs) if f.startswith("kafka-clients-"))
    dirty = sh(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock"])
    info = {
        "git_commit": sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
        "git_src_modified_files": len(dirty.splitlines()) if dirty else 0,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "mem_total_gib": round(mem_kib / 1024 / 1024, 1) if mem_kib else None,
        "kernel": platform.release(),
        "os": sh(["sh", "-c", ". /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\""]),
        "java": (sh(["java", "-version"]) or "").splitlines()[:3],
        "rustc": sh(["rustc", "--version"]),
        "python": platform.python_version(),
        "broker": {
            "version": args.kafka_version,
            "jvm": args.broker_jvm,
            "bootstrap": args.bootstrap,
            "config": "single KRaft broker+controller (scripts/broker.sh), num.io.threads=4, "
                      "num.network.threads=2, log dirs on the local disk",
        },
        "ours_crate_version": crate_version,
        "kafka_clients": clients[0].removesuffix(".jar").removeprefix("kafka-clients-") if clients else None,
        "java_consumer_jvm": " ".join(JAVA_HEAP) + " (JVM defaults otherwise: G1)",
        "fetch_settings": FETCH,
        "producer_settings": PRODUCER_PROPS,
        "contenders": {c.name: c.desc for c in contenders},
        "runs_per_contender": args.runs,
        "mode": "tls" if args.tls else "smoke" if args.smoke else "full",
    }
    if any(c.name.startswith("rdkafka") for c in contenders):
        rdk = os.path.join(ROOT, BINARIES["rdkafka-ssl" if args.tls else "rdkafka"])
        out = sh([rdk, "--version"])
        try:
            info["librdkafka"] = json.loads(out)
        except (TypeError, ValueError):
            info["librdkafka"] = out
    return info


def lock_versions(lock_path, names):
    """{package: version} from a Cargo.lock, for the packages named."""
    try:
        with open(lock_path) as f:
            text = f.read()
    except OSError:
        return {}
    out = {}
    for m in re.finditer(r'\[\[package\]\]\nname = "([^"]+)"\nversion = "([^"]+)"', text):
        if m.group(1) in names:
            out.setdefault(m.group(1), []).append(m.group(2))
    return {k: ", ".join(v) for k, v in out.items()}


def tls_info(args, runs):
    """What the TLS runs used: providers and sessions ours reported, library versions, what
    the broker negotiates with an OpenSSL client, the processor's crypto extensions."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    wanted = ["aes", "vaes", "pclmulqdq", "vpclmulqdq", "avx", "avx2", "avx512f", "bmi1", "bmi2",
              "adx", "ssse3", "sha_ni"]
    reported = {}
    for r in runs:
        if r.get("transport") == "ssl" and r.get("tls"):
            reported.setdefault(r["contender"], set()).add(r["tls"])
    s_client = sh(["sh", "-c", f"openssl s_client -connect {args.ssl_bootstrap} -CAfile {args.ca} "
                   "-verify_return_error </dev/null 2>/dev/null | grep -E '^(New,|Verify return)'"])
    return {
        "ssl_bootstrap": args.ssl_bootstrap,
        "ca": args.ca,
        "ours_reported": {k: sorted(v) for k, v in reported.items()},
        "crates": lock_versions(os.path.join(ROOT, "Cargo.lock"),
                                {"rustls", "rustls-graviola", "graviola", "ring", "rustls-webpki"}),
        "openssl": sh(["openssl", "version"]),
        "broker_with_openssl_client": s_client,
        "cpu_flags": [f for f in wanted if f in flags],
    }


def run_rounds(datasets, contenders, args, logdir, session, sleep_s, tag=""):
    """args.runs rounds per dataset, every contender once per round, the order rotating by
    one each round. Returns the run records."""
    runs = []
    for ds in datasets:
        for r in range(args.runs):
            k = r % len(contenders)  # rotate the order each round
            for c in contenders[k:] + contenders[:k]:
                if not c.applies(ds):
                    continue
                rec = run_one(c, ds, f"{session}{tag}-{ds['topic']}-{c.label.replace('/', '-')}-{r + 1}",
                              args, logdir)
                rec["round"] = r + 1
                runs.append(rec)
                rate = rec["records"] / rec["elapsed_s"] if rec.get("elapsed_s") else 0
                log(f"{ds['topic']} round {r + 1} {c.label:18s} "
                    + (f"FAILED: {rec['error']}" if "error" in rec else
                       f"{rate / 1e6:6.3f} M records/s, elapsed {rec['elapsed_s']:.2f} s, "
                       f"cpu {rec['cpu_s']:.2f} s, rss {rec['max_rss_kib'] / 1024:.0f} MiB"
                       + (f", {rec['tls']}" if rec.get("tls") else "")))
                time.sleep(sleep_s)
    return runs


def write_json(path, result):
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--libs", required=True)
    ap.add_argument("--run-dir", required=True, help="the bench broker's KAFKA_RUN_DIR")
    ap.add_argument("--out", required=True, help="where runs.json (tls.json) goes")
    ap.add_argument("--logdir", required=True, help="per-run stdout/stderr")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--contenders",
                    default="ours,ours-nocrc,ours-zstd-native,java,rdkafka,rdkafka-nocrc,rdkafka-tuned,"
                            "ours-subscribe-classic,ours-subscribe-consumer")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--tls", action="store_true",
                    help="TLS mode: TLS_DATASETS, every contender over PLAINTEXT and SSL; OUT/tls.json")
    ap.add_argument("--tls-smoke", action="store_true",
                    help="with --smoke: also ours over PLAINTEXT and SSL, once each; OUT/tls.json")
    ap.add_argument("--ssl-bootstrap", help="the broker's SSL listener (--tls, --tls-smoke)")
    ap.add_argument("--ca", help="the CA certificate (PEM) that signed the broker's (--tls, --tls-smoke)")
    ap.add_argument("--kafka-version", default="?")
    ap.add_argument("--broker-jvm", default="?")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--datasets", default="",
                    help="comma-separated dataset topics to run (default: all of the mode's)")
    args = ap.parse_args()
    if (args.tls or args.tls_smoke) and not (args.ssl_bootstrap and args.ca):
        ap.error("--tls and --tls-smoke need --ssl-bootstrap and --ca")
    if args.tls and args.smoke:
        ap.error("--tls and --smoke are separate modes (use --smoke --tls-smoke)")

    if args.tls:
        datasets = [dict(d) for d in TLS_DATASETS]
    else:
        datasets = [dict(d) for d in (SMOKE_DATASETS if args.smoke else FULL_DATASETS)]
    if args.datasets:
        wanted = args.datasets.split(",")
        unknown = [w for w in wanted if w not in {d["topic"] for d in datasets}]
        if unknown:
            ap.error(f"unknown dataset(s) {', '.join(unknown)}: this mode has "
                     + ", ".join(d["topic"] for d in datasets))
        datasets = [d for d in datasets if d["topic"] in wanted]
    pattern = "smoke-.*" if args.smoke else "bench-.*"
    os.makedirs(args.out, exist_ok=True)
    logdir = args.logdir
    shutil.rmtree(logdir, ignore_errors=True)
    os.makedirs(logdir)
    names = args.contenders.split(",")
    if args.tls:
        bad = [n for n in names if n not in TLS_CONTENDERS]
        if bad:
            ap.error(f"not a contender of the TLS mode: {', '.join(bad)} (choose from {','.join(TLS_CONTENDERS)})")
        plain = make_contenders(names, args, logdir, "plaintext")
        ssl = make_contenders(names, args, logdir, "ssl")
        # Each contender's two transports next to each other in the rotation.
        contenders = [c for pair in zip(plain, ssl) for c in pair]
    else:
        contenders = make_contenders(names, args, logdir)

    t_start = time.time()
    ensure_datasets(args.libs, args.bootstrap, datasets, args.run_dir, pattern)
    t_data = time.time()

    runs, warmups = [], []
    session = uuid.uuid4().hex[:8]
    ours = make_contenders(["ours"], args, logdir)[0]
    warm = [ours]
    if args.tls:
        # Also once over TLS: the broker's first TLS reads run its TLS code (no sendfile,
        # SSLEngine) before the JIT has compiled it, several times slower than later ones.
        warm.append(make_contenders(["ours"], args, logdir, "ssl")[0])
    # The first group on a fresh broker has it create __consumer_offsets (hundreds of ms,
    # once): the subscribe contenders join once, untimed, before the first dataset's runs.
    first_warm = [c for c in make_contenders(
        [n for n in names if n.startswith("ours-subscribe-")], args, logdir)][:1]
    load_start = loadavg_1m()
    for i, ds in enumerate(datasets):
        for w_c in warm + (first_warm if i == 0 else []):
            log(f"{ds['topic']}: warm-up read ({w_c.label}, untimed)")
            w = run_one(w_c, ds, f"{session}-warmup-{ds['topic']}"
                        + (f"-{w_c.name}" if w_c.name != "ours" else "")
                        + (f"-{w_c.transport}" if w_c.transport else ""), args, logdir)
            warmups.append(w)
            if "error" in w:
                log(f"{ds['topic']}: warm-up FAILED: {w['error']}")
        runs += run_rounds([ds], contenders, args, logdir, session, 1)
    t_runs = time.time()

    meta = {**machine_info(args, contenders), "notes": args.note,
            "duration_s": {"datasets": round(t_data - t_start), "runs": round(t_runs - t_data)}}
    if args.tls:
        meta["loadavg_1m"] = {"start": load_start, "end": loadavg_1m()}
        meta["tls"] = tls_info(args, runs)
    result = {"meta": meta, "datasets": datasets, "warmups": warmups, "runs": runs}
    write_json(os.path.join(args.out, "tls.json" if args.tls else "runs.json"), result)
    failed = [r for r in runs + warmups if "error" in r]
    if args.smoke and not args.tls_smoke:
        try:  # not a stale one from an earlier smoke run
            os.remove(os.path.join(args.out, "tls.json"))
        except OSError:
            pass

    if args.tls_smoke:
        # ours (the example build: the dev-dependency gives it tls-graviola) over both
        # transports, once per smoke dataset; short pauses, it is a smoke test.
        t0 = time.time()
        pair = [c for t in TRANSPORTS for c in make_contenders(["ours"], args, logdir, t)]
        tls_runs = run_rounds(datasets, pair, argparse.Namespace(**{**vars(args), "runs": 1}),
                              logdir, session, 0.2, tag="-tls")
        tls_meta = {**meta, "mode": "smoke", "runs_per_contender": 1,
                    "contenders": {"ours": pair[0].desc},
                    "duration_s": {"datasets": 0, "runs": round(time.time() - t0)},
                    "loadavg_1m": {"start": load_start, "end": loadavg_1m()},
                    "tls": tls_info(args, tls_runs)}
        unsupported = [r for r in tls_runs if "error" in r
                       and "processor features this machine lacks" in r.get("stderr_tail", "")]
        if unsupported:
            # graviola cannot run on this processor: not a failure of the smoke test.
            log("TLS smoke: graviola needs processor features this machine lacks; "
                "the SSL runs are left out")
            tls_runs = [r for r in tls_runs if r not in unsupported]
            tls_meta["notes"] = tls_meta["notes"] + ["SSL runs left out: graviola cannot run "
                                                     "on this processor"]
        write_json(os.path.join(args.out, "tls.json"),
                   {"meta": tls_meta, "datasets": datasets, "warmups": [], "runs": tls_runs})
        failed += [r for r in tls_runs if "error" in r]

    for r in failed:
        log(f"FAILED: {r['dataset']} {r['contender']}"
            + (f"/{r['transport']}" if r.get("transport") else "") + f": {r['error']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
