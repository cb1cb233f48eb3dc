//! Rebalance benchmark contender (see `benches/README.md`, run by `benches/rebalance.py`):
//! librdkafka's consumer, through the `rdkafka` crate's `BaseConsumer`, as a member of a
//! consumer group in a process of its own, printing the same JSON lines as our member
//! (`examples/group_member.rs --format json`) and the Java one
//! (`scripts/java/GroupMember.java --format json`).
//!
//! ```text
//! rdkafka-group-member --bootstrap HOST:PORT --group G --topics T1,T2
//!     [--protocol classic|consumer] [--assignor range|roundrobin|cooperative-sticky]
//!     [--session-timeout-ms N] [--heartbeat-ms N] [--auto-offset-reset earliest|latest]
//!     [--commit revoke|none] [--commit-every-ms N] [--format json] [--set key=value]...
//! ```
//!
//! `--protocol`: `group.protocol` (librdkafka >= 2.12 has `consumer`, KIP-848);
//! `--assignor`: `partition.assignment.strategy` (classic only); `--set`: any librdkafka
//! property, applied last. The rebalance callback (`ConsumerContext::pre_rebalance` and
//! `post_rebalance`, around rust-rdkafka's own `rebalance`, which assigns incrementally
//! when the rebalance protocol is cooperative, as it is for `cooperative-sticky` and for
//! the consumer protocol) commits the consumed offsets of revoked partitions with a
//! synchronous commit before they are given up (`--commit revoke`, the default), never of
//! lost ones; `--commit-every-ms N` also commits what was consumed every N ms, after the
//! records were printed.
//!
//! Output, one JSON object a line, `t` in wall-clock milliseconds since the Unix epoch:
//! `{"ev":"ready"}` after subscribe; `{"ev":"assigned","gen":-1,"parts":["T-P",...]}`
//! after the assignment is applied (librdkafka does not expose the generation: -1);
//! `{"ev":"revoked",...}` after the commit, before the partitions are unassigned;
//! `{"ev":"lost",...}` (a revocation with `rd_kafka_assignment_lost`);
//! `{"ev":"records","tp":"T-P","ranges":[[FIRST,LAST],...],"n":N,"ts":TS}` per partition
//! and batch (what one blocking `poll` and the `poll(0)` calls right after it returned, at
//! most 500 records, timed at the blocking `poll`'s return; TS: the first record's
//! timestamp, -1 if it has none); `{"ev":"committed",
//! "offsets":{"T-P":O,...}}`; `{"ev":"warn"|"error","msg":"..."}`; `{"ev":"left"}` after
//! the consumer closed (`rd_kafka_consumer_close_queue`, its queue served until closed:
//! the revocation runs then).
//!
//! Commands on stdin, one a line: `close` (close, print `left`, exit 0); end of input is
//! `close`.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::sync::mpsc::{self, TryRecvError};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

fn main() {
    if let Err(e) = run() {
        message("error", &e.to_string());
        std::process::exit(1);
    }
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// `{"t":NOW,"ev":EV<rest>}` (`rest` starts with a comma, or is empty).
fn out_json(ev: &str, rest: &str) {
    out(&format!("{{\"t\":{},\"ev\":\"{ev}\"{rest}}}", now_ms()));
}

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

fn message(word: &str, msg: &str) {
    out_json(word, &format!(",\"msg\":{}", quoted(msg)));
}

/// (topic, partition) pairs of a list, sorted.
fn pairs(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = tpl
        .elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect();
    v.sort();
    v
}

fn ownership(word: &str, tpl: &TopicPartitionList) {
    let parts: Vec<String> = pairs(tpl)
        .iter()
        .map(|(t, p)| quoted(&format!("{t}-{p}")))
        .collect();
    out_json(word, &format!(",\"gen\":-1,\"parts\":[{}]", parts.join(",")));
}

/// The next offset to commit (last consumed + 1) per partition consumed since it was
/// (last) assigned. Shared by the poll loop and the rebalance callback, which runs inside
/// `poll` on the same thread (the lock is never contended).
type Consumed = Mutex<BTreeMap<(String, i32), i64>>;

struct Member {
    consumed: Consumed,
    commit_on_revoke: bool,
}

impl ClientContext for Member {}

impl ConsumerContext for Member {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let lost = consumer.assignment_lost();
        let mut offsets = BTreeMap::new();
        {
            let mut consumed = self.consumed.lock().unwrap_or_else(|e| e.into_inner());
            for tp in pairs(tpl) {
                if let Some(o) = consumed.remove(&tp) {
                    offsets.insert(tp, o);
                }
            }
        }
        if !lost && self.commit_on_revoke && !offsets.is_empty() {
            if let Err(e) = commit(consumer, &offsets) {
                message("warn", &format!("commit on revoke failed: {e}"));
            }
        }
        ownership(if lost { "lost" } else { "revoked" }, tpl);
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => ownership("assigned", tpl),
            Rebalance::Error(e) => message("warn", &format!("rebalance error: {e}")),
            Rebalance::Revoke(_) => {}
        }
    }
}

