//! A rebalance timeline: one consumer group goes through a scale-out and a scale-in while a
//! producer writes at a steady rate, once per group protocol, and the run is drawn as one
//! SVG with a panel per protocol side by side: per member, which partitions it owned and
//! when their records arrived. `scripts/timeline.sh` runs it on the local broker; the
//! README shows the picture.
//!
//! ```text
//! cargo run --release --example rebalance_timeline -- [--bootstrap 127.0.0.1:19092]
//!     [--out docs/rebalance-timeline.svg] [--protocols classic,consumer]
//!     [--kafka-libs DIR] [--rate 2000]
//! ```
//!
//! `--protocols`: comma-separated panels, drawn left to right: `classic` (the classic
//! protocol with `partition.assignment.strategy=cooperative-sticky`, its best case),
//! `classic-eager` (classic with `range`: every rebalance revokes everything) and
//! `consumer` (`group.protocol=consumer`, KIP-848, with `group.remote.assignor=uniform`).
//! `--kafka-libs`: the Kafka jars (default `$KAFKA_LIBS`, else `scripts/broker.sh libs`);
//! the topic is created with `scripts/java/TestProducer.java` and written by Kafka's
//! `ProducerPerformance` (100-byte records, round-robin over the partitions).
//!
//! Each run: a fresh topic of 12 partitions and a fresh group; member A starts at 0 s, B at
//! 6 s, C at 12 s; C leaves (`close`) at 20 s, B at 26 s; the producer stops at 32 s and A
//! reads what is left. Members are threads of this process, each its own `Consumer`,
//! polling without pause; each commits after every batch (`commit_async`) and, in
//! `on_partitions_revoked`, what it consumed of the revoked partitions
//! (`commit_offsets_sync`), so a moving partition continues where it stopped. Both
//! protocols heartbeat every 500 ms (the classic members ask for it; the local broker sets
//! `group.consumer.heartbeat.interval.ms=500`). The listener callbacks give the ownership
//! intervals (owned from `on_partitions_assigned` to the end of `on_partitions_revoked` or
//! `on_partitions_lost`); records are counted per partition per 250 ms as `poll` returns
//! them.
//!
//! The figures under each panel, from A's first assignment to the producer's stop:
//! partition-seconds without an owner (and the longest such gap); partition-seconds in
//! pauses of more than 250 ms between two deliveries of a partition (to anyone);
//! partitions revoked from members that stayed in the group (not counting `close`), lost
//! partitions, owner changes; records produced (the topic's end offsets), delivered
//! (returned by `poll`, over all members), duplicates (offsets returned more than once) and
//! missing (never returned). The text summary on stdout also lists every callback and
//! every pause.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_consumer::{
    Consumer, ConsumerConfig, ErrorKind, OffsetAndMetadata, OffsetReset, RebalanceListener,
    TopicPartition,
};

/// Partitions of each run's topic.
const PARTITIONS: i32 = 12;
/// Width of an arrival bucket, seconds.
const BUCKET: f64 = 0.25;
/// The scale-out and scale-in: member, start, leave (None: stays to the end), seconds.
const PLAN: [(&str, f64, Option<f64>); 3] = [
    ("A", 0.0, None),
    ("B", 6.0, Some(26.0)),
    ("C", 12.0, Some(20.0)),
];
/// When the producer stops, seconds.
const END: f64 = 32.0;
/// A pause between two deliveries of a partition longer than this is a stall (seconds);
/// with the producer's rate a partition that is being fetched gets records far more often.
const STALL: f64 = 0.25;
/// How long A may take to read what is left after the producer stopped.
const DRAIN: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Cooperative,
    Eager,
    Consumer,
}

impl Variant {
    fn parse(s: &str) -> Option<Variant> {
        match s.trim() {
            "classic" | "classic-cooperative" => Some(Variant::Cooperative),
            "classic-eager" => Some(Variant::Eager),
            "consumer" => Some(Variant::Consumer),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Variant::Cooperative => "classic",
            Variant::Eager => "classic-eager",
            Variant::Consumer => "consumer",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Variant::Cooperative => "group.protocol=classic, cooperative-sticky",
            Variant::Eager => "group.protocol=classic, range (eager)",
            Variant::Consumer => "group.protocol=consumer (KIP-848), uniform",
        }
    }

