//! Scale benchmark, our side (`bash scripts/bench.sh --scale`, driven by `benches/scale.py`;
//! see benches/README.md): one consumer given every partition of a topic that holds
//! PER_PARTITION records in each partition (and gets a few more from a steady producer),
//! with the figures printed as one JSON line.
//!
//! ```text
//! cargo build --release --example perf_scale
//! target/release/examples/perf_scale BOOTSTRAP TOPIC PARTITIONS PER_PARTITION
//!     [--mode assign|classic|consumer] [--idle-secs 10] [--settle-secs 2]
//!     [--timeout-secs 120] [--set KEY=VALUE]...
//! ```
//!
//! `--mode assign` (default): `partitions_for` (timed on its own), then the clock starts and
//! `assign` gets them all; no `group.id`, positions from `auto.offset.reset=earliest`.
//! `classic` / `consumer`: the clock starts and `subscribe` joins a fresh group (named after
//! the process id and the time) as its only member with that `group.protocol`,
//! `auto.offset.reset=earliest`, `enable.auto.commit=false`. Fetch settings are the Java
//! client's defaults spelled out, as in the throughput benchmark.
//!
//! Then it polls (`poll(100 ms)`, as an application would) until every partition has
//! returned its record at offset PER_PARTITION - 1 ("caught up"), polls on for
//! `--settle-secs`, and measures an idle window of `--idle-secs` while still polling. The
//! JSON line:
//!
//! - `partitions_for_s` (assign only), `assigned_s`: from the clock's start to the whole
//!   assignment being applied (assign: the `assign` call; a group: the listener has heard of
//!   every partition);
//! - `first_record_s`: p50 / p99 / max over the partitions of the time from the start to the
//!   partition's first record (max: the first record of every partition);
//! - `caught_up_s`, `records` (returned until then), `records_per_s` (records / caught_up_s);
//! - `cpu_s`, `cpu_us_per_record`: the process's user+system CPU from just before the
//!   consumer was made (`partitions_for` included) to caught up (the threads'
//!   `/proc/self/task/*/schedstat`), per record returned;
//! - `rss_base_kib` (VmRSS just after the consumer was made: its I/O thread started, no
//!   connection yet), `rss_kib` (after the idle window),
//!   `rss_peak_kib` (VmHWM), `rss_bytes_per_partition` ((rss - base) / partitions);
//! - `poll_ms`: p50 / p99 / max duration of the `poll` calls that returned records until
//!   caught up: the cost of a poll while records are flowing (a call that had to wait for
//!   its records, as the first ones do, includes the wait, at most the 100 ms timeout);
//! - `idle`: over the window, `io_thread_cpu_pct` (the I/O thread, named `kafka-consumer`:
//!   `/proc/self/task/TID/schedstat`, in % of one core), `process_cpu_pct` (the whole process,
//!   the figure to compare with a client that has no I/O thread of its own), `records`
//!   returned meanwhile and their `delivery_ms` (now minus the record's CreateTime);
//! - `close_s`: `close`, leaving the group included;
//! - `metrics`: what the consumer's own `metrics()` says: at caught up,
//!   `records_consumed_total` (checked against the records counted here: a difference fails
//!   the run), `bytes_consumed_total`, `fetch_total`, `fetch_latency_avg_ms`,
//!   `requests_total` (every broker's `request-total`), `assigned_partitions`; over the idle
//!   window, `idle_fetches_per_s` and `idle_requests_per_s` (the growth of `fetch-total` and
//!   of the brokers' `request-total` per second) and `idle_fetch_latency_avg_ms`.
//!
//! Exits 1 (after printing what it has, `"error"` set) if it does not catch up within
//! `--timeout-secs`. `PERF_SCALE_LOG=debug` (or another `log` level) writes the crate's log to
//! stderr, each line with the milliseconds since the process started: to see where the time
//! to the first record goes.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_consumer::{Consumer, ConsumerConfig, RebalanceListener, TopicPartition};

/// The name of the consumer's I/O thread (`src/io/handle.rs`).
const IO_THREAD: &str = "kafka-consumer";
const POLL_TIMEOUT: Duration = Duration::from_millis(100);

/// How the consumer gets its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Assign,
    Classic,
    Consumer,
}