/// A synchronous commit of these offsets, then the `committed` line.
fn commit(
    consumer: &BaseConsumer<Member>,
    offsets: &BTreeMap<(String, i32), i64>,
) -> Result<(), rdkafka::error::KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for ((t, p), o) in offsets {
        tpl.add_partition_offset(t, *p, Offset::Offset(*o))?;
    }
    consumer.commit(&tpl, CommitMode::Sync)?;
    let list: Vec<String> = offsets
        .iter()
        .map(|((t, p), o)| format!("{}:{o}", quoted(&format!("{t}-{p}"))))
        .collect();
    out_json("committed", &format!(",\"offsets\":{{{}}}", list.join(",")));
    Ok(())
}

/// One batch of records: per partition, in the order first seen, runs of offsets.
#[derive(Default)]
struct Batch {
    order: Vec<(String, i32)>,
    runs: HashMap<(String, i32), Vec<(i64, i64)>>,
    first_ts: HashMap<(String, i32), i64>,
}

impl Batch {
    fn add(&mut self, topic: &str, partition: i32, offset: i64, timestamp: i64) {
        let key = (topic.to_owned(), partition);
        self.first_ts.entry(key.clone()).or_insert(timestamp);
        let list = self.runs.entry(key.clone()).or_insert_with(|| {
            self.order.push(key);
            Vec::new()
        });
        match list.last_mut() {
            Some((_, last)) if *last + 1 == offset => *last = offset,
            _ => list.push((offset, offset)),
        }
    }

    fn print(&self, t: u128) {
        let mut stdout = std::io::stdout().lock();
        for key in &self.order {
            let list = &self.runs[key];
            let n: i64 = list.iter().map(|(a, b)| b - a + 1).sum();
            let ranges: Vec<String> = list.iter().map(|(a, b)| format!("[{a},{b}]")).collect();
            let _ = writeln!(
                stdout,
                "{{\"t\":{t},\"ev\":\"records\",\"tp\":{},\"ranges\":[{}],\"n\":{n},\"ts\":{}}}",
                quoted(&format!("{}-{}", key.0, key.1)),
                ranges.join(","),
                self.first_ts[key]
            );
        }
        let _ = stdout.flush();
    }
}

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

