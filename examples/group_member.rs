//! A member of a consumer group that reports what happens to it, one line per event on
//! stdout: the driver of the group tests (`tests/common/java_member.rs` runs it beside the
//! Java client's `scripts/java/GroupMember.java`, which speaks the same lines) and of the
//! demo (`scripts/demo.sh`).
//!
//! ```text
//! cargo run --release --example group_member -- --bootstrap 127.0.0.1:19092 --group G --topics T
//! ```
//!
//! Options: `--bootstrap HOST:PORT --group G` and `--topics T1,T2` or `--pattern REGEX`
//! (required; `--pattern` subscribes with `subscribe_regex`: matched by the broker under
//! the consumer protocol, by this client under the classic one); `--protocol
//! classic|consumer` (`group.protocol`, default classic); `--assignor
//! range|roundrobin|cooperative-sticky` (classic: `partition.assignment.strategy`, default
//! `range,cooperative-sticky`); `--remote-assignor uniform|range` (consumer protocol:
//! `group.remote.assignor`, default the broker's); `--instance-id ID`
//! (`group.instance.id`); `--session-timeout-ms N` and `--heartbeat-ms N` (classic only:
//! under the consumer protocol the broker decides them, and setting them is a config
//! error, as with the Java client); `--max-poll-interval-ms N`; `--commit
//! revoke|none` (default `revoke`: `commit_offsets_sync` of the revoked partitions' consumed
//! offsets in `on_partitions_revoked`); `--auto-offset-reset earliest|latest|none`
//! (default `latest`); `--auto-commit true|false` (default false: this member commits in
//! its listener and on `commit`); `--commit-every-ms N` (also `commit_sync` of what was
//! consumed every N ms, after the records were printed); `--format lines|stamped|json`
//! (default `lines`: the lines below; `stamped`: the same lines, each after `@MS ` with
//! MS the wall-clock milliseconds when it was written, so that a reader can order the lines
//! of several members by when they happened rather than by when it read them; `json`: the
//! JSON lines below); `--on-error exit|continue`
//! (default `exit`: an error from `poll` or a commit ends the member; `continue` prints it
//! as a `warn` line and goes on, as an application that rides out faults does); `--set
//! KEY=VALUE` (any other property); `--log-file PATH` (the crate's log, `info` and above,
//! appended to PATH, each line after the wall-clock milliseconds as `stamped` writes them).
//!
//! Output lines (partitions as `TOPIC-PARTITION`, sorted, comma-separated, `-` for none;
//! GEN is `group_metadata().generation_id` at the callback: the generation under the
//! classic protocol, the member epoch under the consumer protocol): `ready`; `assigned GEN PARTS` (on entry of
//! `on_partitions_assigned`); `revoked GEN PARTS` (at the end of `on_partitions_revoked`,
//! after the commit); `lost GEN PARTS`; `record TOPIC PARTITION OFFSET VALUE` (VALUE missing
//! for a null value); `committed TOPIC-PARTITION=OFFSET,...`; `warn MESSAGE` (with
//! `--on-error continue`); `left`; `error MESSAGE` (exit 1).
//!
//! With `--format json` (the rebalance benchmark, `benches/rebalance.py`, whose Java and
//! librdkafka members print the same), one JSON object a line, each with `t`, the wall-clock
//! time in milliseconds since the Unix epoch (when the callback ran, or when `poll` returned
//! the records), and `ev`: `{"ev":"ready"}`; `{"ev":"assigned"|"revoked"|"lost","gen":GEN,
//! "parts":["T-P",...]}` (at the same moments as the lines above); `{"ev":"records",
//! "tp":"T-P","ranges":[[FIRST,LAST],...],"n":N,"ts":TS}` (one per partition and `poll`: the
//! offsets returned, as runs of consecutive offsets, how many, and the first one's record
//! timestamp); `{"ev":"committed",
//! "offsets":{"T-P":OFFSET,...}}`; `{"ev":"warn"|"error","msg":"..."}` (also a `warn` when
//! the commit in `on_partitions_revoked` fails, which the plain format only logs);
//! `{"ev":"left"}`; `{"ev":"metrics",...}` (on the `metrics` command, and just before the
//! consumer closes: the client's own figures from `Consumer::metrics`, under the Java
//! names in snake case, durations in ms, `null` for none: `rebalance_total`,
//! `rebalance_latency_total_ms`, `rebalance_latency_avg_ms`, `rebalance_latency_max_ms`,
//! `last_rebalance_latency_ms`, `last_rebalance_seconds_ago`, `failed_rebalance_total`,
//! `records_consumed_total`, `commit_total`, `commit_latency_avg_ms`,
//! `commit_latency_max_ms`, `assigned_partitions`, `unassigned_time_total_ms`).
//!
//! Commands on stdin, one per line: `pause-poll MS` (do not poll for MS milliseconds),
//! `commit` (`commit_sync` of what was consumed), `metrics` (print the `metrics` line;
//! `--format json` only), `close` (close, print `left`, exit 0); end of input is `close`.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_consumer::{
    Consumer, ConsumerConfig, ConsumerRecords, OffsetAndMetadata, RebalanceListener, TopicPartition,
};

