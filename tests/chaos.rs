//! The chaos test: a consumer group riding out broker and consumer faults on the 3-node
//! cluster (`scripts/cluster.sh`) without losing a record.
//!
//! A Java producer (`scripts/java/SeqProducer.java`, `acks=all`) writes sequence-numbered
//! records to a 12-partition topic (replication factor 3) throughout. Three of our members
//! (`examples/group_member.rs`, each its own process) share one group; they commit what
//! they consumed every second and in `on_partitions_revoked`, and ride out errors. The test
//! injects faults one after the other: the leader of a partition or the group coordinator
//! killed (`kill -9`) and restarted, a node stopped cleanly and restarted, a node frozen
//! past the request timeout, a rolling restart of all three nodes, a member killed
//! (`kill -9`, no `close`) or closed, and replaced. After each it measures how long until
//! every partition delivers records written after the fault.
//!
//! It then checks: every record the cluster acknowledged was consumed at least once; the
//! committed offsets of each partition never went backwards; a record was delivered twice
//! only when the member that first delivered it died or lost the partition before
//! committing it, or when the second delivery came from a member the coordinator had
//! fenced (it lost the partition next); and never below what the member that delivered it
//! again had to start past (the first deliverer's commits, or a fenced member's own);
//! no member failed;
//! every member's I/O thread is idle once the cluster is healthy and the producer stopped.
//! The last line sums it up: faults, produced, consumed, lost, duplicates, and the worst
//! recovery per fault kind.
//!
//! Run with both group protocols: `group.protocol=consumer`, and classic with
//! `cooperative-sticky`. CI runs a short round of each fault kind (`CHAOS_FAULTS` unset:
//! one of each); the full run is
//!
//! ```text
//! CHAOS_FAULTS=24 cargo test --release --test chaos -- --nocapture --test-threads 1
//! ```
//!
//! with the cluster running (`scripts/cluster.sh start`, or let the test start it).
//! `CHAOS_KINDS=freeze-node,kill-leader` injects only these kinds, in turn. Each member
//! writes its log (`info` and above) to `target/tmp/chaos/TOPIC/member-N.log`; a failure
//! names that directory.
//!
//! The soak runs the same workload for a set time instead of a set number of faults:
//!
//! ```text
//! CHAOS_SOAK_MINUTES=30 cargo test --release --test chaos a_kip848 -- --nocapture
//! ```
//!
//! Member 0 is then never killed or closed; each minute the run prints its resident
//! memory, open file descriptors and the CPU its I/O thread used, and it fails unless the
//! last three minutes stay within bounds of minutes 3 to 5 (memory at most 25 % + 8 MiB
//! more, at most 8 more descriptors, I/O-thread CPU at most 1.5 times + 2 % of a core).

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::java_member::{Event, JavaMember, JavaMemberOptions};

const PARTITIONS: i32 = 12;
/// How long a fault may take to heal before the test calls it stuck.
const RECOVERY_LIMIT: Duration = Duration::from_secs(120);
/// The members' request timeout: a frozen node is frozen past it.
const REQUEST_TIMEOUT_MS: u64 = 10_000;

/// What the producer said: acknowledged records by (partition, offset), with their
/// sequence numbers, and when they were acknowledged.
#[derive(Default)]
struct Acks {
    acked: BTreeMap<(i32, i64), (u64, Instant)>,
    failed: u64,
    done: Option<(u64, u64, u64)>,
    error: Option<String>,
}

/// The running SeqProducer.
struct Producer {
    child: Child,
    stdin: Option<ChildStdin>,
    acks: Arc<Mutex<Acks>>,
    reader: Option<JoinHandle<()>>,
}

