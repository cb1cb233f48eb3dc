//! A group member in a process of its own: a Java `KafkaConsumer`
//! (`scripts/java/GroupMember.java`, see the comment at its top for the options and the
//! line format) or ours (`examples/group_member.rs`, which speaks the same lines): started,
//! then observed through the events it prints (`--format stamped`), each kept with the
//! moment its member wrote it (its stamp, never later than when it was read).
//!
//! Partitions are owned from their `assigned` line until their `revoked` or `lost` line,
//! or until the process ends (a killed member owns nothing, whatever the broker thinks).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A topic partition: (topic, partition).
pub type Partition = (String, i32);
/// The partitions a member owns.
pub type Owned = BTreeSet<Partition>;

/// One stdout line of the Java member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Ready,
    Assigned {
        generation: i32,
        partitions: Vec<Partition>,
    },
    Revoked {
        generation: i32,
        partitions: Vec<Partition>,
    },
    Lost {
        generation: i32,
        partitions: Vec<Partition>,
    },
    /// `value` is `None` for a null value.
    Record {
        topic: String,
        partition: i32,
        offset: i64,
        value: Option<String>,
    },
    /// (topic, partition, offset) per committed partition.
    Committed {
        offsets: Vec<(String, i32, i64)>,
    },
    Left,
    /// A `warn` line: an error the member rode out (`--on-error continue`).
    Warn(String),
    /// An `error` line, or a line that does not parse.
    Error(String),
}

/// `TOPIC-PARTITION` (topic names may hold `-`).
fn partition(s: &str) -> Option<Partition> {
    let (t, p) = s.rsplit_once('-')?;
    Some((t.to_owned(), p.parse().ok()?))
}

fn partitions(s: &str) -> Option<Vec<Partition>> {
    if s == "-" {
        return Some(Vec::new());
    }
    s.split(',').map(partition).collect()
}

fn join(partitions: &[Partition]) -> String {
    if partitions.is_empty() {
        return "-".into();
    }
    let v: Vec<String> = partitions.iter().map(|(t, p)| format!("{t}-{p}")).collect();
    v.join(",")
}

/// The line it was parsed from (an unparsed line as `error unparsed line: ...`).
impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Ready => write!(f, "ready"),
            Event::Assigned {
                generation,
                partitions,
            } => write!(f, "assigned {generation} {}", join(partitions)),
            Event::Revoked {
                generation,
                partitions,
            } => write!(f, "revoked {generation} {}", join(partitions)),
            Event::Lost {
                generation,
                partitions,
            } => write!(f, "lost {generation} {}", join(partitions)),
            Event::Record {
                topic,
                partition,
                offset,
                value,
            } => match value {
                Some(v) => write!(f, "record {topic} {partition} {offset} {v}"),
                None => write!(f, "record {topic} {partition} {offset}"),
            },
            Event::Committed { offsets } if offsets.is_empty() => write!(f, "committed -"),
            Event::Committed { offsets } => {
                let v: Vec<String> = offsets
                    .iter()
                    .map(|(t, p, o)| format!("{t}-{p}={o}"))
                    .collect();
                write!(f, "committed {}", v.join(","))
            }
            Event::Left => write!(f, "left"),
            Event::Warn(m) => write!(f, "warn {m}"),
            Event::Error(m) => write!(f, "error {m}"),
        }
    }
}

impl Event {
    pub fn parse(line: &str) -> Event {
        Event::try_parse(line).unwrap_or_else(|| Event::Error(format!("unparsed line: {line}")))
    }