/// `--format`, set once before any output.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Lines,
    /// The plain lines, each after `@MS ` (wall-clock milliseconds).
    Stamped,
    Json,
}

static FORMAT: OnceLock<Format> = OnceLock::new();

fn json() -> bool {
    FORMAT.get() == Some(&Format::Json)
}

fn main() {
    let code = match run() {
        Ok(()) => 0,
        Err(e) => {
            message("error", &e.to_string());
            1
        }
    };
    std::process::exit(code);
}

fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    if FORMAT.get() == Some(&Format::Stamped) {
        let _ = write!(stdout, "@{} ", now_ms());
    }
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// Milliseconds since the Unix epoch: the clock every member of the benchmark shares.
fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// `{"t":NOW,"ev":EV<rest>}` (`rest` starts with a comma, or is empty).
fn out_json(ev: &str, rest: &str) {
    out(&format!("{{\"t\":{},\"ev\":\"{ev}\"{rest}}}", now_ms()));
}

/// A JSON string literal.
fn quoted(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if (c as u32) < 0x20 => q.push_str(&format!("\\u{:04x}", c as u32)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A line without data: `ready`, `left`.
fn plain(word: &str) {
    if json() {
        out_json(word, "");
    } else {
        out(word);
    }
}

/// A `warn` or `error` line.
fn message(word: &str, msg: &str) {
    if json() {
        out_json(word, &format!(",\"msg\":{}", quoted(msg)));
    } else {
        out(&format!("{word} {}", msg.replace(['\n', '\r'], " ")));
    }
}

/// An `assigned`, `revoked` or `lost` line.
fn ownership(word: &str, generation: i32, list: &[TopicPartition]) {
    if json() {
        let mut v: Vec<&TopicPartition> = list.iter().collect();
        v.sort();
        let quoted: Vec<String> = v.iter().map(|tp| quoted(&tp.to_string())).collect();
        out_json(
            word,
            &format!(",\"gen\":{generation},\"parts\":[{}]", quoted.join(",")),
        );
    } else {
        out(&format!("{word} {generation} {}", parts(list)));
    }
}

/// The `committed` line.
fn committed(offsets: &HashMap<TopicPartition, OffsetAndMetadata>) {
    if json() {
        let mut v: Vec<(&TopicPartition, i64)> =
            offsets.iter().map(|(tp, o)| (tp, o.offset)).collect();
        v.sort();
        let list: Vec<String> = v
            .iter()
            .map(|(tp, o)| format!("{}:{o}", quoted(&tp.to_string())))
            .collect();
        out_json("committed", &format!(",\"offsets\":{{{}}}", list.join(",")));
    } else {
        out(&offsets_line(offsets));
    }
}

/// Milliseconds as a JSON number, or `null`.
fn ms(d: Option<Duration>) -> String {
    d.map_or_else(
        || "null".into(),
        |d| format!("{:.3}", d.as_secs_f64() * 1000.0),
    )
}

/// The `{"ev":"metrics"}` line: the figures the rebalance benchmark compares with what it
/// measures from the other lines (the Java member prints the same names).
fn metrics_json(consumer: &Consumer) {
    let m = consumer.metrics();
    out_json(
        "metrics",
        &format!(
            ",\"rebalance_total\":{},\"rebalance_latency_total_ms\":{},\
             \"rebalance_latency_avg_ms\":{},\"rebalance_latency_max_ms\":{},\
             \"last_rebalance_latency_ms\":{},\"last_rebalance_seconds_ago\":{},\
             \"failed_rebalance_total\":{},\"records_consumed_total\":{},\
             \"commit_total\":{},\"commit_latency_avg_ms\":{},\"commit_latency_max_ms\":{},\
             \"assigned_partitions\":{},\"unassigned_time_total_ms\":{}",
            m.rebalance_total,
            ms(Some(m.rebalance_latency_total)),
            ms(m.rebalance_latency_avg),
            ms(m.rebalance_latency_max),
            ms(m.last_rebalance_latency),
            m.last_rebalance_seconds_ago
                .map_or_else(|| "null".into(), |s| s.to_string()),
            m.failed_rebalance_total,
            m.records_consumed_total,
            m.commit_total,
            ms(m.commit_latency_avg),
            ms(m.commit_latency_max),
            m.assigned_partitions,
            ms(Some(m.unassigned_time_total)),
        ),
    );
}

/// `{"ev":"records"}` lines for what one `poll` returned: per partition, in the order
/// first seen, the offsets as runs of consecutive offsets.
fn records_json(records: &ConsumerRecords) {
    let mut order: Vec<String> = Vec::new();
    let mut runs: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
    let mut first_ts: HashMap<String, i64> = HashMap::new();
    for r in records {
        let tp = format!("{}-{}", r.topic(), r.partition());
        first_ts.entry(tp.clone()).or_insert(r.timestamp());
        let list = runs.entry(tp.clone()).or_insert_with(|| {
            order.push(tp);
            Vec::new()
        });
        match list.last_mut() {
            Some((_, last)) if *last + 1 == r.offset() => *last = r.offset(),
            _ => list.push((r.offset(), r.offset())),
        }
    }
    let t = now_ms();
    let mut stdout = std::io::stdout().lock();
    for tp in order {
        let list = &runs[&tp];
        let n: i64 = list.iter().map(|(a, b)| b - a + 1).sum();
        let ranges: Vec<String> = list.iter().map(|(a, b)| format!("[{a},{b}]")).collect();
        let _ = writeln!(
            stdout,
            "{{\"t\":{t},\"ev\":\"records\",\"tp\":{},\"ranges\":[{}],\"n\":{n},\"ts\":{}}}",
            quoted(&tp),
            ranges.join(","),
            first_ts[&tp]
        );
    }
    let _ = stdout.flush();
}

fn parts(list: &[TopicPartition]) -> String {
    let mut v: Vec<&TopicPartition> = list.iter().collect();
    v.sort();
    if v.is_empty() {
        return "-".into();
    }
    v.iter()
        .map(|tp| tp.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn offsets_line(offsets: &HashMap<TopicPartition, OffsetAndMetadata>) -> String {
    let mut v: Vec<(&TopicPartition, i64)> = offsets.iter().map(|(tp, o)| (tp, o.offset)).collect();
    v.sort();
    if v.is_empty() {
        return "committed -".into();
    }
    let list: Vec<String> = v.iter().map(|(tp, o)| format!("{tp}={o}")).collect();
    format!("committed {}", list.join(","))
}

/// Reports callbacks; commits the revoked partitions' consumed offsets first.
struct Reporter {
    commit_on_revoke: bool,
}

impl Reporter {
    fn generation(consumer: &mut Consumer) -> i32 {
        consumer.group_metadata().map_or(-1, |g| g.generation_id)
    }
}

impl RebalanceListener for Reporter {
    fn on_partitions_revoked(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        if self.commit_on_revoke {
            let offsets: HashMap<TopicPartition, OffsetAndMetadata> = consumer
                .consumed_offsets()
                .into_iter()
                .filter(|(tp, _)| partitions.contains(tp))
                .collect();
            if !offsets.is_empty() {
                match consumer.commit_offsets_sync(&offsets) {
                    Ok(()) => committed(&offsets),
                    Err(e) if json() => message("warn", &format!("commit on revoke failed: {e}")),
                    Err(e) => log::warn!("commit on revoke failed: {e}"),
                }
            }
        }
        ownership("revoked", Self::generation(consumer), partitions);
    }

    fn on_partitions_assigned(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        ownership("assigned", Self::generation(consumer), partitions);
    }

    fn on_partitions_lost(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        ownership("lost", Self::generation(consumer), partitions);
    }
}

/// `--log-file`: the crate's log, `info` and above, one stamped line per record.
struct FileLog {
    file: std::sync::Mutex<std::fs::File>,
}

impl FileLog {
    fn install(path: &str) -> AnyResult<()> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("--log-file {path}: {e}"))?;
        let logger = Box::leak(Box::new(FileLog {
            file: std::sync::Mutex::new(file),
        }));
        log::set_logger(logger).map_err(|e| format!("--log-file: {e}"))?;
        log::set_max_level(log::LevelFilter::Info);
        Ok(())
    }
}

impl log::Log for FileLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }

    fn log(&self, r: &log::Record) {
        if let Ok(mut f) = self.file.lock() {
            let _ = writeln!(f, "@{} {:<5} {}", now_ms(), r.level(), r.args());
        }
    }

    fn flush(&self) {}
}