impl Producer {
    fn start(bootstrap: &str, topic: &str, rate: u32) -> Producer {
        let mut cmd = common::java("SeqProducer");
        cmd.args(["--bootstrap", bootstrap, "--topic", topic])
            .args(["--partitions", &PARTITIONS.to_string()])
            .args(["--rate", &rate.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let acks = Arc::new(Mutex::new(Acks::default()));
        let reader = {
            let acks = Arc::clone(&acks);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let mut a = acks.lock().unwrap();
                    let w: Vec<&str> = line.split_whitespace().collect();
                    match w.as_slice() {
                        ["ack", p, o, i] => {
                            let (p, o, i) = (p.parse(), o.parse(), i.parse());
                            if let (Ok(p), Ok(o), Ok(i)) = (p, o, i) {
                                a.acked.insert((p, o), (i, Instant::now()));
                            }
                        }
                        ["fail", ..] => a.failed += 1,
                        ["done", s, k, f] => {
                            let n = |x: &str| x.parse().unwrap_or(0);
                            a.done = Some((n(s), n(k), n(f)));
                        }
                        _ => a.error = Some(line.clone()),
                    }
                }
            })
        };
        Producer {
            stdin: child.stdin.take(),
            child,
            acks,
            reader: Some(reader),
        }
    }

    /// Panics if the producer stopped or said something it should not have.
    fn check(&mut self) {
        if let Some(line) = &self.acks.lock().unwrap().error {
            panic!("the producer said: {line}");
        }
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the producer exited ({status}) while it should be writing");
        }
    }

    /// The highest acknowledged offset of each partition so far.
    fn ends(&self) -> BTreeMap<i32, i64> {
        let a = self.acks.lock().unwrap();
        let mut out = BTreeMap::new();
        for &(p, o) in a.acked.keys() {
            let e = out.entry(p).or_insert(o);
            *e = (*e).max(o);
        }
        out
    }

    /// Stops writing and waits (up to 3 minutes) until everything sent was acknowledged
    /// or failed.
    fn stop(&mut self) -> (u64, u64, u64) {
        if let Some(mut s) = self.stdin.take() {
            let _ = writeln!(s, "stop");
        }
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Some(d) = self.acks.lock().unwrap().done {
                let _ = self.child.wait();
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                return d;
            }
            assert!(
                Instant::now() < deadline,
                "the producer did not finish within 3 minutes of stop"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fault kinds, in the order a round injects them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillLeader,
    KillCoordinator,
    StopNode,
    FreezeNode,
    RollingRestart,
    KillMember,
    CloseMember,
}

const KINDS: [Fault; 7] = [
    Fault::KillLeader,
    Fault::KillMember,
    Fault::KillCoordinator,
    Fault::CloseMember,
    Fault::StopNode,
    Fault::FreezeNode,
    Fault::RollingRestart,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::KillLeader => "kill-leader",
            Fault::KillCoordinator => "kill-coordinator",
            Fault::StopNode => "stop-node",
            Fault::FreezeNode => "freeze-node",
            Fault::RollingRestart => "rolling-restart",
            Fault::KillMember => "kill-member",
            Fault::CloseMember => "close-member",
        }
    }
}

/// One member process and how it ended.
struct Member {
    member: JavaMember,
    /// Killed with `kill -9` (it could not commit what it delivered last).
    killed: bool,
}

struct Chaos {
    cluster: Cluster,
    topic: String,
    group: String,
    protocol: &'static str,
    members: Vec<Member>,
    producer: Producer,
    recoveries: BTreeMap<Fault, Vec<Duration>>,
    /// When each fault began, for the failure report.
    injected: Vec<(Instant, String)>,
    /// A soak run: member 0 is never killed or closed.
    soak: bool,
    rng: u64,
}

impl Chaos {
    fn options(&self) -> JavaMemberOptions {
        let mut o = JavaMemberOptions::new(&self.group, &[&self.topic]);
        o.bootstrap = Some(self.cluster.bootstrap().to_owned());
        o.protocol = self.protocol.into();
        if self.protocol == "classic" {
            o.assignor = Some("cooperative-sticky".into());
            o.session_timeout_ms = Some(10_000);
            o.heartbeat_ms = Some(1_000);
        }
        o.commit_every_ms = Some(1_000);
        o.on_error_continue = true;
        o.props = vec![("request.timeout.ms".into(), REQUEST_TIMEOUT_MS.to_string())];
        o
    }

