//! A real log truncation on the local 3-node cluster (`scripts/cluster.sh`, see
//! `tests/common/cluster.rs`), and our consumer beside the Java `KafkaConsumer` on it.
//!
//! The topic lives on nodes 1 and 2 only, so node 3 keeps the controller quorum (two of
//! three) while they are disturbed, with `unclean.leader.election.enable=true` and
//! `min.insync.replicas=1`:
//!
//! 1. `OLD` records written with acks=all: both replicas have offsets 0..OLD.
//! 2. Node 2 (the follower) stops cleanly: the ISR shrinks to {1}. `LOST` more records
//!    written with acks=1 reach node 1 only, and the high watermark passes them. Our
//!    consumers (assigned, and group members of both protocols) and the Java ones read all
//!    `OLD + LOST` records (leader epoch E0); one of ours commits that position. One more
//!    of ours and of Java's return records only up to `HELD` and hold the rest fetched.
//! 3. Node 1 is killed (the controller quorum is lost, one voter of three, until node 2 is
//!    back), node 2 comes back on its old log, and the controller elects it although it is
//!    not in the ISR (an unclean election, which the controller makes by itself with the
//!    topic's setting; `elect-unclean` makes sure: its log ends at `OLD`, a new leader epoch
//!    starts there). `NEW` records are
//!    written to it: offsets `OLD..OLD + NEW`, past the consumers' position, so only the
//!    leader epochs tell the logs apart.
//! 4. Every consumer must find out (OffsetForLeaderEpoch: epoch E0 now ends at `OLD`) and
//!    read the new records from `OLD` on, skipping none and returning no lost one: ours
//!    with one `LogTruncation` error (divergent offset `OLD`) and then the records with
//!    `auto.offset.reset` earliest or latest, and after the application's seek with `none`;
//!    Java with `LogTruncationException` and `divergentOffsets()` with `none`, silently with
//!    earliest and latest (`SubscriptionState.maybeCompleteValidation` seeks to the
//!    divergent offset and only logs it). The consumers holding records from `HELD` on:
//!    ours drops the lost ones unreturned, without an error; Java's (not polled during the
//!    fault) may hand them out first and then read `OLD..` again, silently.
//! 5. New consumers starting from the committed position (and its leader epoch), ours and
//!    Java's, report the same truncation and resume at `OLD` too.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::*;
use kafka_consumer::{
    Consumer, ConsumerConfig, Error, ErrorKind, GroupProtocol, OffsetReset, TopicPartition,
};

/// Written with acks=all before the follower stops: on both replicas.
const OLD: i64 = 20;
/// Written with acks=1 while the follower is down: only on the leader that dies.
const LOST: i64 = 10;
/// Where the consumers that hold fetched records they have not returned yet stand.
const HELD: i64 = 15;
/// Written to the new leader after the unclean election (more than `LOST`: the new log
/// ends past the consumers' position).
const NEW: i64 = 15;

/// Prints past the test harness's output capture, so the figures show in CI logs.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "truncation test: {line}");
}

/// `TruncationClient produce`: `count` records `<prefix><i>` to partition 0 with `acks`;
/// returns the offsets of the first and the last.
fn produce(bootstrap: &str, topic: &str, acks: &str, prefix: &str, count: i64) -> (i64, i64) {
    let mut cmd = java("TruncationClient");
    cmd.arg("produce")
        .args(["--bootstrap", bootstrap, "--topic", topic, "--acks", acks])
        .args(["--prefix", prefix, "--count", &count.to_string()]);
    let out = run(&mut cmd, &format!("producing {prefix}* with acks={acks}"));
    let line = last_line(&out);
    let field = |k: &str| -> i64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("TruncationClient produce printed `{line}`"))
    };
    (field("first="), field("last="))
}

/// `prefix0 .. prefix<n-1>`.
fn named(prefix: &str, n: i64) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// One of our consumers: what `poll` returned, records as `(offset, value)`, and errors.
struct Ours {
    reset: OffsetReset,
    consumer: Consumer,
    records: Vec<(i64, String)>,
    errors: Vec<Error>,
}

impl Ours {
    /// Assigned `tp`; from offset 0 without a `group`, else from its committed offset.
    fn new(bootstrap: &str, tp: &TopicPartition, reset: OffsetReset, group: Option<&str>) -> Ours {
        Ours::with(bootstrap, tp, reset, group, None)
    }