fn run() -> AnyResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts: HashMap<String, String> = HashMap::new();
    let mut extra: Vec<(String, String)> = Vec::new();
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let v = it.next().ok_or_else(|| format!("missing value for {k}"))?;
        if k == "--set" || k == "-X" {
            let (key, value) = v
                .split_once('=')
                .ok_or_else(|| format!("{k} {v}: expected KEY=VALUE"))?;
            extra.push((key.to_owned(), value.to_owned()));
        } else {
            opts.insert(k.clone(), v.clone());
        }
    }
    const KNOWN: [&str; 10] = [
        "--bootstrap",
        "--group",
        "--topics",
        "--protocol",
        "--assignor",
        "--session-timeout-ms",
        "--heartbeat-ms",
        "--auto-offset-reset",
        "--commit",
        "--commit-every-ms",
    ];
    if let Some(k) = opts
        .keys()
        .find(|k| !KNOWN.contains(&k.as_str()) && k.as_str() != "--format")
    {
        return Err(format!("unknown option {k}").into());
    }
    if opts.get("--format").is_some_and(|f| f != "json") {
        return Err("only --format json".into());
    }
    let need = |k: &str| {
        opts.get(k)
            .cloned()
            .ok_or_else(|| format!("{k} is required"))
    };
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", need("--bootstrap")?)
        .set("group.id", need("--group")?)
        .set("client.id", "rdkafka-group-member")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    let mapping = [
        ("--protocol", "group.protocol"),
        ("--assignor", "partition.assignment.strategy"),
        ("--session-timeout-ms", "session.timeout.ms"),
        ("--heartbeat-ms", "heartbeat.interval.ms"),
        ("--auto-offset-reset", "auto.offset.reset"),
    ];
    for (opt, key) in mapping {
        if let Some(v) = opts.get(opt) {
            config.set(key, v);
        }
    }
    for (k, v) in &extra {
        config.set(k, v);
    }
    let commit_on_revoke = match opts.get("--commit").map(String::as_str) {
        None | Some("revoke") => true,
        Some("none") => false,
        Some(v) => return Err(format!("bad --commit {v}: revoke or none").into()),
    };
    let commit_every = match opts.get("--commit-every-ms") {
        Some(ms) => Some(Duration::from_millis(
            ms.parse()
                .map_err(|_| format!("bad --commit-every-ms {ms}"))?,
        )),
        None => None,
    };
    let member = Member {
        consumed: Mutex::new(BTreeMap::new()),
        commit_on_revoke,
    };
    let consumer: BaseConsumer<Member> = config.create_with_context(member)?;
    let topics = need("--topics")?;
    let topics: Vec<&str> = topics.split(',').collect();
    consumer.subscribe(&topics)?;
    out_json("ready", "");

    let (tx, commands) = mpsc::channel::<Option<String>>();
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

    let mut last_commit = Instant::now();
    loop {
        match commands.try_recv() {
            Ok(Some(cmd)) if cmd.trim().is_empty() => {}
            Ok(Some(cmd)) if cmd.trim() == "close" => break,
            Ok(Some(cmd)) => return Err(format!("unknown command {cmd:?}").into()),
            Ok(None) | Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => {}
        }
        let mut batch = Batch::default();
        let mut count = 0;
        let mut t = 0;
        let mut wait = Duration::from_millis(100);
        while count < 500 {
            match consumer.poll(wait) {
                None => break,
                Some(Err(e)) => message("warn", &format!("poll: {e}")),
                Some(Ok(m)) => {
                    if count == 0 {
                        t = now_ms();
                    }
                    count += 1;
                    let ts = m.timestamp().to_millis().unwrap_or(-1);
                    batch.add(m.topic(), m.partition(), m.offset(), ts);
                    consumer
                        .context()
                        .consumed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert((m.topic().to_owned(), m.partition()), m.offset() + 1);
                }
            }
            wait = Duration::ZERO;
        }
        if count > 0 {
            batch.print(t);
        }
        if commit_every.is_some_and(|every| last_commit.elapsed() >= every) {
            last_commit = Instant::now();
            let offsets = consumer
                .context()
                .consumed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if !offsets.is_empty() {
                if let Err(e) = commit(&consumer, &offsets) {
                    message("warn", &format!("commit failed: {e}"));
                }
            }
        }
    }
    // Leave the group: the revocation (and its commit) runs inside these polls.
    consumer.close_queue()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !consumer.closed() {
        if Instant::now() >= deadline {
            return Err("the consumer did not close within 60 s".into());
        }
        if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
            message("warn", &format!("poll while closing: {e}"));
        }
    }
    out_json("left", "");
    Ok(())
}