    /// Where member `i` writes the crate's log (`info` and above).
    fn log_file(&self, i: usize) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("chaos")
            .join(&self.topic)
            .join(format!("member-{i}.log"))
    }

    fn add_member(&mut self) {
        let mut opts = self.options();
        let log = self.log_file(self.members.len());
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        }
        opts.log_file = Some(log);
        let m = JavaMember::start_ours(&opts);
        self.members.push(Member {
            member: m,
            killed: false,
        });
    }

    fn random(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n
    }

    fn live(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].member.ended().is_none())
            .collect()
    }

    /// The last offset each partition delivered, over every member.
    fn delivered_ends(&self) -> BTreeMap<i32, i64> {
        let mut out = BTreeMap::new();
        for m in &self.members {
            for ((_, p), o, _) in m.member.records() {
                let e = out.entry(p).or_insert(o);
                *e = (*e).max(o);
            }
        }
        out
    }

    /// Waits until every partition delivered a record past what was acknowledged when
    /// the fault began; returns how long that took from `since`.
    fn wait_recovered(
        &mut self,
        what: &str,
        since: Instant,
        ends: &BTreeMap<i32, i64>,
    ) -> Duration {
        loop {
            self.producer.check();
            let delivered = self.delivered_ends();
            let behind: Vec<i32> = (0..PARTITIONS)
                .filter(|p| {
                    let want = ends.get(p).copied().unwrap_or(-1);
                    delivered.get(p).is_none_or(|&d| d <= want)
                })
                .collect();
            if behind.is_empty() {
                return since.elapsed();
            }
            if since.elapsed() > RECOVERY_LIMIT {
                let members: Vec<String> =
                    self.members.iter().map(|m| m.member.describe()).collect();
                panic!(
                    "{}: partitions {behind:?} delivered nothing new within {RECOVERY_LIMIT:?} of {}\ncluster:\n{}\nmembers:\n{}",
                    self.protocol,
                    what,
                    self.cluster.status(),
                    members.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Injects `fault`, heals it, and records how long until every partition delivered
    /// again.
    fn inject(&mut self, fault: Fault) {
        let ends = self.producer.ends();
        let start = Instant::now();
        self.injected.push((start, fault.name().to_owned()));
        match fault {
            Fault::KillLeader => {
                let p = self.random(PARTITIONS as u64) as i32;
                let n = self.cluster.leader(&self.topic, p).unwrap_or(1);
                self.cluster.kill(node(n));
                let took = self.wait_recovered(fault.name(), start, &ends);
                self.cluster.restart(node(n));
                self.record(fault, took);
                return;
            }
            Fault::KillCoordinator => {
                let n = self.cluster.coordinator(&self.group);
                self.cluster.kill(node(n));
                let took = self.wait_recovered(fault.name(), start, &ends);
                self.cluster.restart(node(n));
                self.record(fault, took);
                return;
            }
            Fault::StopNode => {
                let n = 1 + self.random(3) as u8;
                self.cluster.stop_node(n);
                let took = self.wait_recovered(fault.name(), start, &ends);
                self.cluster.restart(n);
                self.record(fault, took);
                return;
            }
            Fault::FreezeNode => {
                let n = 1 + self.random(3) as u8;
                self.cluster.freeze(n);
                std::thread::sleep(Duration::from_millis(REQUEST_TIMEOUT_MS + 2_000));
                self.cluster.thaw(n);
            }
            Fault::RollingRestart => {
                for n in 1..=3 {
                    self.cluster.stop_node(n);
                    self.cluster.restart(n);
                }
            }
            Fault::KillMember | Fault::CloseMember => {
                // The soak watches member 0 for its whole life.
                let live: Vec<usize> = self
                    .live()
                    .into_iter()
                    .filter(|&i| !(self.soak && i == 0))
                    .collect();
                let i = live[self.random(live.len() as u64) as usize];
                if fault == Fault::KillMember {
                    self.members[i].member.kill();
                    self.members[i].killed = true;
                } else {
                    self.members[i].member.close();
                }
                self.add_member();
            }
        }
        let took = self.wait_recovered(fault.name(), start, &ends);
        self.record(fault, took);
    }

    fn record(&mut self, fault: Fault, took: Duration) {
        println!(
            "chaos {}: {} recovered in {} ms",
            self.protocol,
            fault.name(),
            took.as_millis()
        );
        self.recoveries.entry(fault).or_default().push(took);
    }
}

/// A node id from the cluster's answers as the harness numbers nodes.
fn node(n: i32) -> u8 {
    u8::try_from(n).unwrap_or_else(|_| panic!("node id {n} is not one of 1, 2, 3"))
}

/// The CPU time (user + system, in clock ticks) process `pid` used so far.
fn cpu_ticks(pid: u32) -> Option<u64> {
    stat_ticks(format!("/proc/{pid}/stat"))
}

/// The user + system clock ticks in a `/proc/.../stat` file (of a process or a thread).
fn stat_ticks(path: impl AsRef<std::path::Path>) -> Option<u64> {
    let stat = std::fs::read_to_string(path).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The soak's watch on one member process: each minute its resident memory, open file
/// descriptors and the CPU its I/O thread (`kafka-consumer`) used, printed and kept.
struct Watch {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: JoinHandle<()>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    minute: u64,
    rss_kib: u64,
    fds: usize,
    /// Share of one core the I/O thread used over the minute.
    io_cpu: f64,
}

/// Resident memory (KiB), open descriptors and I/O-thread CPU ticks of process `pid`.
fn resources(pid: u32) -> Option<(u64, usize, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let mut io_ticks = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == "kafka-consumer" {
            io_ticks += stat_ticks(task.path().join("stat"))?;
        }
    }
    Some((rss_kib, fds, io_ticks))
}

impl Watch {
    fn start(pid: u32) -> Watch {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let samples = Arc::clone(&samples);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut last = resources(pid).map_or(0, |r| r.2);
                let mut minute = 0;
                'minutes: loop {
                    for _ in 0..600 {
                        if stop.load(std::sync::atomic::Ordering::Relaxed) {
                            break 'minutes;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    minute += 1;
                    let Some((rss_kib, fds, ticks)) = resources(pid) else {
                        println!("soak minute {minute}: member {pid} is gone");
                        break;
                    };
                    // 100 ticks a second on Linux.
                    let io_cpu = (ticks - last) as f64 / 6000.0;
                    last = ticks;
                    println!(
                        "soak minute {minute}: rss={} KiB fds={fds} io-thread-cpu={:.2} %",
                        rss_kib,
                        io_cpu * 100.0
                    );
                    samples.lock().unwrap().push(Sample {
                        minute,
                        rss_kib,
                        fds,
                        io_cpu,
                    });
                }
            })
        };
        Watch {
            samples,
            stop,
            thread,
        }
    }

    /// Stops watching and fails the run unless memory, descriptors and I/O-thread CPU stayed
    /// flat: the last three minutes against minutes 3 to 5 (after the warm-up).
    fn stop_and_check(self, protocol: &str) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the soak watch thread");
        let samples = self.samples.lock().unwrap().clone();
        assert!(
            samples.len() >= 8,
            "{protocol}: a soak needs at least 8 minutes of samples, got {samples:?}"
        );
        let early: Vec<Sample> = samples
            .iter()
            .filter(|s| (3..=5).contains(&s.minute))
            .copied()
            .collect();
        let late = &samples[samples.len() - 3..];
        let max = |v: &[Sample], f: fn(&Sample) -> f64| v.iter().map(f).fold(0.0, f64::max);
        let mean =
            |v: &[Sample], f: fn(&Sample) -> f64| v.iter().map(f).sum::<f64>() / v.len() as f64;
        let rss = |s: &Sample| s.rss_kib as f64;
        let fds = |s: &Sample| s.fds as f64;
        let cpu = |s: &Sample| s.io_cpu;
        let mut problems = Vec::new();
        if max(late, rss) > max(&early, rss) * 1.25 + 8192.0 {
            problems.push(format!(
                "resident memory grew from {:.0} KiB to {:.0} KiB",
                max(&early, rss),
                max(late, rss)
            ));
        }
        if max(late, fds) > max(&early, fds) + 8.0 {
            problems.push(format!(
                "open descriptors grew from {} to {}",
                max(&early, fds),
                max(late, fds)
            ));
        }
        if mean(late, cpu) > max(&early, cpu) * 1.5 + 0.02 {
            problems.push(format!(
                "the I/O thread's CPU grew from at most {:.2} % to {:.2} % on average",
                max(&early, cpu) * 100.0,
                mean(late, cpu) * 100.0
            ));
        }
        assert!(
            problems.is_empty(),
            "{protocol}: the soak was not flat: {}",
            problems.join("; ")
        );
        println!(
            "soak {protocol}: {} minutes, flat: rss {:.0}->{:.0} KiB, fds {}->{}, io-thread cpu {:.2}->{:.2} %",
            samples.len(),
            max(&early, rss),
            max(late, rss),
            max(&early, fds),
            max(late, fds),
            max(&early, cpu) * 100.0,
            mean(late, cpu) * 100.0
        );
    }
}