    fn try_parse(line: &str) -> Option<Event> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let owned = |rest: &str| -> Option<(i32, Vec<Partition>)> {
            let (g, ps) = rest.split_once(' ')?;
            Some((g.parse().ok()?, partitions(ps)?))
        };
        Some(match word {
            "ready" => Event::Ready,
            "left" => Event::Left,
            "error" => Event::Error(rest.to_owned()),
            "warn" => Event::Warn(rest.to_owned()),
            "assigned" => {
                let (generation, partitions) = owned(rest)?;
                Event::Assigned {
                    generation,
                    partitions,
                }
            }
            "revoked" => {
                let (generation, partitions) = owned(rest)?;
                Event::Revoked {
                    generation,
                    partitions,
                }
            }
            "lost" => {
                let (generation, partitions) = owned(rest)?;
                Event::Lost {
                    generation,
                    partitions,
                }
            }
            "record" => {
                let mut f = rest.splitn(4, ' ');
                let topic = f.next()?.to_owned();
                let partition = f.next()?.parse().ok()?;
                let offset = f.next()?.parse().ok()?;
                let value = f.next().map(str::to_owned);
                Event::Record {
                    topic,
                    partition,
                    offset,
                    value,
                }
            }
            "committed" if rest == "-" => Event::Committed {
                offsets: Vec::new(),
            },
            "committed" => Event::Committed {
                offsets: rest
                    .split(',')
                    .map(|e| {
                        let (tp, o) = e.split_once('=')?;
                        let (t, p) = partition(tp)?;
                        Some((t, p, o.parse().ok()?))
                    })
                    .collect::<Option<_>>()?,
            },
            _ => return None,
        })
    }
}

/// Options of [`JavaMember::start`]; `None` leaves the Java client's default.
#[derive(Debug, Clone)]
pub struct JavaMemberOptions {
    /// Another broker than the shared test broker.
    pub bootstrap: Option<String>,
    pub group: String,
    pub topics: Vec<String>,
    /// A regex subscription instead of `topics` (matched by the broker under the consumer
    /// protocol, by the client under the classic one).
    pub pattern: Option<String>,
    /// `classic` or `consumer` (KIP-848).
    pub protocol: String,
    /// Classic: `range`, `roundrobin`, `sticky` or `cooperative-sticky`.
    pub assignor: Option<String>,
    /// Consumer protocol: `uniform` or `range`.
    pub remote_assignor: Option<String>,
    pub instance_id: Option<String>,
    /// Classic only.
    pub session_timeout_ms: Option<u64>,
    /// Classic only.
    pub heartbeat_ms: Option<u64>,
    pub max_poll_interval_ms: Option<u64>,
    /// Commit the consumed offsets of revoked partitions in `onPartitionsRevoked`.
    pub commit_on_revoke: bool,
    /// `earliest` unless changed (`None`: the Java default, `latest`).
    pub auto_offset_reset: Option<String>,
    /// Any other consumer properties (security settings, for instance), by their Java
    /// names: `--prop` for the Java member, `--set` for ours.
    pub props: Vec<(String, String)>,
    /// Ours only: also commit what was consumed every this many milliseconds.
    pub commit_every_ms: Option<u64>,
    /// Ours only: ride out `poll` and commit errors (`warn` lines) instead of exiting.
    pub on_error_continue: bool,
    /// Ours only: append the crate's log (`info` and above) to this file.
    pub log_file: Option<std::path::PathBuf>,
}