    /// As [`Ours::new`], returning at most `max_poll` records per poll.
    fn with(
        bootstrap: &str,
        tp: &TopicPartition,
        reset: OffsetReset,
        group: Option<&str>,
        max_poll: Option<usize>,
    ) -> Ours {
        let mut config = ConsumerConfig::new(bootstrap)
            .client_id(&format!("it-truncation-{reset:?}"))
            .auto_offset_reset(reset)
            .default_api_timeout(Duration::from_secs(30))
            .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
            .retry_backoff(Duration::from_millis(100));
        if let Some(n) = max_poll {
            config = config.max_poll_records(n);
        }
        if let Some(g) = group {
            // Only the commit the test makes: the offset stays where the truncation is.
            config = config.group_id(g).enable_auto_commit(false);
        }
        let mut consumer = new_consumer(config);
        consumer.assign(std::slice::from_ref(tp)).expect("assign");
        if group.is_none() {
            consumer.seek(tp, 0).expect("seek");
        }
        Ours {
            reset,
            consumer,
            records: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// A member of `group` (auto.offset.reset=earliest, no auto-commit) subscribed to
    /// `topic`, with `protocol`.
    fn member(bootstrap: &str, topic: &str, group: &str, protocol: GroupProtocol) -> Ours {
        let config = ConsumerConfig::new(bootstrap)
            .client_id(&format!("it-truncation-member-{protocol:?}"))
            .group_id(group)
            .group_protocol(protocol)
            .enable_auto_commit(false)
            .auto_offset_reset(OffsetReset::Earliest)
            .default_api_timeout(Duration::from_secs(30))
            .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
            .retry_backoff(Duration::from_millis(100));
        let mut consumer = new_consumer(config);
        consumer.subscribe(&[topic]).expect("subscribe");
        Ours {
            reset: OffsetReset::Earliest,
            consumer,
            records: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Polls until `done` or `limit` (then panics with what came).
    fn poll_until(&mut self, limit: Duration, mut done: impl FnMut(&Ours) -> bool) {
        let end = Instant::now() + limit;
        while !done(self) {
            assert!(
                Instant::now() < end,
                "{:?}: gave up after {limit:?}: records {:?}, errors {:?}",
                self.reset,
                self.records,
                self.errors
            );
            match self.consumer.poll(Duration::from_millis(100)) {
                Ok(rs) => self.records.extend(rs.iter().map(|r| {
                    (
                        r.offset(),
                        String::from_utf8_lossy(r.value().unwrap_or_default()).into_owned(),
                    )
                })),
                Err(e) => {
                    report(&format!(
                        "{:?}: poll error: {e} (kind {:?})",
                        self.reset,
                        e.kind()
                    ));
                    self.errors.push(e);
                }
            }
        }
    }

    fn next_offset(&self) -> i64 {
        self.records.last().map_or(0, |r| r.0 + 1)
    }

    fn values(&self) -> Vec<String> {
        self.records.iter().map(|r| r.1.clone()).collect()
    }
}

impl Ours {
    /// After the truncation: exactly one `LogTruncation` error naming `tp`, the old
    /// `position` and `java_divergent`, then (after a seek to it with
    /// `auto.offset.reset=none`) the records `new` from `OLD` on. Returns the figures.
    fn expect_truncation(
        &mut self,
        what: &str,
        tp: &TopicPartition,
        position: i64,
        java_divergent: i64,
        new: &[String],
    ) -> String {
        let reset = self.reset;
        let end = OLD + new.len() as i64;
        self.poll_until(Duration::from_secs(60), |c| {
            c.next_offset() >= end || (reset == OffsetReset::None && !c.errors.is_empty())
        });
        let truncations: Vec<&Error> = self
            .errors
            .iter()
            .filter(|e| e.kind() == ErrorKind::LogTruncation)
            .collect();
        assert_eq!(truncations.len(), 1, "{what}: told once: {:?}", self.errors);
        let e = truncations[0];
        assert_eq!(e.partition(), Some(tp), "{e}");
        assert_eq!(
            e.offset(),
            Some(position),
            "{what}: the position before: {e}"
        );
        let divergent = e
            .divergent_offset()
            .unwrap_or_else(|| panic!("{what}: {e}"));
        assert_eq!(
            divergent, java_divergent,
            "{what}: our divergent offset against Java's"
        );
        let text = e.to_string();
        let next = if reset == OffsetReset::None {
            "seek".to_owned()
        } else {
            format!("reading resumes at offset {divergent}")
        };
        assert!(
            text.contains(&format!("position {position}"))
                && text.contains(&format!("offset {divergent}"))
                && text.contains(&next),
            "{what}: the message says where the log differs and what comes next: {text}"
        );
        if reset == OffsetReset::None {
            assert!(
                self.records.is_empty(),
                "{what}: nothing past the truncation: {:?}",
                self.records
            );
            // Stopped until the application seeks.
            let quiet = Instant::now() + Duration::from_secs(1);
            self.poll_until(Duration::from_secs(3), |_| Instant::now() >= quiet);
            assert!(
                self.records.is_empty(),
                "{what}: records before the seek: {:?}",
                self.records
            );
            self.consumer.seek(tp, divergent).expect("seek");
            self.poll_until(Duration::from_secs(30), |c| c.next_offset() >= end);
        }
        assert_eq!(self.errors.len(), 1, "{what}: {:?}", self.errors);
        let first = self.records.first().map(|r| r.0);
        assert_eq!(first, Some(OLD), "{what}: where reading resumed");
        assert_eq!(
            self.values(),
            new,
            "{what}: the new leader's records, nothing skipped"
        );
        assert_eq!(self.consumer.position(tp).expect("position"), end);
        format!(
            "{what} divergent={divergent} resumed at {}",
            first.unwrap_or(-1)
        )
    }
}

/// What the Java consumers reported after the truncation, from TruncationClient's lines
/// up to "done": the one `truncation` line (auto.offset.reset=none), and the `resumed`
/// line of each policy.
struct JavaOutcome {
    truncation: String,
    resumed: std::collections::BTreeMap<String, String>,
}

impl JavaOutcome {
    fn parse(mut next: impl FnMut() -> String) -> JavaOutcome {
        let mut truncation: Option<String> = None;
        let mut resumed = std::collections::BTreeMap::new();
        loop {
            let line = next();
            if line == "done" {
                break;
            }
            if line.starts_with("truncation ") {
                assert!(truncation.is_none(), "twice: {line}");
                truncation = Some(line);
            } else if line.starts_with("resumed ") {
                let reset = line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                resumed.insert(reset, line);
            } else {
                panic!("TruncationClient: {line}");
            }
        }
        let truncation =
            truncation.expect("Java (auto.offset.reset=none) got no LogTruncationException");
        assert!(truncation.starts_with("truncation none "), "{truncation}");
        JavaOutcome {
            truncation,
            resumed,
        }
    }

    /// The divergent offset of the LogTruncationException, checked against the position
    /// and the epoch it was read at; the resume point and records of every policy checked.
    fn check(&self, position: i64, epoch0: i32, resets: &[&str], new: &[String]) -> i64 {
        let t = &self.truncation;
        let divergent: i64 = field(t, "divergent").parse().expect("a divergent offset");
        assert_eq!(field(t, "position"), position.to_string(), "{t}");
        assert_eq!(field(t, "epoch"), epoch0.to_string(), "{t}");
        assert_eq!(divergent, OLD, "Java: {t}");
        for reset in resets {
            let line = self
                .resumed
                .get(*reset)
                .unwrap_or_else(|| panic!("Java {reset} did not resume: {:?}", self.resumed));
            assert_eq!(field(line, "first"), OLD.to_string(), "{line}");
            assert_eq!(field(line, "values"), new.join(","), "{line}");
        }
        divergent
    }

    fn first(&self, reset: &str) -> &str {
        field(&self.resumed[reset], "first")
    }
}

/// `key=value` fields of a TruncationClient line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in `{line}`"))
}

#[test]
fn an_unclean_election_truncating_the_log_is_reported_with_the_java_consumers_divergent_offset() {
    let started = Instant::now();
    let cluster = Cluster::from_env();
    let bootstrap = cluster.bootstrap().to_owned();
    let topic = unique_topic("truncation");
    let group = format!("{topic}-group");
    let tp = TopicPartition::new(topic.as_str(), 0);
    cluster.create_topic_on(
        &topic,
        1,
        &[1, 2],
        &[
            ("unclean.leader.election.enable", "true"),
            ("min.insync.replicas", "1"),
        ],
    );
    let before = cluster.describe(&topic);
    assert_eq!(
        (before[0].leader, before[0].isr.as_slice()),
        (Some(1), &[1, 2][..]),
        "{before:?}"
    );
    let epoch0 = before[0].leader_epoch;

    // 1. On both replicas.
    assert_eq!(
        produce(&bootstrap, &topic, "all", "old-", OLD),
        (0, OLD - 1)
    );
    // 2. The follower stops; what follows reaches the leader alone.
    cluster.stop_node(2);
    let shrunk = cluster.describe(&topic);
    assert_eq!(
        shrunk[0].isr,
        vec![1],
        "ISR after node 2 stopped: {shrunk:?}"
    );
    assert_eq!(
        produce(&bootstrap, &topic, "1", "lost-", LOST),
        (OLD, OLD + LOST - 1)
    );
    let position = OLD + LOST;
    let read: Vec<String> = named("old-", OLD)
        .into_iter()
        .chain(named("lost-", LOST))
        .collect();

    let mut ours: Vec<Ours> = [
        OffsetReset::Earliest,
        OffsetReset::Latest,
        OffsetReset::None,
    ]
    .into_iter()
    .map(|reset| {
        // The first one also commits its position (with the leader epoch of the last
        // record) to `group`, for the consumers started after the truncation.
        let g = (reset == OffsetReset::Earliest).then_some(group.as_str());
        Ours::new(&bootstrap, &tp, reset, g)
    })
    .collect();
    for c in &mut ours {
        c.poll_until(Duration::from_secs(30), |c| c.next_offset() >= position);
        assert_eq!(c.values(), read, "{:?} before the truncation", c.reset);
        assert!(c.errors.is_empty(), "{:?}: {:?}", c.reset, c.errors);
        assert_eq!(c.consumer.position(&tp).expect("position"), position);
        c.records.clear();
    }
    ours[0].consumer.commit_sync().expect("commit");
    // Group members, one per protocol, each alone in its group: they commit what they
    // read, so a rebalance during the fault would start them from there again.
    let mut members: Vec<(GroupProtocol, Ours)> = [GroupProtocol::Classic, GroupProtocol::Consumer]
        .into_iter()
        .map(|protocol| {
            let g = format!("{group}-member-{protocol:?}");
            (protocol, Ours::member(&bootstrap, &topic, &g, protocol))
        })
        .collect();
    for (protocol, m) in &mut members {
        m.poll_until(Duration::from_secs(60), |c| c.next_offset() >= position);
        assert_eq!(
            m.values(),
            read,
            "member ({protocol:?}) before the truncation"
        );
        assert!(m.errors.is_empty(), "member ({protocol:?}): {:?}", m.errors);
        m.consumer.commit_sync().expect("commit");
        m.records.clear();
    }
    // One more that has returned only the records before `HELD`: the others, up to
    // `position`, wait in its buffer.
    let mut held = Ours::with(&bootstrap, &tp, OffsetReset::Earliest, None, Some(5));
    held.poll_until(Duration::from_secs(30), |c| c.next_offset() >= HELD);
    assert_eq!(
        held.values(),
        read[..HELD as usize],
        "held before the truncation"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = held.consumer.partition_metrics();
        let pm = &m[0];
        if pm.position == Some(HELD) && HELD + pm.buffered_records as i64 == position {
            break;
        }
        assert!(Instant::now() < deadline, "held: not all fetched: {pm:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    held.records.clear();

    let mut cmd = java("TruncationClient");
    cmd.arg("consume")
        .args(["--bootstrap", &bootstrap, "--topic", &topic])
        .args(["--resets", "none,earliest,latest"])
        .args(["--until", &position.to_string()])
        .args(["--held", &HELD.to_string()]);
    let mut java_live = JavaProcess::spawn(cmd, "TruncationClient consume", "ready ");
    // The first ready line was consumed by spawn; the others follow.
    loop {
        let line = java_live.next_line(Duration::from_secs(60));
        if line == "ready" {
            break;
        }
        assert!(line.starts_with("ready "), "{line}");
        let at = if line.starts_with("ready held ") {
            HELD
        } else {
            position
        };
        assert_eq!(field(&line, "position"), at.to_string(), "{line}");
        assert_eq!(field(&line, "epoch"), epoch0.to_string(), "{line}");
    }

    // 3. The leader dies; the stale follower comes back and is elected uncleanly.
    let fault = Instant::now();
    cluster.kill(1);
    cluster.restart(2);
    let after = cluster.elect_unclean(&topic);
    report(&format!(
        "after the unclean election: {:?} (before: leader epoch {epoch0}), {:.1} s after the kill",
        after[0],
        fault.elapsed().as_secs_f64()
    ));
    assert_eq!(after[0].leader, Some(2), "{after:?}");
    assert!(after[0].leader_epoch > epoch0, "{after:?}");
    assert_eq!(
        produce(&bootstrap, &topic, "1", "new-", NEW),
        (OLD, OLD + NEW - 1),
        "the new leader's log ended at {OLD}"
    );
    let end = OLD + NEW;
    let new = named("new-", NEW);

    // 4. The consumers that read up to `position`: Java.
    java_live.send_line(&format!("go {end}"));
    let live = JavaOutcome::parse(|| java_live.next_line(Duration::from_secs(70)));
    java_live.finish();
    let java_divergent = live.check(position, epoch0, &["none", "earliest", "latest"], &new);

    // Ours.
    let mut figures = Vec::new();
    for c in &mut ours {
        let what = format!("ours {:?}", c.reset);
        figures.push(c.expect_truncation(&what, &tp, position, java_divergent, &new));
    }
    drop(ours);
    for (protocol, m) in &mut members {
        let what = format!("group member ({protocol:?})");
        figures.push(m.expect_truncation(&what, &tp, position, java_divergent, &new));
    }
    drop(members);

    // The one that had not returned the lost records: nothing it returned is gone, so no
    // error; the rest of the old records and then the new ones, as Java's.
    held.poll_until(Duration::from_secs(60), |c| c.next_offset() >= end);
    assert!(held.errors.is_empty(), "held: {:?}", held.errors);
    let held_expected: Vec<String> = named("old-", OLD)[HELD as usize..]
        .iter()
        .cloned()
        .chain(new.iter().cloned())
        .collect();
    let offsets: Vec<i64> = held.records.iter().map(|r| r.0).collect();
    assert_eq!(
        offsets,
        (HELD..end).collect::<Vec<_>>(),
        "held: no gap, no repeat"
    );
    assert_eq!(
        held.values(),
        held_expected,
        "held: no lost record returned"
    );
    // Java's returns what it holds unless it hears of the new leader first: it did not
    // poll during the fault, so it may hand out the lost records from its buffer, then
    // find the truncation at offset 30 and go back to 20 silently (auto.offset.reset
    // earliest): offsets 20..29 twice, with different records, and no exception.
    let java_held = &live.resumed["held"];
    assert_eq!(field(java_held, "first"), HELD.to_string(), "{java_held}");
    let java_values: Vec<&str> = field(java_held, "values").split(',').collect();
    let java_lost = java_values
        .iter()
        .filter(|v| v.starts_with("lost-"))
        .count();
    let java_expected: Vec<String> = if java_lost == 0 {
        held_expected.clone()
    } else {
        named("old-", OLD)[HELD as usize..]
            .iter()
            .cloned()
            .chain(named("lost-", LOST))
            .chain(new.iter().cloned())
            .collect()
    };
    assert_eq!(java_values, java_expected, "Java held: {java_held}");
    figures.push(format!(
        "ours held at {HELD}: no error, no lost record, resumed at {HELD}; Java held at {HELD}: no exception, {java_lost} lost records returned{}",
        if java_lost > 0 { ", then offsets 20.. again (the new records)" } else { "" }
    ));
    drop(held);

    // 5. New consumers starting from the offset committed before the truncation (with
    // the leader epoch of the record before it), Java's and ours.
    let mut cmd = java("TruncationClient");
    cmd.arg("committed")
        .args([
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--group",
            &group,
        ])
        .args(["--resets", "none,earliest", "--end", &end.to_string()]);
    // (Side by side with ours, to save time; both must find OLD, checked by `check`.)
    let java_committed = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting TruncationClient committed");
    for reset in [OffsetReset::Earliest, OffsetReset::None] {
        let mut c = Ours::new(&bootstrap, &tp, reset, Some(&group));
        let what = format!("ours {reset:?} from the committed offset");
        figures.push(c.expect_truncation(&what, &tp, position, OLD, &new));
    }
    let out = java_committed
        .wait_with_output()
        .expect("waiting for TruncationClient committed");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = out.lines().map(str::to_owned);
    let committed = JavaOutcome::parse(|| lines.next().unwrap_or_else(|| panic!("{out}")));
    let java_committed_divergent = committed.check(position, epoch0, &["none", "earliest"], &new);

    report(&format!(
        "old position {position} (epoch {epoch0}), new leader's log from {OLD} (epoch {}); {}; Java none divergent={java_divergent} (LogTruncationException), Java resumed at none={} earliest={} latest={} held={}; from the committed offset Java none divergent={java_committed_divergent}, resumed at none={} earliest={}; {:.1} s in all",
        after[0].leader_epoch,
        figures.join(", "),
        live.first("none"),
        live.first("earliest"),
        live.first("latest"),
        live.first("held"),
        committed.first("none"),
        committed.first("earliest"),
        started.elapsed().as_secs_f64()
    ));
}