struct Args {
    bootstrap: String,
    topic: String,
    partitions: usize,
    per_partition: i64,
    mode: Mode,
    idle: Duration,
    settle: Duration,
    timeout: Duration,
    sets: Vec<(String, String)>,
}

/// What the benchmark prints, filled in as the run goes.
#[derive(Default)]
struct Report {
    partitions_for_s: Option<f64>,
    assigned_s: Option<f64>,
    first_record_s: Vec<f64>,
    caught_up_s: Option<f64>,
    records: u64,
    cpu_s: f64,
    rss_base_kib: u64,
    rss_kib: u64,
    rss_peak_kib: u64,
    poll_ms: Vec<f64>,
    idle_window_s: f64,
    idle_io_cpu_pct: Option<f64>,
    idle_process_cpu_pct: f64,
    idle_records: u64,
    delivery_ms: Vec<f64>,
    close_s: Option<f64>,
    /// `metrics()` at caught up, and at the start and the end of the idle window.
    metrics: [Option<Snapshot>; 3],
    error: Option<String>,
}

/// The figures the benchmark takes from `Consumer::metrics()`.
#[derive(Clone, Copy)]
struct Snapshot {
    records_consumed_total: u64,
    bytes_consumed_total: u64,
    fetch_total: u64,
    fetch_latency_avg_ms: Option<f64>,
    requests_total: u64,
    assigned_partitions: usize,
}

impl Snapshot {
    fn of(consumer: &Consumer) -> Snapshot {
        let m = consumer.metrics();
        Snapshot {
            records_consumed_total: m.records_consumed_total,
            bytes_consumed_total: m.bytes_consumed_total,
            fetch_total: m.fetch_total,
            fetch_latency_avg_ms: m.fetch_latency_avg.map(|d| d.as_secs_f64() * 1e3),
            requests_total: m.brokers.iter().map(|b| b.request_total).sum(),
            assigned_partitions: m.assigned_partitions,
        }
    }
}

/// Notes when the listener has heard of `want` partitions.
#[derive(Clone)]
struct Heard {
    want: usize,
    state: Arc<Mutex<(usize, Option<Instant>)>>,
}

impl RebalanceListener for Heard {
    fn on_partitions_assigned(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        let mut s = self.state.lock().unwrap();
        s.0 += partitions.len();
        if s.0 >= self.want && s.1.is_none() {
            s.1 = Some(Instant::now());
        }
    }

    fn on_partitions_revoked(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        self.state.lock().unwrap().0 -= partitions.len();
    }
}

fn main() {
    StderrLog::install();
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("perf_scale: {e}");
            std::process::exit(2);
        }
    };
    let mut report = Report::default();
    let result = run(&args, &mut report);
    if let Err(e) = &result {
        report.error = Some(e.to_string());
    }
    println!("{}", report.json(&args));
    if let Err(e) = result {
        eprintln!("perf_scale: {e}");
        std::process::exit(1);
    }
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: perf_scale BOOTSTRAP TOPIC PARTITIONS PER_PARTITION \
                 [--mode assign|classic|consumer] [--idle-secs S] [--settle-secs S] \
                 [--timeout-secs S] [--set KEY=VALUE]...";
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut positional = Vec::new();
    let (mut mode, mut idle, mut settle, mut timeout) = (Mode::Assign, 10.0, 2.0, 120.0);
    let mut sets = Vec::new();
    let mut it = raw.into_iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--mode" => {
                mode = match value("--mode")?.as_str() {
                    "assign" => Mode::Assign,
                    "classic" => Mode::Classic,
                    "consumer" => Mode::Consumer,
                    m => return Err(format!("--mode {m}: assign, classic or consumer")),
                }
            }
            "--idle-secs" => idle = secs(&value("--idle-secs")?)?,
            "--settle-secs" => settle = secs(&value("--settle-secs")?)?,
            "--timeout-secs" => timeout = secs(&value("--timeout-secs")?)?,
            "--set" => {
                let kv = value("--set")?;
                let (k, v) = kv.split_once('=').ok_or("--set needs KEY=VALUE")?;
                sets.push((k.to_owned(), v.to_owned()));
            }
            s if s.starts_with("--") => return Err(format!("unknown option {s}\n{usage}")),
            _ => positional.push(a),
        }
    }
    let [bootstrap, topic, partitions, per_partition] =
        <[String; 4]>::try_from(positional).map_err(|_| usage.to_owned())?;
    Ok(Args {
        bootstrap,
        topic,
        partitions: partitions.parse().map_err(|e| format!("PARTITIONS: {e}"))?,
        per_partition: per_partition
            .parse()
            .map_err(|e| format!("PER_PARTITION: {e}"))?,
        mode,
        idle: Duration::from_secs_f64(idle),
        settle: Duration::from_secs_f64(settle),
        timeout: Duration::from_secs_f64(timeout),
        sets,
    })
}