impl JavaMemberOptions {
    /// Classic protocol, Java's default assignor, commit on revoke, `earliest`.
    pub fn new(group: &str, topics: &[&str]) -> Self {
        JavaMemberOptions {
            bootstrap: None,
            group: group.to_owned(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            pattern: None,
            protocol: "classic".into(),
            assignor: None,
            remote_assignor: None,
            instance_id: None,
            session_timeout_ms: None,
            heartbeat_ms: None,
            max_poll_interval_ms: None,
            commit_on_revoke: true,
            auto_offset_reset: Some("earliest".into()),
            props: Vec::new(),
            commit_every_ms: None,
            on_error_continue: false,
            log_file: None,
        }
    }
}

#[derive(Default)]
struct Log {
    events: Vec<(Instant, Event)>,
    /// When its stdout closed (it exited or was killed).
    ended: Option<Instant>,
}

/// The time base of the logs in failure messages: the first member's start, so that all
/// members' times compare.
fn epoch() -> Instant {
    anchor().0
}

/// The first member's start on both clocks: an `Instant`, and the wall-clock milliseconds
/// the members stamp their lines with (`--format stamped`).
fn anchor() -> (Instant, u128) {
    static ANCHOR: std::sync::OnceLock<(Instant, u128)> = std::sync::OnceLock::new();
    *ANCHOR.get_or_init(|| (Instant::now(), wall_ms()))
}

fn wall_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// When a line read at `read` happened: its member's stamp (`@MS `, wall-clock milliseconds
/// when it was written) taken as the end of that millisecond, and never later than the
/// read. Ordering lines of several members by when they were read is wrong by however long
/// a reader thread waited to be scheduled (a revoke read 2 ms after the assignment it came
/// before, on a loaded machine); by their stamps it is right to the millisecond.
fn stamped(line: &str, read: Instant) -> (Instant, &str) {
    let Some((ms, rest)) = line
        .strip_prefix('@')
        .and_then(|l| l.split_once(' '))
        .and_then(|(ms, rest)| Some((ms.parse::<u128>().ok()?, rest)))
    else {
        return (read, line);
    };
    let (at, at_ms) = anchor();
    let after = u64::try_from((ms + 1).saturating_sub(at_ms)).unwrap_or(u64::MAX);
    let happened = at
        .checked_add(Duration::from_millis(after))
        .map_or(read, |t| t.min(read));
    (happened, rest)
}

/// A running `GroupMember.java`; killed on drop.
pub struct JavaMember {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    log: Arc<Mutex<Log>>,
    reader: Option<JoinHandle<()>>,
}

/// The owned set after these events.
pub fn owned_after(events: &[(Instant, Event)]) -> Owned {
    let mut owned = Owned::new();
    for (_, e) in events {
        match e {
            Event::Assigned { partitions, .. } => owned.extend(partitions.iter().cloned()),
            Event::Revoked { partitions, .. } | Event::Lost { partitions, .. } => {
                for p in partitions {
                    owned.remove(p);
                }
            }
            _ => {}
        }
    }
    owned
}

impl JavaMember {
    /// Starts the Java member and waits (90 s) for its `ready` line.
    pub fn start(opts: &JavaMemberOptions) -> JavaMember {
        let m = Self::launch(opts);
        m.wait_ready();
        m
    }

    /// Starts the Java member without waiting for `ready` (for one expected to fail).
    pub fn launch(opts: &JavaMemberOptions) -> JavaMember {
        Self::start_with(super::java("GroupMember"), "java", opts)
    }

    /// Starts our consumer (`examples/group_member.rs`, built by `cargo test --all-targets`)
    /// with the same options and waits (90 s) for its `ready` line.
    pub fn start_ours(opts: &JavaMemberOptions) -> JavaMember {
        let m = Self::launch_ours(opts);
        m.wait_ready();
        m
    }

    /// Starts our member without waiting for `ready` (for one expected to fail).
    pub fn launch_ours(opts: &JavaMemberOptions) -> JavaMember {
        let exe = std::env::current_exe().expect("test binary path");
        // target/<profile>/deps/<test> -> target/<profile>/examples/group_member
        let bin = exe
            .parent()
            .and_then(|deps| deps.parent())
            .map(|dir| dir.join("examples").join("group_member"))
            .expect("target directory");
        assert!(
            bin.exists(),
            "{} is missing: build it with `cargo build --release --example group_member` (cargo test --all-targets does)",
            bin.display()
        );
        let mut cmd = std::process::Command::new(bin);
        cmd.env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_default());
        Self::start_with(cmd, "our", opts)
    }