fn stdin_lines() -> Receiver<Option<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) => {
                    if tx.send(Some(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(None);
    });
    rx
}

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

fn run() -> AnyResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts: HashMap<String, String> = HashMap::new();
    let mut extra: Vec<(String, String)> = Vec::new();
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let v = it.next().ok_or_else(|| format!("missing value for {k}"))?;
        if k == "--set" {
            let (key, value) = v
                .split_once('=')
                .ok_or_else(|| format!("--set {v}: expected KEY=VALUE"))?;
            extra.push((key.to_owned(), value.to_owned()));
        } else {
            opts.insert(k.clone(), v.clone());
        }
    }
    const KNOWN: [&str; 18] = [
        "--bootstrap",
        "--group",
        "--topics",
        "--pattern",
        "--protocol",
        "--assignor",
        "--remote-assignor",
        "--instance-id",
        "--session-timeout-ms",
        "--heartbeat-ms",
        "--max-poll-interval-ms",
        "--commit",
        "--auto-offset-reset",
        "--auto-commit",
        "--commit-every-ms",
        "--on-error",
        "--format",
        "--log-file",
    ];
    if let Some(k) = opts.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(format!("unknown option {k}").into());
    }
    let format = match opts.get("--format").map(String::as_str) {
        None | Some("lines") => Format::Lines,
        Some("stamped") => Format::Stamped,
        Some("json") => Format::Json,
        Some(v) => return Err(format!("bad --format {v}: lines, stamped or json").into()),
    };
    FORMAT
        .set(format)
        .map_err(|_| "the format is set once, before any output")?;
    if let Some(path) = opts.get("--log-file") {
        FileLog::install(path)?;
    }
    let need = |k: &str| {
        opts.get(k)
            .cloned()
            .ok_or_else(|| format!("{k} is required"))
    };
    let mut cfg = ConsumerConfig::new(&need("--bootstrap")?)
        .set("group.id", &need("--group")?)?
        .set("enable.auto.commit", "false")?;
    let mapping = [
        ("--protocol", "group.protocol"),
        ("--assignor", "partition.assignment.strategy"),
        ("--remote-assignor", "group.remote.assignor"),
        ("--instance-id", "group.instance.id"),
        ("--session-timeout-ms", "session.timeout.ms"),
        ("--heartbeat-ms", "heartbeat.interval.ms"),
        ("--max-poll-interval-ms", "max.poll.interval.ms"),
        ("--auto-offset-reset", "auto.offset.reset"),
        ("--auto-commit", "enable.auto.commit"),
    ];
    for (opt, key) in mapping {
        if let Some(v) = opts.get(opt) {
            cfg = cfg.set(key, v)?;
        }
    }
    for (k, v) in &extra {
        cfg = cfg.set(k, v)?;
    }
    let commit_on_revoke = opts.get("--commit").is_none_or(|v| v == "revoke");
    let commit_every = match opts.get("--commit-every-ms") {
        Some(ms) => Some(Duration::from_millis(
            ms.parse()
                .map_err(|_| format!("bad --commit-every-ms {ms}"))?,
        )),
        None => None,
    };
    let keep_going = match opts.get("--on-error").map(String::as_str) {
        None | Some("exit") => false,
        Some("continue") => true,
        Some(v) => return Err(format!("bad --on-error {v}: exit or continue").into()),
    };
    // An error ends the member, or with --on-error continue is reported and ridden out.
    let check = |r: kafka_consumer::Result<()>| -> AnyResult<()> {
        match r {
            Err(e) if keep_going => {
                message("warn", &e.to_string());
                Ok(())
            }
            r => Ok(r?),
        }
    };
    let mut last_commit = Instant::now();
    let listener = Reporter { commit_on_revoke };
    let mut consumer = Consumer::new(cfg)?;
    match (opts.get("--topics"), opts.get("--pattern")) {
        (Some(topics), None) => {
            let topics: Vec<&str> = topics.split(',').collect();
            consumer.subscribe_with_listener(&topics, listener)?;
        }
        (None, Some(pattern)) => consumer.subscribe_regex_with_listener(pattern, listener)?,
        _ => return Err("one of --topics and --pattern is required".into()),
    }
    plain("ready");
    let commands = stdin_lines();
    let mut paused_until: Option<Instant> = None;
    loop {
        match commands.try_recv() {
            Ok(Some(cmd)) => {
                let mut words = cmd.split_whitespace();
                match (words.next(), words.next()) {
                    (Some("pause-poll"), Some(ms)) => {
                        let ms: u64 = ms.parse().map_err(|_| format!("bad pause-poll {ms}"))?;
                        paused_until = Some(Instant::now() + Duration::from_millis(ms));
                    }
                    (Some("commit"), None) => {
                        let offsets = consumer.consumed_offsets();
                        let r = consumer.commit_offsets_sync(&offsets);
                        if r.is_ok() {
                            committed(&offsets);
                        }
                        check(r)?;
                    }
                    (Some("metrics"), None) if json() => metrics_json(&consumer),
                    (Some("close"), None) => break,
                    _ => return Err(format!("unknown command {cmd:?}").into()),
                }
            }
            Ok(None) | Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => {}
        }
        if let Some(until) = paused_until {
            if Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            paused_until = None;
        }
        let records = match consumer.poll(Duration::from_millis(100)) {
            Ok(records) => records,
            Err(e) => {
                check(Err(e))?;
                continue;
            }
        };
        if json() {
            if !records.is_empty() {
                records_json(&records);
            }
        } else {
            print_records(&records);
        }
        if commit_every.is_some_and(|every| last_commit.elapsed() >= every) {
            last_commit = Instant::now();
            let offsets = consumer.consumed_offsets();
            if !offsets.is_empty() {
                let r = consumer.commit_offsets_sync(&offsets);
                if r.is_ok() {
                    committed(&offsets);
                }
                check(r)?;
            }
        }
    }
    if json() {
        metrics_json(&consumer);
    }
    consumer.close()?;
    plain("left");
    Ok(())
}

/// The `record` lines of what one `poll` returned.
fn print_records(records: &ConsumerRecords) {
    for r in records {
        let value = r.value().map(String::from_utf8_lossy);
        match value {
            Some(v) => out(&format!(
                "record {} {} {} {v}",
                r.topic(),
                r.partition(),
                r.offset()
            )),
            None => out(&format!(
                "record {} {} {}",
                r.topic(),
                r.partition(),
                r.offset()
            )),
        }
    }
}