/// Checks the run and returns the summary figures: (consumed, lost, duplicates).
fn verify(chaos: &Chaos, acked: &BTreeMap<(i32, i64), (u64, Instant)>) -> (usize, usize, usize) {
    let protocol = chaos.protocol;
    // Deliveries by (partition, offset): (member index, when).
    let mut deliveries: BTreeMap<(i32, i64), Vec<(usize, Instant)>> = BTreeMap::new();
    let mut problems: Vec<String> = Vec::new();
    for (i, m) in chaos.members.iter().enumerate() {
        for (at, e) in m.member.events() {
            match e {
                Event::Record {
                    partition, offset, ..
                } => deliveries
                    .entry((partition, offset))
                    .or_default()
                    .push((i, at)),
                Event::Error(msg) => problems.push(format!("{} failed: {msg}", m.member.name())),
                _ => {}
            }
        }
    }
    let lost: Vec<&(i32, i64)> = acked
        .keys()
        .filter(|k| !deliveries.contains_key(k))
        .collect();
    if !lost.is_empty() {
        problems.push(format!(
            "{} acknowledged records never consumed, the first: {:?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        ));
    }
    // Commits by partition, in time order, with who made them.
    let mut commits: BTreeMap<i32, Vec<(Instant, i64, usize)>> = BTreeMap::new();
    for (i, m) in chaos.members.iter().enumerate() {
        for (at, e) in m.member.events() {
            if let Event::Committed { offsets } = e {
                for (_, p, o) in offsets {
                    commits.entry(p).or_default().push((at, o, i));
                }
            }
        }
    }
    for (p, list) in &mut commits {
        list.sort();
        for w in list.windows(2) {
            if w[1].1 < w[0].1 {
                problems.push(format!(
                    "partition {p}: committed offset went back from {} (member {}) to {} (member {})",
                    w[0].1, w[0].2, w[1].1, w[1].2
                ));
            }
        }
    }
    // A duplicate is allowed only when the first deliverer died (killed) or lost the
    // partition before it committed past the record, and never below an offset it had
    // committed.
    let mut duplicates = 0;
    for (&(p, o), list) in &deliveries {
        if list.len() < 2 {
            continue;
        }
        duplicates += list.len() - 1;
        // In time order: the members were read one after the other.
        let mut list = list.clone();
        list.sort_by_key(|&(_, at)| at);
        let (first, first_at) = list[0];
        let (second, again_at) = list[1];
        let m = &chaos.members[first];
        // The second deliverer may have been a zombie: the coordinator had fenced it (its
        // session ran out while it could not reach the coordinator) and given the partition
        // to another member, and it delivered what it had fetched before it heard so. The
        // first thing it then heard of the partition was that it lost it.
        let zombie = second != first
            && chaos.members[second]
                .member
                .events()
                .iter()
                .filter(|(at, _)| *at > again_at)
                .find_map(|(_, e)| match e {
                    Event::Assigned { partitions, .. } | Event::Revoked { partitions, .. }
                        if partitions.iter().any(|(_, q)| *q == p) =>
                    {
                        Some(false)
                    }
                    Event::Lost { partitions, .. } if partitions.iter().any(|(_, q)| *q == p) => {
                        Some(true)
                    }
                    _ => None,
                })
                .unwrap_or(false);
        // What the member that read the record again had to start from, by what it or the
        // first deliverer committed before: a new owner starts at the first deliverer's
        // commit, a zombie goes on from its own position, past its own commits.
        let (floor_of, why) = if zombie {
            (second, "it")
        } else {
            (first, "the first deliverer")
        };
        let floor = commits
            .get(&p)
            .into_iter()
            .flatten()
            .filter(|(at, _, who)| *who == floor_of && *at < again_at)
            .map(|(_, c, _)| *c)
            .max()
            .unwrap_or(-1);
        if o < floor {
            problems.push(format!(
                "partition {p} offset {o}: delivered again by member {second} although {why} (member {floor_of}) had committed {floor} before"
            ));
            continue;
        }
        let lost_it = m.member.events().iter().any(|(at, e)| {
            *at > first_at
                && matches!(e, Event::Lost { partitions, .. } if partitions.iter().any(|(_, q)| *q == p))
        });
        let warned = m
            .member
            .events()
            .iter()
            .any(|(at, e)| *at > first_at && matches!(e, Event::Warn(_)));
        if !(m.killed || lost_it || warned || zombie) {
            problems.push(format!(
                "partition {p} offset {o}: delivered {} times though member {first} ({}) neither died nor lost it nor failed to commit\n{}",
                list.len(),
                m.member.name(),
                timeline(chaos, p, first_at, again_at)
            ));
        }
    }
    if !problems.is_empty() {
        panic!(
            "{protocol}: {} problems:\n{}\nthe members' logs: {}",
            problems.len(),
            problems.join("\n"),
            chaos
                .log_file(0)
                .parent()
                .map_or_else(String::new, |d| d.display().to_string())
        );
    }
    (
        deliveries.values().map(Vec::len).sum(),
        lost.len(),
        duplicates,
    )
}

/// What happened to partition `p` around two deliveries of one record: faults, ownership
/// changes, commits and warnings of every member, and the deliveries of the record.
fn timeline(chaos: &Chaos, p: i32, first_at: Instant, again_at: Instant) -> String {
    let from = first_at - Duration::from_secs(5);
    let to = again_at + Duration::from_secs(2);
    let mut lines: Vec<(Instant, String)> = chaos
        .injected
        .iter()
        .filter(|(at, _)| (from..=to).contains(at))
        .map(|(at, f)| (*at, format!("fault {f}")))
        .collect();
    let mentions = |ps: &Vec<(String, i32)>| ps.iter().any(|(_, q)| *q == p);
    for (i, m) in chaos.members.iter().enumerate() {
        let mut run: Option<(Instant, i64, Instant, i64)> = None;
        let flush = |run: &mut Option<(Instant, i64, Instant, i64)>,
                     lines: &mut Vec<(Instant, String)>| {
            if let Some((a, o1, _, o2)) = run.take() {
                lines.push((a, format!("member {i} delivered {o1}..={o2}")));
            }
        };
        for (at, e) in m.member.events() {
            if !(from..=to).contains(&at) {
                continue;
            }
            let line = match &e {
                Event::Record {
                    partition, offset, ..
                } if *partition == p => {
                    match &mut run {
                        Some((_, _, last_at, o2)) if *offset == *o2 + 1 => {
                            *last_at = at;
                            *o2 = *offset;
                        }
                        _ => {
                            flush(&mut run, &mut lines);
                            run = Some((at, *offset, at, *offset));
                        }
                    }
                    continue;
                }
                Event::Assigned {
                    generation,
                    partitions,
                } if mentions(partitions) => {
                    format!("member {i} assigned (epoch {generation})")
                }
                Event::Revoked {
                    generation,
                    partitions,
                } if mentions(partitions) => {
                    format!("member {i} revoked (epoch {generation})")
                }
                Event::Lost {
                    generation,
                    partitions,
                } if mentions(partitions) => {
                    format!("member {i} lost (epoch {generation})")
                }
                Event::Committed { offsets } => match offsets.iter().find(|(_, q, _)| *q == p) {
                    Some((_, _, o)) => format!("member {i} committed {o}"),
                    None => continue,
                },
                Event::Warn(w) => format!("member {i} warn: {w}"),
                Event::Left => format!("member {i} left"),
                _ => continue,
            };
            flush(&mut run, &mut lines);
            lines.push((at, line));
        }
        flush(&mut run, &mut lines);
    }
    lines.sort_by_key(|(at, _)| *at);
    lines
        .iter()
        .map(|(at, l)| {
            format!(
                "  {:>8} ms  {l}",
                at.saturating_duration_since(from).as_millis()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn run(protocol: &'static str) {
    let cluster = Cluster::from_env();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let topic = format!("chaos-{protocol}-{stamp}");
    cluster.create_topic(&topic, PARTITIONS, &[]);
    let rate: u32 = std::env::var("CHAOS_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let faults: usize = std::env::var("CHAOS_FAULTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KINDS.len());
    let soak: Option<Duration> = std::env::var("CHAOS_SOAK_MINUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(|m: u64| Duration::from_secs(m * 60));
    let producer = Producer::start(cluster.bootstrap(), &topic, rate);
    let mut chaos = Chaos {
        cluster,
        group: format!("{topic}-group"),
        topic,
        protocol,
        members: Vec::new(),
        producer,
        recoveries: BTreeMap::new(),
        injected: Vec::new(),
        soak: soak.is_some(),
        rng: 0x9E37_79B9_7F4A_7C15 ^ stamp as u64,
    };
    for _ in 0..3 {
        chaos.add_member();
    }
    // Everything flowing before the first fault.
    let ends = chaos.producer.ends();
    chaos.wait_recovered("the start", Instant::now(), &ends);
    let watch = soak.map(|_| Watch::start(chaos.members[0].member.pid()));
    let soak_end = soak.map(|d| Instant::now() + d);
    // CHAOS_KINDS=freeze-node,kill-leader: only these kinds, in this order.
    let kinds: Vec<Fault> = match std::env::var("CHAOS_KINDS") {
        Ok(list) => list
            .split(',')
            .map(|name| {
                *KINDS
                    .iter()
                    .find(|f| f.name() == name.trim())
                    .unwrap_or_else(|| panic!("CHAOS_KINDS: no fault kind {name:?}"))
            })
            .collect(),
        Err(_) => KINDS.to_vec(),
    };
    let mut k = 0;
    while soak_end.map_or(k < faults, |end| Instant::now() < end) {
        let fault = kinds[k % kinds.len()];
        chaos.inject(fault);
        // Healthy in between: every partition with three in-sync replicas again.
        chaos.cluster.wait_isr(&chaos.topic);
        k += 1;
    }
    if let Some(watch) = watch {
        watch.stop_and_check(protocol);
    }
    let (sent, acked_count, failed) = chaos.producer.stop();
    let acked = std::mem::take(&mut chaos.producer.acks.lock().unwrap().acked);
    assert_eq!(acked.len() as u64, acked_count, "acks as printed");
    // Everything acknowledged gets consumed.
    let deadline = Instant::now() + RECOVERY_LIMIT;
    loop {
        let seen: BTreeSet<(i32, i64)> = chaos
            .members
            .iter()
            .flat_map(|m| m.member.records().into_iter().map(|((_, p), o, _)| (p, o)))
            .collect();
        let missing = acked.keys().filter(|k| !seen.contains(k)).count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{protocol}: {missing} acknowledged records still not consumed {RECOVERY_LIMIT:?} after the producer stopped"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Idle once healthy and caught up: each live member uses little CPU.
    std::thread::sleep(Duration::from_secs(2));
    let live = chaos.live();
    let before: HashMap<usize, u64> = live
        .iter()
        .filter_map(|&i| Some((i, cpu_ticks(chaos.members[i].member.pid())?)))
        .collect();
    let window = Duration::from_secs(3);
    std::thread::sleep(window);
    for (&i, &t0) in &before {
        if let Some(t1) = cpu_ticks(chaos.members[i].member.pid()) {
            // 100 ticks a second on Linux; a member that only heartbeats and long-polls
            // uses a few.
            let share = (t1 - t0) as f64 / (100.0 * window.as_secs_f64());
            assert!(
                share < 0.05,
                "{protocol}: {} used {:.1} % of a core while idle",
                chaos.members[i].member.name(),
                share * 100.0
            );
        }
    }
    for i in live {
        chaos.members[i].member.close();
    }
    let (consumed, lost, duplicates) = verify(&chaos, &acked);
    let worst: Vec<String> = chaos
        .recoveries
        .iter()
        .map(|(f, v)| {
            let max = v.iter().max().copied().unwrap_or_default();
            format!("{}={}ms", f.name(), max.as_millis())
        })
        .collect();
    let injected: usize = chaos.recoveries.values().map(Vec::len).sum();
    println!(
        "chaos {protocol}: faults={injected} produced={sent} acked={acked_count} failed={failed} consumed={consumed} lost={lost} duplicates={duplicates} worst recovery: {}",
        worst.join(" ")
    );
}

#[test]
fn a_kip848_group_loses_nothing_through_broker_and_member_faults() {
    run("consumer");
}

#[test]
fn a_cooperative_sticky_group_loses_nothing_through_broker_and_member_faults() {
    run("classic");
}