fn secs(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| *v >= 0.0)
        .ok_or(format!("{s}: not a number of seconds"))
}

fn run(args: &Args, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let n = args.partitions;
    let mut config = ConsumerConfig::from_properties([
        ("bootstrap.servers", args.bootstrap.as_str()),
        ("client.id", "perf-scale"),
        ("auto.offset.reset", "earliest"),
        ("fetch.min.bytes", "1"),
        ("fetch.max.bytes", "52428800"),
        ("max.partition.fetch.bytes", "1048576"),
        ("fetch.max.wait.ms", "500"),
    ])?;
    if args.mode != Mode::Assign {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        config = config
            .set(
                "group.id",
                &format!("perf-scale-{}-{nanos}", std::process::id()),
            )?
            .set(
                "group.protocol",
                if args.mode == Mode::Classic {
                    "classic"
                } else {
                    "consumer"
                },
            )?
            .set("enable.auto.commit", "false")?;
    }
    for (k, v) in &args.sets {
        config = config.set(k, v)?;
    }
    let cpu_before = process_cpu_s();
    let mut consumer = Consumer::new(config)?;
    report.rss_base_kib = proc_status_kib("VmRSS:");
    let heard = Heard {
        want: n,
        state: Arc::default(),
    };
    let start;
    if args.mode == Mode::Assign {
        let t = Instant::now();
        let partitions = consumer.partitions_for(&args.topic)?;
        report.partitions_for_s = Some(t.elapsed().as_secs_f64());
        if partitions.len() != n {
            return Err(format!(
                "{} has {} partitions, not {n}",
                args.topic,
                partitions.len()
            )
            .into());
        }
        start = Instant::now();
        consumer.assign(&partitions)?;
        report.assigned_s = Some(start.elapsed().as_secs_f64());
    } else {
        start = Instant::now();
        consumer.subscribe_with_listener(&[args.topic.as_str()], heard.clone())?;
    }

    // Until every partition has returned its last pre-produced record.
    let last = args.per_partition - 1;
    let mut first: Vec<Option<f64>> = vec![None; n];
    let mut caught = vec![false; n];
    let mut left = n;
    while left > 0 {
        if start.elapsed() > args.timeout {
            report.first_record_s = first.iter().flatten().copied().collect();
            return Err(format!(
                "{left} of {n} partitions not caught up after {:?} ({} returned a record)",
                args.timeout,
                report.first_record_s.len()
            )
            .into());
        }
        let t = Instant::now();
        let batch = consumer.poll(POLL_TIMEOUT)?;
        if batch.is_empty() {
            continue;
        }
        report.poll_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let now = start.elapsed().as_secs_f64();
        for r in &batch {
            let p = r.partition() as usize;
            report.records += 1;
            if p >= n {
                return Err(format!("record of partition {p}: the topic has {n}").into());
            }
            first[p].get_or_insert(now);
            if !caught[p] && r.offset() >= last {
                caught[p] = true;
                left -= 1;
            }
        }
    }
    let caught_up = start.elapsed();
    report.caught_up_s = Some(caught_up.as_secs_f64());
    report.cpu_s = process_cpu_s() - cpu_before;
    let at_caught_up = Snapshot::of(&consumer);
    report.metrics[0] = Some(at_caught_up);
    if at_caught_up.records_consumed_total != report.records {
        return Err(format!(
            "metrics() counts {} records consumed, the application {}",
            at_caught_up.records_consumed_total, report.records
        )
        .into());
    }
    report.first_record_s = first.iter().flatten().copied().collect();
    if let Some(at) = heard.state.lock().unwrap().1 {
        report.assigned_s = Some(at.duration_since(start).as_secs_f64());
    }

    // Settle, then the idle window: the application keeps polling, the steady producer
    // writes a little.
    let settle_until = Instant::now() + args.settle;
    while Instant::now() < settle_until {
        consumer.poll(POLL_TIMEOUT)?;
    }
    let io = io_thread();
    let io_before = io.and_then(thread_cpu_s);
    let proc_before = process_cpu_s();
    report.metrics[1] = Some(Snapshot::of(&consumer));
    let window_start = Instant::now();
    while window_start.elapsed() < args.idle {
        let batch = consumer.poll(POLL_TIMEOUT)?;
        if batch.is_empty() {
            continue;
        }
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3);
        for r in &batch {
            report.idle_records += 1;
            report.delivery_ms.push(now_ms - r.timestamp() as f64);
        }
    }
    let window = window_start.elapsed().as_secs_f64();
    report.metrics[2] = Some(Snapshot::of(&consumer));
    report.idle_window_s = window;
    report.idle_process_cpu_pct = (process_cpu_s() - proc_before) / window * 100.0;
    if let (Some(tid), Some(before)) = (io, io_before) {
        report.idle_io_cpu_pct = thread_cpu_s(tid).map(|after| (after - before) / window * 100.0);
    }
    report.rss_kib = proc_status_kib("VmRSS:");
    report.rss_peak_kib = proc_status_kib("VmHWM:");

    let t = Instant::now();
    consumer.close()?;
    report.close_s = Some(t.elapsed().as_secs_f64());
    Ok(())
}

