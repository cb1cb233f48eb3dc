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
//! consumed every N ms, after the records were printed); `--on-error exit|continue`
//! (default `exit`: an error from `poll` or a commit ends the member; `continue` prints it
//! as a `warn` line and goes on, as an application that rides out faults does); `--set
//! KEY=VALUE` (any other property).
//!
//! Output lines (partitions as `TOPIC-PARTITION`, sorted, comma-separated, `-` for none;
//! GEN is `group_metadata().generation_id` at the callback: the generation under the
//! classic protocol, the member epoch under the consumer protocol): `ready`; `assigned GEN PARTS` (on entry of
//! `on_partitions_assigned`); `revoked GEN PARTS` (at the end of `on_partitions_revoked`,
//! after the commit); `lost GEN PARTS`; `record TOPIC PARTITION OFFSET VALUE` (VALUE missing
//! for a null value); `committed TOPIC-PARTITION=OFFSET,...`; `warn MESSAGE` (with
//! `--on-error continue`); `left`; `error MESSAGE` (exit 1).
//!
//! Commands on stdin, one per line: `pause-poll MS` (do not poll for MS milliseconds),
//! `commit` (`commit_sync` of what was consumed), `close` (close, print `left`, exit 0);
//! end of input is `close`.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use kafka_consumer::{
    Consumer, ConsumerConfig, OffsetAndMetadata, RebalanceListener, TopicPartition,
};

fn main() {
    let code = match run() {
        Ok(()) => 0,
        Err(e) => {
            out(&format!(
                "error {}",
                e.to_string().replace(['\n', '\r'], " ")
            ));
            1
        }
    };
    std::process::exit(code);
}

fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
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
                    Ok(()) => out(&offsets_line(&offsets)),
                    Err(e) => log::warn!("commit on revoke failed: {e}"),
                }
            }
        }
        let g = Self::generation(consumer);
        out(&format!("revoked {g} {}", parts(partitions)));
    }

    fn on_partitions_assigned(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        let g = Self::generation(consumer);
        out(&format!("assigned {g} {}", parts(partitions)));
    }

    fn on_partitions_lost(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        let g = Self::generation(consumer);
        out(&format!("lost {g} {}", parts(partitions)));
    }
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
    const KNOWN: [&str; 16] = [
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
    ];
    if let Some(k) = opts.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(format!("unknown option {k}").into());
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
                out(&format!(
                    "warn {}",
                    e.to_string().replace(['\n', '\r'], " ")
                ));
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
    out("ready");
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
                            out(&offsets_line(&offsets));
                        }
                        check(r)?;
                    }
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
        for r in &records {
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
        if commit_every.is_some_and(|every| last_commit.elapsed() >= every) {
            last_commit = Instant::now();
            let offsets = consumer.consumed_offsets();
            if !offsets.is_empty() {
                let r = consumer.commit_offsets_sync(&offsets);
                if r.is_ok() {
                    out(&offsets_line(&offsets));
                }
                check(r)?;
            }
        }
    }
    consumer.close()?;
    out("left");
    Ok(())
}