    fn start_with(
        mut cmd: std::process::Command,
        kind: &str,
        opts: &JavaMemberOptions,
    ) -> JavaMember {
        epoch();
        let bootstrap = opts
            .bootstrap
            .as_deref()
            .unwrap_or_else(|| super::bootstrap());
        cmd.args(["--bootstrap", bootstrap])
            .args(["--format", "stamped"])
            .args(["--group", &opts.group])
            .args(["--protocol", &opts.protocol])
            .args([
                "--commit",
                if opts.commit_on_revoke {
                    "revoke"
                } else {
                    "none"
                },
            ]);
        let topics = (!opts.topics.is_empty()).then(|| opts.topics.join(","));
        let optional = [
            ("--topics", topics),
            ("--pattern", opts.pattern.clone()),
            ("--assignor", opts.assignor.clone()),
            ("--remote-assignor", opts.remote_assignor.clone()),
            ("--instance-id", opts.instance_id.clone()),
            (
                "--session-timeout-ms",
                opts.session_timeout_ms.map(|n| n.to_string()),
            ),
            ("--heartbeat-ms", opts.heartbeat_ms.map(|n| n.to_string())),
            (
                "--max-poll-interval-ms",
                opts.max_poll_interval_ms.map(|n| n.to_string()),
            ),
            ("--auto-offset-reset", opts.auto_offset_reset.clone()),
        ];
        for (k, v) in optional {
            if let Some(v) = v {
                cmd.args([k, &v]);
            }
        }
        if kind == "our" {
            if let Some(ms) = opts.commit_every_ms {
                cmd.args(["--commit-every-ms", &ms.to_string()]);
            }
            if opts.on_error_continue {
                cmd.args(["--on-error", "continue"]);
            }
            if let Some(path) = &opts.log_file {
                cmd.arg("--log-file").arg(path);
            }
        } else {
            assert!(
                opts.commit_every_ms.is_none()
                    && !opts.on_error_continue
                    && opts.log_file.is_none(),
                "GroupMember.java has no --commit-every-ms, --on-error or --log-file"
            );
        }
        let prop = if kind == "our" { "--set" } else { "--prop" };
        for (k, v) in &opts.props {
            cmd.args([prop, &format!("{k}={v}")]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {kind} group member: {e}"));
        let name = format!(
            "{kind} {} member {} ({}) of {}",
            opts.protocol,
            opts.instance_id.as_deref().unwrap_or("-"),
            child.id(),
            opts.group
        );
        let stdout = child.stdout.take().expect("piped stdout");
        let log = Arc::new(Mutex::new(Log::default()));
        let reader = {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let (at, line) = stamped(&line, Instant::now());
                    let event = Event::parse(line);
                    log.lock().unwrap().events.push((at, event));
                }
                log.lock().unwrap().ended = Some(Instant::now());
            })
        };
        JavaMember {
            name,
            stdin: child.stdin.take(),
            child,
            log,
            reader: Some(reader),
        }
    }

    /// Waits (90 s) for its `ready` line.
    pub fn wait_ready(&self) {
        self.wait_for("ready", Duration::from_secs(90), |e| {
            e.iter().any(|(_, e)| *e == Event::Ready)
        });
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it printed so far, with the moment each line was read.
    pub fn events(&self) -> Vec<(Instant, Event)> {
        self.log.lock().unwrap().events.clone()
    }

    /// When its stdout closed (it exited or was killed), if it did.
    pub fn ended(&self) -> Option<Instant> {
        self.log.lock().unwrap().ended
    }

    /// The partitions it owns now (as its listener said).
    pub fn owned(&self) -> Owned {
        owned_after(&self.log.lock().unwrap().events)
    }

    /// Every record it polled, in order: ((topic, partition), offset, value).
    pub fn records(&self) -> Vec<(Partition, i64, Option<String>)> {
        let log = self.log.lock().unwrap();
        log.events
            .iter()
            .filter_map(|(_, e)| match e {
                Event::Record {
                    topic,
                    partition,
                    offset,
                    value,
                } => Some(((topic.clone(), *partition), *offset, value.clone())),
                _ => None,
            })
            .collect()
    }

    pub fn record_count(&self) -> usize {
        let log = self.log.lock().unwrap();
        log.events
            .iter()
            .filter(|(_, e)| matches!(e, Event::Record { .. }))
            .count()
    }

    /// Waits until `done` holds for its events. Panics with the log after `limit`, or at
    /// once if it printed an error or ended first.
    pub fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        mut done: impl FnMut(&[(Instant, Event)]) -> bool,
    ) {
        let deadline = Instant::now() + limit;
        loop {
            {
                let log = self.log.lock().unwrap();
                if done(&log.events) {
                    return;
                }
                let failed = log.events.iter().any(|(_, e)| matches!(e, Event::Error(_)));
                if failed || log.ended.is_some() || Instant::now() >= deadline {
                    let why = if failed {
                        "it failed"
                    } else if log.ended.is_some() {
                        "it ended"
                    } else {
                        "timed out"
                    };
                    drop(log);
                    panic!(
                        "{}: waiting for {what}: {why}\n{}",
                        self.name,
                        self.describe()
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until `done` holds for its owned set; returns that set.
    pub fn wait_owned(&self, what: &str, limit: Duration, done: impl Fn(&Owned) -> bool) -> Owned {
        let mut got = Owned::new();
        self.wait_for(what, limit, |e| {
            got = owned_after(e);
            done(&got)
        });
        got
    }

    /// Waits until it has polled at least `n` records.
    pub fn wait_records(&self, n: usize, limit: Duration) {
        self.wait_for(&format!("{n} records"), limit, |e| {
            e.iter()
                .filter(|(_, e)| matches!(e, Event::Record { .. }))
                .count()
                >= n
        });
    }

    /// Sends a command line (`pause-poll MS`, `commit`, `close`).
    pub fn send(&mut self, command: &str) {
        let stdin = self
            .stdin
            .as_mut()
            .unwrap_or_else(|| panic!("{}: stdin already closed", self.name));
        if let Err(e) = writeln!(stdin, "{command}").and_then(|_| stdin.flush()) {
            panic!(
                "{}: sending `{command}`: {e}\n{}",
                self.name,
                self.describe()
            );
        }
    }

    /// Closes it cleanly (it leaves the group): waits (60 s) for it to print `left` and
    /// exit 0.
    pub fn close(&mut self) {
        self.send("close");
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.join_reader();
                panic!(
                    "{}: did not exit after close\n{}",
                    self.name,
                    self.describe()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.join_reader();
        let left = self.events().last().map(|(_, e)| e.clone()) == Some(Event::Left);
        assert!(
            status.success() && left,
            "{}: close ended with {status}, last line not `left`\n{}",
            self.name,
            self.describe()
        );
    }

    /// SIGSTOP: the whole process stops (its I/O thread too, so no heartbeat goes out)
    /// until [`JavaMember::resume`].
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// SIGCONT after [`JavaMember::freeze`].
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, sig: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap_or_else(|e| panic!("{}: kill -{sig}: {e}", self.name));
        assert!(status.success(), "{}: kill -{sig} failed", self.name);
    }

    /// Waits (up to `limit`) for it to exit by itself; returns its exit status.
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.join_reader();
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{}: still running after {limit:?}\n{}",
                    self.name,
                    self.describe()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL (a crash: no leave, no commit).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.join_reader();
    }

    fn join_reader(&mut self) {
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }

    /// Its log for failure messages: every line but records (counted per partition), with
    /// the milliseconds since the first member of the test process started.
    pub fn describe(&self) -> String {
        let log = self.log.lock().unwrap();
        let ms = |t: &Instant| t.saturating_duration_since(epoch()).as_millis();
        let mut s = format!("--- {}\n", self.name);
        let mut records: BTreeMap<Partition, (usize, i64)> = BTreeMap::new();
        for (t, e) in &log.events {
            match e {
                Event::Record {
                    topic,
                    partition,
                    offset,
                    ..
                } => {
                    let r = records.entry((topic.clone(), *partition)).or_default();
                    r.0 += 1;
                    r.1 = *offset;
                }
                e => {
                    let _ = writeln!(s, "{:>7} ms {e}", ms(t));
                }
            }
        }
        for ((t, p), (n, last)) in records {
            let _ = writeln!(s, "  records {t}-{p}: {n}, last offset {last}");
        }
        if let Some(t) = &log.ended {
            let _ = writeln!(s, "{:>7} ms (stdout closed)", ms(t));
        }
        s
    }
}

impl Drop for JavaMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn describe_all(members: &[&JavaMember]) -> String {
    members.iter().map(|m| m.describe()).collect()
}

/// Waits until `done` holds (it may look at the members). Panics with all their logs after
/// `limit`, or at once if one printed an error.
pub fn wait_until(
    members: &[&JavaMember],
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + limit;
    while !done() {
        let failed = members.iter().any(|m| {
            m.log
                .lock()
                .unwrap()
                .events
                .iter()
                .any(|(_, e)| matches!(e, Event::Error(_)))
        });
        if failed || Instant::now() >= deadline {
            let why = if failed {
                "a member failed"
            } else {
                "timed out"
            };
            panic!("waiting for {what}: {why}\n{}", describe_all(members));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Panics if, at any moment of their merged logs, two members owned the same partition
/// (a member owns nothing once it ended). A member that lost its partitions without
/// knowing (poll paused too long, session expired) owns them until its `lost` line, so
/// that window counts as overlap here.
pub fn assert_no_overlap(members: &[&JavaMember]) {
    let mut timeline: Vec<(Instant, usize, Option<Event>)> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let log = m.log.lock().unwrap();
        timeline.extend(log.events.iter().map(|(t, e)| (*t, i, Some(e.clone()))));
        timeline.extend(log.ended.map(|t| (t, i, None)));
    }
    // Within a millisecond, what a member gave up comes before what another was given.
    timeline.sort_by_key(|(t, _, e)| (*t, matches!(e, Some(Event::Assigned { .. }))));
    let mut owner: BTreeMap<Partition, usize> = BTreeMap::new();
    for (t, i, e) in timeline {
        match e {
            Some(Event::Assigned { partitions, .. }) => {
                for p in partitions {
                    if let Some(j) = owner.insert(p.clone(), i).filter(|&j| j != i) {
                        panic!(
                            "{}-{} assigned to {} while {} owned it (at {} ms)\n{}",
                            p.0,
                            p.1,
                            members[i].name,
                            members[j].name,
                            t.saturating_duration_since(epoch()).as_millis(),
                            describe_all(members)
                        );
                    }
                }
            }
            Some(Event::Revoked { partitions, .. }) | Some(Event::Lost { partitions, .. }) => {
                for p in partitions {
                    if owner.get(&p) == Some(&i) {
                        owner.remove(&p);
                    }
                }
            }
            None => owner.retain(|_, j| *j != i),
            _ => {}
        }
    }
}

// ----- helpers shared by the group test files ----------------------------------------------

/// Every partition of `topic` (`n` partitions).
pub fn all_of(topic: &str, n: i32) -> Owned {
    (0..n).map(|p| (topic.to_owned(), p)).collect()
}

/// Waits until the members own every partition of `topic` between them, each exactly
/// once, and each owns some (when `all_busy`); then checks that no two members ever owned
/// a partition at the same time.
pub fn wait_split(
    members: &[&JavaMember],
    topic: &str,
    n: i32,
    all_busy: bool,
    what: &str,
    limit: Duration,
) {
    wait_owners(members, topic, n, all_busy, what, limit);
    assert_no_overlap(members);
}

/// [`wait_split`] without the overlap check.
pub fn wait_owners(
    members: &[&JavaMember],
    topic: &str,
    n: i32,
    all_busy: bool,
    what: &str,
    limit: Duration,
) {
    let want = all_of(topic, n);
    wait_until(members, what, limit, || {
        let mut union = Owned::new();
        let mut total = 0;
        for m in members {
            let o = m.owned();
            if all_busy && o.is_empty() {
                return false;
            }
            total += o.len();
            union.extend(o);
        }
        total == n as usize && union == want
    });
}

/// Every record of `topic` the members polled, by (partition, offset), with how often.
pub fn consumed(members: &[&JavaMember], topic: &str) -> BTreeMap<(i32, i64), usize> {
    let mut seen = BTreeMap::new();
    for m in members {
        for ((t, p), offset, _) in m.records() {
            if t == topic {
                *seen.entry((p, offset)).or_insert(0) += 1;
            }
        }
    }
    seen
}

/// Where TestProducer writes record `i` of a topic of `n` partitions (written in order from
/// 0): (partition i % n, offset i / n).
pub fn place(i: u64, n: i32) -> (i32, i64) {
    ((i % n as u64) as i32, (i / n as u64) as i64)
}

/// Asserts that records 0..count of `topic` (`n` partitions, written by TestProducer in
/// order) were all consumed; `exactly`: none twice.
pub fn assert_all_consumed(
    members: &[&JavaMember],
    topic: &str,
    n: i32,
    count: u64,
    exactly: bool,
) {
    let seen = consumed(members, topic);
    let missing: Vec<(i32, i64)> = (0..count)
        .map(|i| place(i, n))
        .filter(|k| !seen.contains_key(k))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {count} records of {topic} never consumed (partition, offset): {:?}{}\n{}",
        missing.len(),
        &missing[..missing.len().min(20)],
        if missing.len() > 20 { " ..." } else { "" },
        describe_all(members)
    );
    if exactly {
        let twice: Vec<((i32, i64), usize)> = seen
            .iter()
            .filter(|(_, k)| **k > 1)
            .map(|(p, k)| (*p, *k))
            .collect();
        assert!(
            twice.is_empty(),
            "{} records of {topic} consumed more than once ((partition, offset), times): {:?}\n{}",
            twice.len(),
            &twice[..twice.len().min(20)],
            describe_all(members)
        );
    }
}

/// Waits until records 0..count of `topic` were all consumed by the members.
pub fn wait_consumed(members: &[&JavaMember], topic: &str, n: i32, count: u64, limit: Duration) {
    wait_until(
        members,
        &format!("records 0..{count} of {topic} consumed"),
        limit,
        || {
            let seen = consumed(members, topic);
            (0..count).all(|i| seen.contains_key(&place(i, n)))
        },
    );
}

/// A producer writing throughout a test: batches of records, in sequence from 0, to a topic
/// of `n` partitions (TestProducer, one run per batch), until stopped.
pub struct BackgroundProducer {
    stop: Arc<std::sync::atomic::AtomicBool>,
    produced: Arc<std::sync::atomic::AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundProducer {
    /// Starts writing batches of `per_batch` records, `pause` apart, from record `start`.
    pub fn start(topic: &str, n: i32, start: u64, per_batch: u64, pause: Duration) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let produced = Arc::new(AtomicU64::new(start));
        let thread = {
            let (stop, produced, topic) =
                (Arc::clone(&stop), Arc::clone(&produced), topic.to_owned());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let from = produced.load(Ordering::SeqCst);
                    produce_batch(&topic, n, from, per_batch);
                    produced.store(from + per_batch, Ordering::SeqCst);
                    std::thread::sleep(pause);
                }
            })
        };
        BackgroundProducer {
            stop,
            produced,
            thread: Some(thread),
        }
    }

    /// How many records are written (0..this), so far.
    pub fn produced(&self) -> u64 {
        self.produced.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until at least `more` records beyond what is written now are written.
    pub fn wait_more(&self, more: u64) -> u64 {
        let target = self.produced() + more;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.produced() < target {
            assert!(
                self.thread.as_ref().is_some_and(|t| !t.is_finished()),
                "the background producer stopped"
            );
            assert!(
                Instant::now() < deadline,
                "the background producer is stuck"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.produced()
    }

    /// Stops after the batch being written; returns how many records were written.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("the background producer panicked");
        }
        self.produced()
    }
}

/// Records `start..start + count` (TestProducer, as [`super::Produce`] does), with the JVM's
/// quick-start compiler only: a short run costs about half the CPU time, which the members
/// of a test on a two-core machine need.
fn produce_batch(topic: &str, n: i32, start: u64, count: u64) {
    let mut cmd = super::java("TestProducer");
    cmd.env("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")
        .args(["--bootstrap", super::bootstrap(), "--topic", topic])
        .args(["--partitions", &n.to_string()])
        .args(["--start", &start.to_string(), "--count", &count.to_string()]);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("producing to {topic}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "producing to {topic} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Drop for BackgroundProducer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The type of group `group` as the broker lists it (`Classic`, `Consumer`, ...; `None`
/// if it lists no such group), through the Kafka tool `kafka-consumer-groups.sh --list
/// --type`.
pub fn group_type(group: &str) -> Option<String> {
    let mut cmd = super::java("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand");
    cmd.args(["--bootstrap-server", super::bootstrap(), "--list", "--type"]);
    let out = cmd
        .output()
        .expect("running kafka-consumer-groups --list --type");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kafka-consumer-groups --list --type failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some(group)).then(|| w.next().unwrap_or("").to_owned())
    })
}

/// The lines that change what a member owns (non-empty `assigned`, `revoked`, `lost`)
/// the members printed so far, all together.
fn ownership_lines(members: &[&JavaMember]) -> usize {
    members
        .iter()
        .map(|m| {
            m.events()
                .iter()
                .filter(|(_, e)| match e {
                    Event::Assigned { partitions, .. }
                    | Event::Revoked { partitions, .. }
                    | Event::Lost { partitions, .. } => !partitions.is_empty(),
                    _ => false,
                })
                .count()
        })
        .sum()
}

/// [`wait_split`], then waits until the split holds with no member gaining or giving up a
/// partition for 1.5 s (three heartbeats of the test broker): the group settled, not just
/// passed through a moment where every partition had one owner. Also checks that no two
/// members ever owned a partition at the same time.
pub fn wait_stable(
    members: &[&JavaMember],
    topic: &str,
    n: i32,
    all_busy: bool,
    what: &str,
    limit: Duration,
) {
    wait_settled(members, topic, n, all_busy, what, limit);
    assert_no_overlap(members);
}

/// [`wait_stable`] without the overlap check (for a member that was stopped and believed
/// it owned its partitions until it heard they were lost).
pub fn wait_settled(
    members: &[&JavaMember],
    topic: &str,
    n: i32,
    all_busy: bool,
    what: &str,
    limit: Duration,
) {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        wait_owners(members, topic, n, all_busy, what, left);
        let lines = ownership_lines(members);
        std::thread::sleep(Duration::from_millis(1500));
        if ownership_lines(members) == lines {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "waiting for {what}: the group does not settle\n{}",
                describe_all(members)
            );
        }
    }
}

/// Waits until, for every partition a member owns now, it received a record written after
/// this moment: records flow to every owner (a kept partition never stopped).
pub fn wait_flowing(step: &str, members: &[&JavaMember], producer: &BackgroundProducer, n: i32) {
    let upto = producer.produced();
    let after = upto / n as u64 + 1;
    let owned: Vec<Owned> = members.iter().map(|m| m.owned()).collect();
    wait_until(
        members,
        &format!("{step}: every owner gets the records written after it (offsets >= {after})"),
        Duration::from_secs(60),
        || {
            members.iter().zip(&owned).all(|(m, o)| {
                let records = m.records();
                o.iter().all(|p| {
                    records
                        .iter()
                        .any(|(q, off, _)| q == p && *off >= after as i64)
                })
            })
        },
    );
}