impl Report {
    fn json(&self, args: &Args) -> String {
        let n = args.partitions;
        let mode = match args.mode {
            Mode::Assign => "assign",
            Mode::Classic => "classic",
            Mode::Consumer => "consumer",
        };
        let mut s = String::new();
        let _ = write!(
            s,
            "{{\"impl\":\"ours\",\"mode\":\"{mode}\",\"topic\":\"{}\",\"partitions\":{n},\
             \"per_partition\":{}",
            args.topic, args.per_partition
        );
        let _ = write!(
            s,
            ",\"partitions_for_s\":{},\"assigned_s\":{}",
            opt(self.partitions_for_s),
            opt(self.assigned_s)
        );
        let _ = write!(
            s,
            ",\"first_record_s\":{},\"partitions_with_records\":{}",
            dist(&self.first_record_s),
            self.first_record_s.len()
        );
        let rate = self
            .caught_up_s
            .filter(|t| *t > 0.0)
            .map(|t| self.records as f64 / t);
        let per_record = (self.records > 0).then(|| self.cpu_s / self.records as f64 * 1e6);
        let _ = write!(
            s,
            ",\"caught_up_s\":{},\"records\":{},\"records_per_s\":{},\"cpu_s\":{:.3},\
             \"cpu_us_per_record\":{}",
            opt(self.caught_up_s),
            self.records,
            opt(rate),
            self.cpu_s,
            opt(per_record)
        );
        let per_partition = (self.rss_kib > 0)
            .then(|| (self.rss_kib as f64 - self.rss_base_kib as f64) * 1024.0 / n.max(1) as f64);
        let _ = write!(
            s,
            ",\"rss_base_kib\":{},\"rss_kib\":{},\"rss_peak_kib\":{},\"rss_bytes_per_partition\":{}",
            self.rss_base_kib,
            self.rss_kib,
            self.rss_peak_kib,
            opt(per_partition)
        );
        let _ = write!(
            s,
            ",\"poll_ms\":{},\"idle\":{{\"window_s\":{:.3},\"io_thread\":\"{IO_THREAD}\",\
             \"io_thread_cpu_pct\":{},\"process_cpu_pct\":{:.3},\"records\":{},\
             \"delivery_ms\":{}}},\"close_s\":{}",
            dist(&self.poll_ms),
            self.idle_window_s,
            opt(self.idle_io_cpu_pct),
            self.idle_process_cpu_pct,
            self.idle_records,
            dist(&self.delivery_ms),
            opt(self.close_s)
        );
        let _ = write!(s, ",\"metrics\":{}", self.metrics_json());
        if let Some(e) = &self.error {
            let _ = write!(s, ",\"error\":\"{}\"", e.replace(['"', '\\', '\n'], " "));
        }
        s.push('}');
        s
    }