    fn short_title(self) -> &'static str {
        match self {
            Variant::Cooperative => "classic, cooperative-sticky",
            Variant::Eager => "classic, range (eager)",
            Variant::Consumer => "consumer (KIP-848), uniform",
        }
    }

    fn configure(self, config: ConsumerConfig) -> kafka_consumer::Result<ConsumerConfig> {
        match self {
            Variant::Cooperative | Variant::Eager => config
                .set("group.protocol", "classic")?
                .set(
                    "partition.assignment.strategy",
                    if self == Variant::Eager {
                        "range"
                    } else {
                        "cooperative-sticky"
                    },
                )?
                .set("session.timeout.ms", "6000")?
                .set("heartbeat.interval.ms", "500"),
            Variant::Consumer => config
                .set("group.protocol", "consumer")?
                .set("group.remote.assignor", "uniform"),
        }
    }
}

struct Args {
    bootstrap: String,
    out: PathBuf,
    variants: Vec<Variant>,
    libs: Option<String>,
    rate: u32,
}

fn usage(msg: &str) -> ! {
    eprintln!("rebalance_timeline: {msg}");
    eprintln!(
        "usage: rebalance_timeline [--bootstrap HOST:PORT] [--out FILE.svg] \
         [--protocols classic,classic-eager,consumer] [--kafka-libs DIR] [--rate N]"
    );
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut a = Args {
        bootstrap: "127.0.0.1:19092".into(),
        out: PathBuf::from("docs/rebalance-timeline.svg"),
        variants: vec![Variant::Cooperative, Variant::Consumer],
        libs: std::env::var("KAFKA_LIBS").ok().filter(|s| !s.is_empty()),
        rate: 2000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = value(),
            "--out" => a.out = PathBuf::from(value()),
            "--kafka-libs" => a.libs = Some(value()),
            "--rate" => {
                a.rate = value()
                    .parse()
                    .ok()
                    .filter(|r| *r > 0)
                    .unwrap_or_else(|| usage("--rate takes a positive number"))
            }
            "--protocols" => {
                a.variants = value()
                    .split(',')
                    .map(|s| {
                        Variant::parse(s).unwrap_or_else(|| {
                            usage(&format!(
                                "unknown protocol `{s}` (classic, classic-eager, consumer)"
                            ))
                        })
                    })
                    .collect();
                if a.variants.is_empty() {
                    usage("--protocols names none");
                }
            }
            "-h" | "--help" => usage("draws a rebalance timeline"),
            _ => usage(&format!("unknown option {flag}")),
        }
    }
    a
}

// ---------------------------------------------------------------------------------------
// What the members record

/// One partition owned by one member from `from` to `to` (seconds).
#[derive(Clone, Copy, Debug)]
struct Interval {
    partition: i32,
    from: f64,
    to: f64,
}

#[derive(Default)]
struct Track {
    name: &'static str,
    /// When the member was created and subscribed.
    started: Option<f64>,
    /// When it called `close`.
    leaving: Option<f64>,
    /// When `close` returned.
    closed: Option<f64>,
    open: BTreeMap<i32, f64>,
    intervals: Vec<Interval>,
    /// Records returned by `poll`, per (partition, bucket).
    buckets: BTreeMap<(i32, usize), u32>,
    /// When `poll` returned records of a partition: (partition, seconds), one per poll.
    deliveries: Vec<(i32, f64)>,
    delivered: u64,
    /// Partitions revoked while the member stayed in the group.
    revoked: u64,
    /// Partitions revoked by `close`.
    revoked_on_close: u64,
    lost: u64,
}

struct Shared {
    t0: Instant,
    tracks: Mutex<Vec<Track>>,
    /// How often each (partition, offset) was returned, over all members.
    seen: Mutex<HashMap<(i32, i64), u32>>,
    log: Mutex<Vec<String>>,
    errors: Mutex<Vec<String>>,
}

impl Shared {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn note(&self, line: String) {
        let line = format!("{:6.2} s  {line}", self.now());
        println!("  {line}");
        self.log.lock().unwrap().push(line);
    }

    fn error(&self, who: &str, what: String) {
        let line = format!("{:6.2} s  {who}: {what}", self.now());
        eprintln!("  ERROR {line}");
        self.errors.lock().unwrap().push(line);
    }

    fn release(&self, idx: usize, partitions: &[TopicPartition], lost: bool) {
        let t = self.now();
        let mut tracks = self.tracks.lock().unwrap();
        let track = &mut tracks[idx];
        for tp in partitions {
            if let Some(from) = track.open.remove(&tp.partition()) {
                track.intervals.push(Interval {
                    partition: tp.partition(),
                    from,
                    to: t,
                });
            }
        }
        let n = partitions.len() as u64;
        if lost {
            track.lost += n;
        } else if track.leaving.is_some() {
            track.revoked_on_close += n;
        } else {
            track.revoked += n;
        }
    }
}