    /// The `metrics` object (see the module doc), `null` if the run did not catch up.
    fn metrics_json(&self) -> String {
        let Some(c) = self.metrics[0] else {
            return "null".to_owned();
        };
        let mut s = format!(
            "{{\"records_consumed_total\":{},\"bytes_consumed_total\":{},\"fetch_total\":{},\
             \"fetch_latency_avg_ms\":{},\"requests_total\":{},\"assigned_partitions\":{}",
            c.records_consumed_total,
            c.bytes_consumed_total,
            c.fetch_total,
            opt(c.fetch_latency_avg_ms),
            c.requests_total,
            c.assigned_partitions
        );
        if let (Some(b), Some(a)) = (self.metrics[1], self.metrics[2]) {
            let per_s = |grew: u64| opt(Some(grew as f64 / self.idle_window_s.max(1e-9)));
            let _ = write!(
                s,
                ",\"idle_fetches_per_s\":{},\"idle_requests_per_s\":{},\
                 \"idle_fetch_latency_avg_ms\":{}",
                per_s(a.fetch_total.saturating_sub(b.fetch_total)),
                per_s(a.requests_total.saturating_sub(b.requests_total)),
                opt(a.fetch_latency_avg_ms)
            );
        }
        s.push('}');
        s
    }
}

/// `PERF_SCALE_LOG=LEVEL`: the crate's log on stderr, with the time since the start.
struct StderrLog {
    start: Instant,
}

impl StderrLog {
    fn install() {
        let Some(level) = std::env::var("PERF_SCALE_LOG")
            .ok()
            .and_then(|l| l.parse::<log::LevelFilter>().ok())
        else {
            return;
        };
        let logger = Box::leak(Box::new(StderrLog {
            start: Instant::now(),
        }));
        if log::set_logger(logger).is_ok() {
            log::set_max_level(level);
        }
    }
}

impl log::Log for StderrLog {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }

    fn log(&self, r: &log::Record) {
        eprintln!(
            "{:>9.3} {:<5} {} {}",
            self.start.elapsed().as_secs_f64() * 1e3,
            r.level(),
            r.target(),
            r.args()
        );
    }

    fn flush(&self) {}
}

/// A number, or `null`.
fn opt(v: Option<f64>) -> String {
    v.map_or("null".to_owned(), |v| format!("{v:.6}"))
}

/// `{"n":..,"p50":..,"p99":..,"max":..}` of the values (nearest-rank percentiles).
fn dist(values: &[f64]) -> String {
    if values.is_empty() {
        return "{\"n\":0,\"p50\":null,\"p99\":null,\"max\":null}".to_owned();
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    format!(
        "{{\"n\":{},\"p50\":{:.6},\"p99\":{:.6},\"max\":{:.6}}}",
        v.len(),
        rank(0.50),
        rank(0.99),
        v[v.len() - 1]
    )
}

/// A `/proc/self/status` field in kB (0 if missing).
fn proc_status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds of this process: the sum over its threads (nanoseconds from `schedstat`), or
/// where that is missing the whole process's utime+stime (10 ms ticks).
fn process_cpu_s() -> f64 {
    let tasks: Option<Vec<f64>> = std::fs::read_dir("/proc/self/task").ok().and_then(|d| {
        d.map(|e| {
            let tid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            schedstat_s(tid)
        })
        .collect()
    });
    tasks
        .map(|t| t.iter().sum())
        .or_else(|| stat_cpu_s("/proc/self/stat"))
        .unwrap_or(0.0)
}

/// utime+stime of a `/proc/.../stat` file, in seconds (the usual 100 ticks a second).
fn stat_cpu_s(path: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The task id of the I/O thread.
fn io_thread() -> Option<u32> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|e| {
        let e = e.ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim_end() == IO_THREAD)
            .then(|| e.file_name().to_str()?.parse().ok())
            .flatten()
    })
}

/// CPU seconds of one thread: nanoseconds from `schedstat`, else ticks from `stat`.
fn thread_cpu_s(tid: u32) -> Option<f64> {
    schedstat_s(tid).or_else(|| stat_cpu_s(&format!("/proc/self/task/{tid}/stat")))
}

/// Time a thread has run, from `/proc/self/task/TID/schedstat` (nanoseconds).
fn schedstat_s(tid: u32) -> Option<f64> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map(|ns| ns as f64 / 1e9)
}