fn numbers(partitions: &[TopicPartition]) -> String {
    let mut v: Vec<i32> = partitions.iter().map(|tp| tp.partition()).collect();
    v.sort_unstable();
    let v: Vec<String> = v.iter().map(|p| p.to_string()).collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

struct Listener {
    idx: usize,
    name: &'static str,
    shared: Arc<Shared>,
}

impl RebalanceListener for Listener {
    fn on_partitions_revoked(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        if partitions.is_empty() {
            return;
        }
        let offsets: HashMap<TopicPartition, OffsetAndMetadata> = consumer
            .consumed_offsets()
            .into_iter()
            .filter(|(tp, _)| partitions.contains(tp))
            .collect();
        if let Err(e) = consumer.commit_offsets_sync(&offsets) {
            self.shared
                .error(self.name, format!("commit in on_partitions_revoked: {e}"));
        }
        self.shared.release(self.idx, partitions, false);
        self.shared
            .note(format!("{} revoked  {}", self.name, numbers(partitions)));
    }

    fn on_partitions_assigned(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        if partitions.is_empty() {
            return;
        }
        let t = self.shared.now();
        {
            let mut tracks = self.shared.tracks.lock().unwrap();
            let track = &mut tracks[self.idx];
            for tp in partitions {
                track.open.entry(tp.partition()).or_insert(t);
            }
        }
        self.shared
            .note(format!("{} assigned {}", self.name, numbers(partitions)));
    }

    fn on_partitions_lost(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        self.shared.release(self.idx, partitions, true);
        self.shared
            .note(format!("{} LOST     {}", self.name, numbers(partitions)));
    }
}

/// One member's life: start at `start_at`, poll until `leave_at` (or until `done`), close.
#[allow(clippy::too_many_arguments)]
fn member(
    idx: usize,
    name: &'static str,
    variant: Variant,
    bootstrap: &str,
    topic: &str,
    group: &str,
    start_at: f64,
    leave_at: Option<f64>,
    shared: Arc<Shared>,
    done: Arc<AtomicBool>,
) {
    let wait = start_at - shared.now();
    if wait > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(wait));
    }
    let config = ConsumerConfig::new(bootstrap)
        .group_id(group)
        .client_id(&format!("timeline-{name}"))
        .auto_offset_reset(OffsetReset::Earliest)
        .enable_auto_commit(false);
    let config = match variant.configure(config) {
        Ok(c) => c,
        Err(e) => {
            shared.error(name, format!("config: {e}"));
            return;
        }
    };
    shared.tracks.lock().unwrap()[idx].started = Some(shared.now());
    shared.note(format!("{name} starts"));
    let mut consumer = match Consumer::new(config) {
        Ok(c) => c,
        Err(e) => {
            shared.error(name, format!("Consumer::new: {e}"));
            return;
        }
    };
    let listener = Listener {
        idx,
        name,
        shared: Arc::clone(&shared),
    };
    if let Err(e) = consumer.subscribe_with_listener(&[topic], listener) {
        shared.error(name, format!("subscribe: {e}"));
        return;
    }
    let mut last_error = String::new();
    while !done.load(Ordering::Relaxed) {
        if leave_at.is_some_and(|t| shared.now() >= t) {
            break;
        }
        let records = match consumer.poll(Duration::from_millis(100)) {
            Ok(r) => r,
            Err(e) if e.kind() == ErrorKind::Closed => {
                shared.error(name, format!("poll: {e}"));
                return;
            }
            Err(e) => {
                // Reported once per distinct message; the member goes on polling.
                let msg = e.to_string();
                if msg != last_error {
                    shared.error(name, format!("poll: {msg}"));
                    last_error = msg;
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        let now = shared.now();
        let bucket = (now / BUCKET) as usize;
        {
            let mut seen = shared.seen.lock().unwrap();
            let mut tracks = shared.tracks.lock().unwrap();
            let track = &mut tracks[idx];
            let mut last = -1;
            for r in &records {
                *seen.entry((r.partition(), r.offset())).or_insert(0) += 1;
                *track.buckets.entry((r.partition(), bucket)).or_insert(0) += 1;
                track.delivered += 1;
                if r.partition() != last {
                    track.deliveries.push((r.partition(), now));
                    last = r.partition();
                }
            }
        }
        if let Err(e) = consumer.commit_async(None) {
            shared.error(name, format!("commit_async: {e}"));
        }
    }
    shared.tracks.lock().unwrap()[idx].leaving = Some(shared.now());
    shared.note(format!("{name} leaves (close)"));
    if let Err(e) = consumer.close() {
        shared.error(name, format!("close: {e}"));
    }
    let t = shared.now();
    let mut tracks = shared.tracks.lock().unwrap();
    let track = &mut tracks[idx];
    track.closed = Some(t);
    // Whatever close did not revoke (it should have revoked everything) ends here.
    let open: Vec<(i32, f64)> = std::mem::take(&mut track.open).into_iter().collect();
    for (partition, from) in open {
        track.intervals.push(Interval {
            partition,
            from,
            to: t,
        });
    }
}

// ---------------------------------------------------------------------------------------
// One run

struct Run {
    variant: Variant,
    topic: String,
    tracks: Vec<Track>,
    /// Scale events: (time, label).
    events: Vec<(f64, String)>,
    /// When the producer stopped.
    end: f64,
    /// When the last member closed.
    last: f64,
    produced: u64,
    seen: HashMap<(i32, i64), u32>,
    errors: Vec<String>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn java(libs: &str) -> Command {
    let mut cmd = Command::new("java");
    cmd.arg(format!(
        "-Dlog4j2.configurationFile={}",
        root()
            .join("scripts/kafka/log4j2-tools.properties")
            .display()
    ))
    .arg("-cp")
    .arg(format!("{libs}/*"));
    cmd
}

fn kafka_libs(given: &Option<String>) -> String {
    if let Some(l) = given {
        return l.clone();
    }
    let out = Command::new("bash")
        .arg(root().join("scripts/broker.sh"))
        .arg("libs")
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/broker.sh libs");
    let s = String::from_utf8_lossy(&out.stdout);
    let libs = s.lines().last().unwrap_or("").trim().to_owned();
    if !out.status.success() || libs.is_empty() {
        eprintln!("rebalance_timeline: scripts/broker.sh libs failed; pass --kafka-libs");
        std::process::exit(1);
    }
    libs
}

fn create_topic(libs: &str, bootstrap: &str, topic: &str) {
    let out = java(libs)
        .arg(root().join("scripts/java/TestProducer.java"))
        .args(["--bootstrap", bootstrap, "--topic", topic, "--create-only"])
        .args(["--partitions", &PARTITIONS.to_string()])
        .output()
        .expect("run java");
    if !out.status.success() {
        eprintln!(
            "rebalance_timeline: creating {topic} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::process::exit(1);
    }
}

/// The producer process; stopped (killed and reaped) when dropped, on every path.
struct Producer(Child);

impl Producer {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn start_producer(libs: &str, bootstrap: &str, topic: &str, rate: u32) -> Producer {
    // Enough records for the whole run; the producer is stopped at END.
    let count = u64::from(rate) * (END as u64 + 60);
    java(libs)
        .arg("org.apache.kafka.tools.ProducerPerformance")
        .args(["--topic", topic, "--record-size", "100"])
        .args(["--num-records", &count.to_string()])
        .args(["--throughput", &rate.to_string()])
        .arg("--producer-props")
        .arg(format!("bootstrap.servers={bootstrap}"))
        .arg("partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner")
        .arg("linger.ms=5")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Producer)
        .expect("start ProducerPerformance")
}

fn all_partitions(topic: &str) -> Vec<TopicPartition> {
    (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p))
        .collect()
}

fn end_offsets(probe: &mut Consumer, topic: &str) -> kafka_consumer::Result<u64> {
    let ends = probe.end_offsets(&all_partitions(topic))?;
    Ok(ends.values().map(|o| (*o).max(0) as u64).sum())
}

fn run(args: &Args, libs: &str, variant: Variant) -> kafka_consumer::Result<Run> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let topic = format!("timeline-{}-{stamp}", variant.name());
    let group = topic.clone();
    println!(
        "== {}: topic and group {topic}, {PARTITIONS} partitions, {} records/s",
        variant.title(),
        args.rate
    );
    create_topic(libs, &args.bootstrap, &topic);
    let mut probe = Consumer::new(ConsumerConfig::new(&args.bootstrap))?;
    let mut producer = start_producer(libs, &args.bootstrap, &topic, args.rate);
    // Time 0 is when the first records are in the topic.
    let wait_until = Instant::now() + Duration::from_secs(60);
    while end_offsets(&mut probe, &topic)? == 0 {
        if Instant::now() > wait_until {
            producer.stop();
            eprintln!("rebalance_timeline: the producer wrote nothing in 60 s");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let shared = Arc::new(Shared {
        t0: Instant::now(),
        tracks: Mutex::new(
            PLAN.iter()
                .map(|(name, _, _)| Track {
                    name,
                    ..Track::default()
                })
                .collect(),
        ),
        seen: Mutex::new(HashMap::new()),
        log: Mutex::new(Vec::new()),
        errors: Mutex::new(Vec::new()),
    });
    let done = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = PLAN
        .iter()
        .enumerate()
        .map(|(idx, &(name, start_at, leave_at))| {
            let (bootstrap, topic, group) = (args.bootstrap.clone(), topic.clone(), group.clone());
            let (shared, done) = (Arc::clone(&shared), Arc::clone(&done));
            std::thread::spawn(move || {
                member(
                    idx, name, variant, &bootstrap, &topic, &group, start_at, leave_at, shared,
                    done,
                )
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64((END - shared.now()).max(0.0)));
    producer.stop();
    let end = shared.now();
    shared.note("producer stopped".into());
    // The broker may still be appending what the producer had sent.
    std::thread::sleep(Duration::from_millis(500));
    let produced = end_offsets(&mut probe, &topic)?;
    let drain_until = Instant::now() + DRAIN;
    while (shared.seen.lock().unwrap().len() as u64) < produced && Instant::now() < drain_until {
        std::thread::sleep(Duration::from_millis(50));
    }
    done.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("member thread");
    }
    let last = shared.now();
    let _ = probe.close();
    let mut events = Vec::new();
    for (name, start_at, leave_at) in PLAN {
        if start_at > 0.0 {
            events.push((start_at, format!("{name} joins")));
        }
        if let Some(t) = leave_at {
            events.push((t, format!("{name} leaves")));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let shared = Arc::try_unwrap(shared).unwrap_or_else(|_| panic!("members still running"));
    Ok(Run {
        variant,
        topic,
        tracks: shared.tracks.into_inner().unwrap(),
        events,
        end,
        last,
        produced,
        seen: shared.seen.into_inner().unwrap(),
        errors: shared.errors.into_inner().unwrap(),
    })
}

// ---------------------------------------------------------------------------------------
// Figures

struct Figures {
    /// A's first assignment: the figures count from there.
    first: f64,
    /// Partition-seconds, from `first` to the producer's stop, without an owner.
    unowned: f64,
    /// The longest time one partition was without an owner.
    longest_unowned: f64,
    /// Partition-seconds in pauses longer than `STALL` between two deliveries of a
    /// partition (to any member).
    stalled: f64,
    longest_stall: f64,
    /// Those pauses: (partition, from, to).
    stalls: Vec<(i32, f64, f64)>,
    /// Partition-seconds owned by two members at once (must be 0).
    overlap: f64,
    revoked: u64,
    revoked_on_close: u64,
    lost: u64,
    /// Partitions that changed owner.
    moves: u64,
    delivered: u64,
    distinct: u64,
    missing: u64,
}

/// The parts of [from, to] that `covered` (sorted, possibly overlapping) leaves free.
fn gaps(mut covered: Vec<(f64, f64)>, from: f64, to: f64) -> Vec<(f64, f64)> {
    covered.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = Vec::new();
    let mut at = from;
    for (a, b) in covered {
        if a > at && a < to {
            out.push((at, a.min(to)));
        }
        at = at.max(b);
    }
    if at < to {
        out.push((at, to));
    }
    out
}

fn owners(run: &Run, partition: i32) -> Vec<(f64, f64)> {
    run.tracks
        .iter()
        .flat_map(|t| t.intervals.iter())
        .filter(|i| i.partition == partition)
        .map(|i| (i.from, i.to))
        .collect()
}

fn figures(run: &Run) -> Figures {
    let first = run.tracks[0]
        .intervals
        .iter()
        .map(|i| i.from)
        .fold(f64::INFINITY, f64::min)
        .min(run.end);
    let (mut unowned, mut longest_unowned, mut overlap) = (0.0, 0.0f64, 0.0);
    let (mut stalled, mut longest_stall) = (0.0, 0.0f64);
    let mut stalls = Vec::new();
    let mut moves = 0u64;
    for p in 0..PARTITIONS {
        let mut own = owners(run, p);
        for (a, b) in gaps(own.clone(), first, run.end) {
            unowned += b - a;
            longest_unowned = longest_unowned.max(b - a);
        }
        own.sort_by(|a, b| a.0.total_cmp(&b.0));
        moves += own.len().saturating_sub(1) as u64;
        for w in own.windows(2) {
            overlap += (w[0].1.min(run.end) - w[1].0).max(0.0);
        }
        let mut times: Vec<f64> = run
            .tracks
            .iter()
            .flat_map(|t| t.deliveries.iter())
            .filter(|(q, t)| *q == p && *t >= first && *t <= run.end)
            .map(|(_, t)| *t)
            .collect();
        times.push(first);
        times.push(run.end);
        times.sort_by(f64::total_cmp);
        for w in times.windows(2) {
            let gap = w[1] - w[0];
            if gap > STALL {
                stalled += gap;
                longest_stall = longest_stall.max(gap);
                stalls.push((p, w[0], w[1]));
            }
        }
    }
    let delivered: u64 = run.tracks.iter().map(|t| t.delivered).sum();
    let distinct = run.seen.len() as u64;
    Figures {
        first,
        unowned,
        longest_unowned,
        stalled,
        longest_stall,
        stalls,
        overlap,
        revoked: run.tracks.iter().map(|t| t.revoked).sum(),
        revoked_on_close: run.tracks.iter().map(|t| t.revoked_on_close).sum(),
        lost: run.tracks.iter().map(|t| t.lost).sum(),
        moves,
        delivered,
        distinct,
        missing: run.produced.saturating_sub(distinct),
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn summary(run: &Run, f: &Figures) {
    println!("-- {} ({})", run.variant.title(), run.topic);
    println!(
        "   first assignment at {:.2} s; from then to the producer's stop ({:.1} s):",
        f.first, run.end
    );
    println!(
        "   without an owner: {:.1} partition-s (longest {:.2} s); owned twice: {:.2} partition-s",
        f.unowned, f.longest_unowned, f.overlap
    );
    println!(
        "   no records delivered: {:.2} partition-s in pauses over 250 ms (longest {:.2} s)",
        f.stalled, f.longest_stall
    );
    println!(
        "   partitions revoked from members that stayed: {}, revoked by close: {}, lost: {}, owner changes: {}",
        f.revoked, f.revoked_on_close, f.lost, f.moves
    );
    println!(
        "   records: {} produced, {} delivered, {} duplicates, {} missing",
        run.produced,
        f.delivered,
        f.delivered - f.distinct,
        f.missing
    );
    let mut stalls = f.stalls.clone();
    stalls.sort_by(|a, b| a.1.total_cmp(&b.1));
    let list: Vec<String> = stalls
        .iter()
        .map(|(p, a, b)| format!("p{p} {a:.2}-{b:.2}"))
        .collect();
    if !list.is_empty() {
        println!("   pauses: {}", list.join(", "));
    }
    for t in &run.tracks {
        println!(
            "   {}: started {}, closed {}, {} records",
            t.name,
            t.started.map_or("-".into(), |s| format!("{s:.2} s")),
            t.closed.map_or("-".into(), |s| format!("{s:.2} s")),
            t.delivered
        );
    }
    if !run.errors.is_empty() {
        println!("   {} errors:", run.errors.len());
        for e in &run.errors {
            println!("     {e}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Drawing

const WIDTH: f64 = 1000.0;
const ROW: f64 = 3.0;
const ROW_GAP: f64 = 1.0;
const LANE_GAP: f64 = 12.0;
const NONE_ROW: f64 = 2.0;
const LEFT: f64 = 42.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 58.0;
/// Light (owned) and dark (records) colour per member.
const COLOURS: [(&str, &str); 3] = [
    ("#c5d9ee", "#1f5f9e"),
    ("#fbd8b5", "#b85c00"),
    ("#cde8c8", "#2e7d32"),
];
const UNOWNED: &str = "#d62728";

/// Whether a panel is wide enough for the long title and caption lines.
fn wide(width: f64) -> bool {
    width >= 450.0
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn lane_height() -> f64 {
    f64::from(PARTITIONS) * (ROW + ROW_GAP) - ROW_GAP
}

fn none_height() -> f64 {
    f64::from(PARTITIONS) * NONE_ROW
}

fn plot_bottom(members: usize) -> f64 {
    TOP + members as f64 * (lane_height() + LANE_GAP) + none_height()
}

fn panel(svg: &mut String, run: &Run, f: &Figures, ox: f64, width: f64, t_max: f64) {
    let x0 = ox + LEFT;
    let plot_w = width - LEFT - RIGHT;
    let x = |t: f64| x0 + t.clamp(0.0, t_max) / t_max * plot_w;
    let bottom = plot_bottom(run.tracks.len());
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="20" class="title">{}</text>"#,
        ox + LEFT,
        esc(if wide(width) {
            run.variant.title()
        } else {
            run.variant.short_title()
        })
    );
    // Lanes.
    for (i, track) in run.tracks.iter().enumerate() {
        let top = TOP + i as f64 * (lane_height() + LANE_GAP);
        let (light, dark) = COLOURS[i % COLOURS.len()];
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" class="lane" fill="{dark}">{}</text>"#,
            ox + 6.0,
            top + lane_height() / 2.0 + 5.0,
            track.name
        );
        if let Some(s) = track.started {
            let e = track.closed.unwrap_or(run.last);
            let _ = writeln!(
                svg,
                r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#f0f0f0"/>"##,
                x(s),
                top - 1.0,
                (x(e) - x(s)).max(0.5),
                lane_height() + 2.0
            );
        }
        let mut d = String::new();
        for iv in &track.intervals {
            let y = top + f64::from(iv.partition) * (ROW + ROW_GAP);
            let _ = write!(
                d,
                "M{:.1} {:.1}h{:.1}v{ROW}h{:.1}z",
                x(iv.from),
                y,
                (x(iv.to) - x(iv.from)).max(0.3),
                -(x(iv.to) - x(iv.from)).max(0.3)
            );
        }
        let _ = writeln!(svg, r#"<path d="{d}" fill="{light}"/>"#);
        let tick = (BUCKET / t_max * plot_w * 0.6).max(0.6);
        let mut d = String::new();
        for &(p, b) in track.buckets.keys() {
            let y = top + f64::from(p) * (ROW + ROW_GAP);
            let _ = write!(
                d,
                "M{:.1} {:.1}h{tick:.1}v{ROW}h-{tick:.1}z",
                x(b as f64 * BUCKET),
                y
            );
        }
        let _ = writeln!(svg, r#"<path d="{d}" fill="{dark}"/>"#);
    }
    // Partitions without an owner (from time 0 to the producer's stop).
    let top = TOP + run.tracks.len() as f64 * (lane_height() + LANE_GAP);
    let _ = writeln!(
        svg,
        r#"<text x="{0:.1}" y="{1:.1}" class="small" fill="{UNOWNED}"><tspan x="{0:.1}">no</tspan><tspan x="{0:.1}" dy="10">owner</tspan></text>"#,
        ox + 6.0,
        top + none_height() / 2.0 - 1.5
    );
    let mut d = String::new();
    for p in 0..PARTITIONS {
        for (a, b) in gaps(owners(run, p), 0.0, run.end) {
            let _ = write!(
                d,
                "M{:.1} {:.1}h{:.1}v{NONE_ROW}h{:.1}z",
                x(a),
                top + f64::from(p) * NONE_ROW,
                (x(b) - x(a)).max(0.5),
                -(x(b) - x(a)).max(0.5)
            );
        }
    }
    let _ = writeln!(svg, r#"<path d="{d}" fill="{UNOWNED}"/>"#);
    let _ = writeln!(
        svg,
        r##"<rect x="{x0:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#ddd" stroke-width="0.5"/>"##,
        x(run.end) - x0,
        none_height()
    );
    // After each scale event: the longest time a partition went without an owner.
    let all_gaps: Vec<(f64, f64)> = (0..PARTITIONS)
        .flat_map(|p| gaps(owners(run, p), 0.0, run.end))
        .collect();
    for (k, (t, _)) in run.events.iter().enumerate() {
        let next = run.events.get(k + 1).map_or(run.end, |e| e.0);
        let moved: Vec<&(f64, f64)> = all_gaps
            .iter()
            .filter(|(a, _)| *a >= t - 0.05 && *a < next)
            .collect();
        let Some(longest) = moved.iter().map(|(a, b)| b - a).reduce(f64::max) else {
            continue;
        };
        let until = moved.iter().map(|(_, b)| *b).fold(*t, f64::max);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" class="small" fill="{UNOWNED}">{longest:.2} s</text>"#,
            x(until) + 2.5,
            top + none_height() / 2.0 + 3.5
        );
    }
    // Scale events.
    for (t, label) in &run.events {
        let _ = writeln!(
            svg,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#555" stroke-width="0.8" stroke-dasharray="3,2"/>"##,
            x(*t),
            TOP - 12.0,
            bottom + 2.0
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" class="small" text-anchor="middle">{}</text>"#,
            x(*t),
            TOP - 15.0,
            esc(label)
        );
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#999" stroke-width="0.8" stroke-dasharray="1,2"/>"##,
        x(run.end),
        TOP - 4.0,
        bottom + 2.0
    );
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" class="small" text-anchor="end" fill="#777">producer stops</text>"##,
        x(run.end) - 2.0,
        TOP - 5.0
    );
    // Time axis.
    let axis = bottom + 6.0;
    let _ = writeln!(
        svg,
        r##"<line x1="{x0:.1}" y1="{axis:.1}" x2="{:.1}" y2="{axis:.1}" stroke="#333" stroke-width="0.8"/>"##,
        x(t_max)
    );
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let _ = writeln!(
            svg,
            r##"<line x1="{0:.1}" y1="{axis:.1}" x2="{0:.1}" y2="{1:.1}" stroke="#333" stroke-width="0.8"/><text x="{0:.1}" y="{2:.1}" class="small" text-anchor="middle">{3}</text>"##,
            x(t),
            axis + 3.0,
            axis + 13.0,
            if t == 0.0 {
                "0 s".to_owned()
            } else {
                format!("{t:.0}")
            }
        );
        t += 5.0;
    }
    // Caption.
    let records = format!(
        "{} produced · {} delivered · {} duplicates · {} missing",
        thousands(run.produced),
        thousands(f.delivered),
        thousands(f.delivered - f.distinct),
        thousands(f.missing)
    );
    let mut lines = vec![
        format!(
            "without an owner: {:.1} partition-s (longest {:.1} s)",
            f.unowned, f.longest_unowned
        ),
        format!(
            "no records delivered: {:.1} partition-s (longest {:.2} s)",
            f.stalled, f.longest_stall
        ),
    ];
    if wide(width) {
        lines.push(format!(
            "revoked from members that stayed: {} · lost: {} · owner changes: {}",
            f.revoked, f.lost, f.moves
        ));
        lines.push(format!("records: {records}"));
    } else {
        lines.push(format!(
            "revoked from members that stayed: {} · lost: {}",
            f.revoked, f.lost
        ));
        lines.push(format!("owner changes: {}", f.moves));
        lines.push(records);
    }
    for (i, line) in lines.iter().enumerate() {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" class="caption">{}</text>"#,
            ox + LEFT,
            axis + 32.0 + i as f64 * 15.0,
            esc(line)
        );
    }
    if !run.errors.is_empty() {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" class="caption" fill="{UNOWNED}">{} errors from the members (see the run's output)</text>"#,
            ox + LEFT,
            axis + 32.0 + lines.len() as f64 * 15.0,
            run.errors.len()
        );
    }
}

fn draw(runs: &[(Run, Figures)], rate: u32) -> String {
    let members = runs.iter().map(|(r, _)| r.tracks.len()).max().unwrap_or(0);
    let t_max = (runs.iter().map(|(r, _)| r.last).fold(END, f64::max) / 2.0).ceil() * 2.0;
    let bottom = plot_bottom(members);
    let captions = if wide(WIDTH / runs.len() as f64) {
        4.0
    } else {
        5.0
    } + f64::from(u8::from(runs.iter().any(|(r, _)| !r.errors.is_empty())));
    let legend_y = bottom + 6.0 + 32.0 + captions * 15.0 + 8.0;
    let height = legend_y + 2.0 * 14.0 + 10.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(
        svg,
        "<style>.title{{font-size:13px;font-weight:bold;fill:#222}} .lane{{font-size:15px;font-weight:bold}} \
         .small{{font-size:9.5px;fill:#333}} .caption{{font-size:10.5px;fill:#222}} .legend{{font-size:10.5px;fill:#555}}</style>"
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let width = WIDTH / runs.len() as f64;
    for (i, (run, f)) in runs.iter().enumerate() {
        panel(&mut svg, run, f, i as f64 * width, width, t_max);
        if i > 0 {
            let _ = writeln!(
                svg,
                r##"<line x1="{0:.1}" y1="6" x2="{0:.1}" y2="{1:.1}" stroke="#ccc"/>"##,
                i as f64 * width,
                legend_y - 10.0
            );
        }
    }
    let legend = [
        format!(
            "One lane per member, one thin row per partition (0–{}, top to bottom): light = owned \
             (from the listener callbacks), dark = records returned by poll (250 ms buckets),",
            PARTITIONS - 1
        ),
        format!(
            "grey = member running; red = partition without an owner (with the longest gap after \
             each event). {PARTITIONS} partitions, producer at {rate} records/s (round-robin)."
        ),
        "Heartbeats every 500 ms with both protocols (classic: heartbeat.interval.ms; consumer: \
         the local broker's group.consumer.heartbeat.interval.ms)."
            .to_owned(),
    ];
    for (i, line) in legend.iter().enumerate() {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" class="legend">{}</text>"#,
            LEFT * 0.3,
            legend_y + i as f64 * 14.0,
            esc(line)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn main() {
    let args = parse_args();
    let libs = kafka_libs(&args.libs);
    let mut runs = Vec::new();
    for &variant in &args.variants {
        match run(&args, &libs, variant) {
            Ok(r) => {
                let f = figures(&r);
                runs.push((r, f));
            }
            Err(e) => {
                eprintln!("rebalance_timeline: {} run failed: {e}", variant.name());
                std::process::exit(1);
            }
        }
    }
    println!();
    for (run, f) in &runs {
        summary(run, f);
    }
    let svg = draw(&runs, args.rate);
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).expect("create the output directory");
    }
    std::fs::write(&args.out, svg).expect("write the SVG");
    println!("wrote {}", args.out.display());
}
