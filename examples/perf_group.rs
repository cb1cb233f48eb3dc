//! Scale benchmark, the group part (`bash scripts/bench.sh --scale`, driven by
//! `benches/scale.py`; see benches/README.md): MEMBERS of our consumers, threads of this
//! process, join one group on a topic of PARTITIONS partitions that each hold records, then
//! LEAVE of them close; it measures how long the group takes to converge each time and the
//! CPU this process spends meanwhile, and prints one JSON line.
//!
//! ```text
//! cargo build --release --example perf_group
//! target/release/examples/perf_group BOOTSTRAP TOPIC PARTITIONS --protocol classic|consumer
//!     [--members 50] [--leave 25] [--idle-secs 5] [--timeout-secs 180] [--set KEY=VALUE]...
//! ```
//!
//! Every member: `group.protocol` as given (classic: `partition.assignment.strategy=
//! cooperative-sticky`; consumer: the broker's assignor), `auto.offset.reset=earliest`,
//! `enable.auto.commit=false` (so a partition that moves is read again from the start: it
//! delivers at once), the throughput benchmark's fetch settings, `--set` on top; a member
//! polls (`poll(100 ms)`) until told to close. The group is fresh (named after the process
//! id and the time).
//!
//! Converged: every partition is owned by exactly one member (as the members' rebalance
//! listeners tell it), that member is one of those still in the group and has returned a
//! record of the partition since it got it, and every member in the group owns
//! PARTITIONS / members partitions (rounded down or up). Checked every 5 ms.
//!
//! 1. Join: the members are made (`Consumer::new`), then all call `subscribe` at once; the
//!    clock starts there. `join.converged_s`: until converged with all MEMBERS.
//! 2. Idle window (`--idle-secs`): `idle_all` (the process's CPU and the I/O threads' sum,
//!    in % of one core; the members keep polling).
//! 3. Leave: the last LEAVE members call `close` at once; `leave.converged_s`: from there
//!    until converged with the rest (`close_ms`: how long their `close` calls took).
//! 4. Idle window again (`idle_rest`), then the rest close.
//!
//! `metrics` of a phase: what the members' own `Consumer::metrics()` say of it, taken after
//! the phase's idle window (so a rebalance round that ends after convergence counts) from
//! the members in the group then, against their snapshot before the phase (for the leave,
//! the one after the first idle window): `rebalances` (p50 / max / sum over the members of
//! `rebalance-total`'s growth), `rebalance_latency_ms` (p50 / max over the members that
//! rebalanced of `last-rebalance-latency`: the member's own view of its last rebalance),
//! `failed_rebalances` (sum of `failed-rebalance-total`'s growth), `records` (sum of
//! `records-consumed-total`'s growth). The members take the snapshot on their own threads
//! between polls when asked.
//!
//! `cpu_s` of a phase: the process's CPU from its start to converged (the threads'
//! `/proc/self/task/*/schedstat`; the closed members' threads are gone by then, so for the
//! leave phase it is the difference of the process's utime+stime from `/proc/self/stat`,
//! 10 ms ticks). `assign_callbacks` / `partitions_assigned`: `on_partitions_assigned` calls
//! (with partitions) and the partitions they handed out during the phase.
//!
//! Exits 1 (after printing what it has, `"error"` set) if a phase does not converge within
//! `--timeout-secs`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_consumer::{Consumer, ConsumerConfig, RebalanceListener, TopicPartition};

const IO_THREAD: &str = "kafka-consumer";
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
const CHECK_EVERY: Duration = Duration::from_millis(5);

struct Args {
    bootstrap: String,
    topic: String,
    partitions: usize,
    protocol: String,
    members: usize,
    leave: usize,
    idle: Duration,
    timeout: Duration,
    sets: Vec<(String, String)>,
}

/// What the members' listeners and polls report, shared by every thread.
struct Group {
    /// Per partition: the members that say they own it.
    owners: Vec<Vec<usize>>,
    /// Per partition: its owner has returned a record of it since it got it.
    delivering: Vec<bool>,
    /// Per member: the partitions it owns.
    owned: Vec<usize>,
    assign_callbacks: u64,
    partitions_assigned: u64,
    errors: Vec<String>,
    /// Snapshots are wanted from the members that have not taken one in this round.
    metrics_round: u64,
    /// Per member: its last snapshot (the round it answered).
    metrics: Vec<MemberMetrics>,
}

/// What a member's `Consumer::metrics()` said, at the round it was asked for.
#[derive(Clone, Copy, Default)]
struct MemberMetrics {
    round: u64,
    rebalance_total: u64,
    failed_rebalance_total: u64,
    last_rebalance_latency_ms: Option<f64>,
    records_consumed_total: u64,
}

impl MemberMetrics {
    fn of(consumer: &Consumer, round: u64) -> MemberMetrics {
        let m = consumer.metrics();
        MemberMetrics {
            round,
            rebalance_total: m.rebalance_total,
            failed_rebalance_total: m.failed_rebalance_total,
            last_rebalance_latency_ms: m.last_rebalance_latency.map(|d| d.as_secs_f64() * 1e3),
            records_consumed_total: m.records_consumed_total,
        }
    }
}

/// One member's rebalance listener.
struct Listener {
    member: usize,
    group: Arc<Mutex<Group>>,
}

/// A member thread and its stop flag.
struct Member {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Duration>,
}

/// Figures of a phase.
#[derive(Default)]
struct Phase {
    converged_s: Option<f64>,
    cpu_s: f64,
    assign_callbacks: u64,
    partitions_assigned: u64,
    close_ms: Vec<f64>,
    /// The members' snapshots before and after the phase (see the module doc).
    metrics: Option<(Vec<MemberMetrics>, Vec<MemberMetrics>)>,
}

/// Figures of an idle window.
#[derive(Default)]
struct Idle {
    window_s: f64,
    process_cpu_pct: f64,
    io_threads: usize,
    io_threads_cpu_pct: f64,
}

#[derive(Default)]
struct Report {
    join: Phase,
    idle_all: Idle,
    leave: Phase,
    idle_rest: Idle,
    rss_kib: u64,
    error: Option<String>,
}

impl Group {
    fn new(partitions: usize, members: usize) -> Group {
        Group {
            owners: vec![Vec::new(); partitions],
            delivering: vec![false; partitions],
            owned: vec![0; members],
            assign_callbacks: 0,
            partitions_assigned: 0,
            errors: Vec::new(),
            metrics_round: 0,
            metrics: vec![MemberMetrics::default(); members],
        }
    }

    fn release(&mut self, member: usize, partitions: impl Iterator<Item = usize>) {
        for p in partitions {
            if let Some(i) = self.owners[p].iter().position(|m| *m == member) {
                self.owners[p].swap_remove(i);
                self.owned[member] -= 1;
                self.delivering[p] = false;
            }
        }
    }

    /// Converged with members `0..live` in the group (see the module doc).
    fn converged(&self, live: usize) -> bool {
        let n = self.owners.len();
        let (low, high) = (n / live, n.div_ceil(live));
        self.owned[..live].iter().all(|c| (low..=high).contains(c))
            && self.owned[live..].iter().all(|c| *c == 0)
            && self
                .owners
                .iter()
                .zip(&self.delivering)
                .all(|(o, d)| o.len() == 1 && o[0] < live && *d)
    }
}

impl RebalanceListener for Listener {
    fn on_partitions_assigned(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        let mut g = self.group.lock().unwrap();
        if !partitions.is_empty() {
            g.assign_callbacks += 1;
        }
        g.partitions_assigned += partitions.len() as u64;
        for tp in partitions {
            let p = tp.partition() as usize;
            g.owners[p].push(self.member);
            g.owned[self.member] += 1;
            g.delivering[p] = false;
        }
    }

    fn on_partitions_revoked(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        let mut g = self.group.lock().unwrap();
        g.release(
            self.member,
            partitions.iter().map(|tp| tp.partition() as usize),
        );
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("perf_group: {e}");
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
        eprintln!("perf_group: {e}");
        std::process::exit(1);
    }
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: perf_group BOOTSTRAP TOPIC PARTITIONS --protocol classic|consumer \
                 [--members N] [--leave N] [--idle-secs S] [--timeout-secs S] [--set KEY=VALUE]...";
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut positional = Vec::new();
    let (mut protocol, mut members, mut leave) = (None, 50, 25);
    let (mut idle, mut timeout) = (5, 180);
    let mut sets = Vec::new();
    let mut it = raw.into_iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--protocol" => {
                let p = value("--protocol")?;
                if p != "classic" && p != "consumer" {
                    return Err(format!("--protocol {p}: classic or consumer"));
                }
                protocol = Some(p);
            }
            "--members" => members = number(&value("--members")?)?,
            "--leave" => leave = number(&value("--leave")?)?,
            "--idle-secs" => idle = number(&value("--idle-secs")?)?,
            "--timeout-secs" => timeout = number(&value("--timeout-secs")?)?,
            "--set" => {
                let kv = value("--set")?;
                let (k, v) = kv.split_once('=').ok_or("--set needs KEY=VALUE")?;
                sets.push((k.to_owned(), v.to_owned()));
            }
            s if s.starts_with("--") => return Err(format!("unknown option {s}\n{usage}")),
            _ => positional.push(a),
        }
    }
    let [bootstrap, topic, partitions] =
        <[String; 3]>::try_from(positional).map_err(|_| usage.to_owned())?;
    let protocol = protocol.ok_or(usage)?;
    if members == 0 || leave >= members {
        return Err("--members must be positive and --leave smaller".into());
    }
    Ok(Args {
        bootstrap,
        topic,
        partitions: number(&partitions)?,
        protocol,
        members,
        leave,
        idle: Duration::from_secs(idle as u64),
        timeout: Duration::from_secs(timeout as u64),
        sets,
    })
}

fn number(s: &str) -> Result<usize, String> {
    s.parse().map_err(|_| format!("{s}: not a whole number"))
}

fn run(args: &Args, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let group_id = format!("perf-group-{}-{nanos}", std::process::id());
    let mut config = ConsumerConfig::from_properties([
        ("bootstrap.servers", args.bootstrap.as_str()),
        ("client.id", "perf-group"),
        ("group.id", group_id.as_str()),
        ("group.protocol", args.protocol.as_str()),
        ("auto.offset.reset", "earliest"),
        ("enable.auto.commit", "false"),
        ("fetch.min.bytes", "1"),
        ("fetch.max.bytes", "52428800"),
        ("max.partition.fetch.bytes", "1048576"),
        ("fetch.max.wait.ms", "500"),
    ])?;
    if args.protocol == "classic" {
        config = config.set("partition.assignment.strategy", "cooperative-sticky")?;
    }
    for (k, v) in &args.sets {
        config = config.set(k, v)?;
    }

    let group = Arc::new(Mutex::new(Group::new(args.partitions, args.members)));
    let barrier = Arc::new(Barrier::new(args.members + 1));
    let mut members = Vec::new();
    for m in 0..args.members {
        let consumer = Consumer::new(config.clone())?;
        members.push(spawn_member(
            m,
            consumer,
            args.topic.clone(),
            group.clone(),
            barrier.clone(),
        )?);
    }

    // 1. Join.
    let cpu0 = threads_cpu_s();
    barrier.wait();
    let start = Instant::now();
    report.join.converged_s = Some(converge(&group, args.members, start, args.timeout)?);
    report.join.cpu_s = threads_cpu_s() - cpu0;
    {
        let g = group.lock().unwrap();
        report.join.assign_callbacks = g.assign_callbacks;
        report.join.partitions_assigned = g.partitions_assigned;
    }

    // 2. Idle, all members.
    report.idle_all = idle_window(args.idle);
    let after_join = snapshot(&group, args.members, args.timeout)?;
    report.join.metrics = Some((
        vec![MemberMetrics::default(); args.members],
        after_join.clone(),
    ));

    // 3. Leave.
    let rest = args.members - args.leave;
    let (assigned0, callbacks0) = {
        let g = group.lock().unwrap();
        (g.partitions_assigned, g.assign_callbacks)
    };
    let cpu0 = process_stat_cpu_s();
    let start = Instant::now();
    let leaving = members.split_off(rest);
    for m in &leaving {
        m.stop.store(true, Ordering::SeqCst);
    }
    let mut closers = Vec::new();
    for (i, m) in leaving.into_iter().enumerate() {
        let group = group.clone();
        let member = rest + i;
        closers.push(std::thread::spawn(move || {
            let took = m.thread.join();
            // Whatever the listener did not hear of, the member no longer owns.
            let mut g = group.lock().unwrap();
            let left: Vec<usize> = (0..g.owners.len())
                .filter(|p| g.owners[*p].contains(&member))
                .collect();
            g.release(member, left.into_iter());
            took
        }));
    }
    report.leave.converged_s = Some(converge(&group, rest, start, args.timeout)?);
    report.leave.cpu_s = process_stat_cpu_s() - cpu0;
    for c in closers {
        match c.join() {
            Ok(Ok(took)) => report.leave.close_ms.push(took.as_secs_f64() * 1e3),
            _ => return Err("a leaving member's thread panicked".into()),
        }
    }
    {
        let g = group.lock().unwrap();
        report.leave.assign_callbacks = g.assign_callbacks - callbacks0;
        report.leave.partitions_assigned = g.partitions_assigned - assigned0;
    }

    // 4. Idle, the rest; then they close.
    report.idle_rest = idle_window(args.idle);
    let after_leave = snapshot(&group, rest, args.timeout)?;
    report.leave.metrics = Some((after_join[..rest].to_vec(), after_leave));
    report.rss_kib = rss_kib();
    for m in &members {
        m.stop.store(true, Ordering::SeqCst);
    }
    for m in members {
        m.thread.join().map_err(|_| "a member's thread panicked")?;
    }
    let errors = &group.lock().unwrap().errors;
    if let Some(e) = errors.first() {
        return Err(format!("{} member error(s), the first: {e}", errors.len()).into());
    }
    Ok(())
}

/// A member thread: waits at the barrier, subscribes, polls until stopped, closes (the
/// thread's result: how long `close` took).
fn spawn_member(
    member: usize,
    mut consumer: Consumer,
    topic: String,
    group: Arc<Mutex<Group>>,
    barrier: Arc<Barrier>,
) -> std::io::Result<Member> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name(format!("member-{member}"))
        .spawn(move || {
            let note = |e: &dyn std::fmt::Display| {
                group
                    .lock()
                    .unwrap()
                    .errors
                    .push(format!("member {member}: {e}"));
            };
            barrier.wait();
            let listener = Listener {
                member,
                group: group.clone(),
            };
            if let Err(e) = consumer.subscribe_with_listener(&[topic.as_str()], listener) {
                note(&e);
            }
            let mut seen = Vec::new();
            let mut answered = 0;
            while !flag.load(Ordering::SeqCst) {
                {
                    let mut g = group.lock().unwrap();
                    if g.metrics_round != answered {
                        answered = g.metrics_round;
                        g.metrics[member] = MemberMetrics::of(&consumer, answered);
                    }
                }
                match consumer.poll(POLL_TIMEOUT) {
                    Ok(batch) if !batch.is_empty() => {
                        seen.clear();
                        seen.extend(batch.iter().map(|r| r.partition() as usize));
                        seen.dedup();
                        let mut g = group.lock().unwrap();
                        for p in &seen {
                            if g.owners[*p].contains(&member) {
                                g.delivering[*p] = true;
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(e) => note(&e),
                }
            }
            let t = Instant::now();
            if let Err(e) = consumer.close() {
                note(&e);
            }
            t.elapsed()
        })?;
    Ok(Member { stop, thread })
}

/// Waits until the group has converged with members `0..live`: seconds since `start`.
fn converge(
    group: &Mutex<Group>,
    live: usize,
    start: Instant,
    timeout: Duration,
) -> Result<f64, String> {
    loop {
        {
            let g = group.lock().unwrap();
            if g.converged(live) {
                return Ok(start.elapsed().as_secs_f64());
            }
            if start.elapsed() > timeout {
                let owned: usize = g.owned[..live].iter().sum();
                let delivering = g.delivering.iter().filter(|d| **d).count();
                return Err(format!(
                    "not converged with {live} members after {timeout:?}: they own {owned} of {} \
                     partitions ({delivering} delivering), per member {:?}",
                    g.owners.len(),
                    &g.owned
                ));
            }
        }
        std::thread::sleep(CHECK_EVERY);
    }
}

/// Asks members `0..live` for a snapshot of their metrics and waits for every answer (each
/// answers between two polls, within one poll timeout).
fn snapshot(
    group: &Mutex<Group>,
    live: usize,
    timeout: Duration,
) -> Result<Vec<MemberMetrics>, String> {
    let round = {
        let mut g = group.lock().unwrap();
        g.metrics_round += 1;
        g.metrics_round
    };
    let start = Instant::now();
    loop {
        {
            let g = group.lock().unwrap();
            if g.metrics[..live].iter().all(|m| m.round == round) {
                return Ok(g.metrics[..live].to_vec());
            }
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "not every member took its metrics within {timeout:?}"
            ));
        }
        std::thread::sleep(CHECK_EVERY);
    }
}

/// Sleeps through a window and reports what the process and its I/O threads used.
fn idle_window(window: Duration) -> Idle {
    let io = io_threads();
    let io0: f64 = io.iter().filter_map(|t| schedstat_s(*t)).sum();
    let p0 = threads_cpu_s();
    let start = Instant::now();
    std::thread::sleep(window);
    let secs = start.elapsed().as_secs_f64();
    let io1: f64 = io.iter().filter_map(|t| schedstat_s(*t)).sum();
    Idle {
        window_s: secs,
        process_cpu_pct: (threads_cpu_s() - p0) / secs * 100.0,
        io_threads: io.len(),
        io_threads_cpu_pct: (io1 - io0) / secs * 100.0,
    }
}

impl Report {
    fn json(&self, args: &Args) -> String {
        let mut s = String::new();
        let assignor = if args.protocol == "classic" {
            "cooperative-sticky"
        } else {
            "broker default"
        };
        let _ = write!(
            s,
            "{{\"impl\":\"ours\",\"protocol\":\"{}\",\"assignor\":\"{assignor}\",\"topic\":\"{}\",\
             \"partitions\":{},\"members\":{},\"leave\":{}",
            args.protocol, args.topic, args.partitions, args.members, args.leave
        );
        let _ = write!(
            s,
            ",\"join\":{},\"idle_all\":{},\"leave_phase\":{},\"idle_rest\":{},\"rss_kib\":{}",
            self.join.json(),
            self.idle_all.json(),
            self.leave.json(),
            self.idle_rest.json(),
            self.rss_kib
        );
        if let Some(e) = &self.error {
            let _ = write!(s, ",\"error\":\"{}\"", e.replace(['"', '\\', '\n'], " "));
        }
        s.push('}');
        s
    }
}

impl Phase {
    fn json(&self) -> String {
        let close = median_max(&mut self.close_ms.clone())
            .map_or("null".to_owned(), |(p50, max)| {
                format!("{{\"p50\":{p50:.3},\"max\":{max:.3}}}")
            });
        format!(
            "{{\"converged_s\":{},\"cpu_s\":{:.3},\"assign_callbacks\":{},\
             \"partitions_assigned\":{},\"close_ms\":{close},\"metrics\":{}}}",
            self.converged_s
                .map_or("null".to_owned(), |v| format!("{v:.6}")),
            self.cpu_s,
            self.assign_callbacks,
            self.partitions_assigned,
            self.metrics_json()
        )
    }

    /// The phase's `metrics` object (see the module doc), `null` if it did not get there.
    fn metrics_json(&self) -> String {
        let Some((before, after)) = &self.metrics else {
            return "null".to_owned();
        };
        let mut rebalances = Vec::new();
        let mut latency_ms = Vec::new();
        let (mut failed, mut records) = (0, 0);
        for (b, a) in before.iter().zip(after) {
            let grew = a.rebalance_total.saturating_sub(b.rebalance_total);
            rebalances.push(grew as f64);
            if grew > 0 {
                latency_ms.extend(a.last_rebalance_latency_ms);
            }
            failed += a
                .failed_rebalance_total
                .saturating_sub(b.failed_rebalance_total);
            records += a
                .records_consumed_total
                .saturating_sub(b.records_consumed_total);
        }
        let sum: f64 = rebalances.iter().sum();
        let (r50, rmax) = json_pair(median_max(&mut rebalances));
        let (l50, lmax) = json_pair(median_max(&mut latency_ms));
        format!(
            "{{\"rebalances\":{{\"p50\":{r50},\"max\":{rmax},\"sum\":{sum}}},\
             \"rebalance_latency_ms\":{{\"p50\":{l50},\"max\":{lmax}}},\
             \"failed_rebalances\":{failed},\"records\":{records}}}",
        )
    }
}

impl Idle {
    fn json(&self) -> String {
        format!(
            "{{\"window_s\":{:.3},\"process_cpu_pct\":{:.3},\"io_threads\":{},\
             \"io_threads_cpu_pct\":{:.3}}}",
            self.window_s, self.process_cpu_pct, self.io_threads, self.io_threads_cpu_pct
        )
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The task ids of this process's threads (optionally only those with `name`).
fn tasks(name: Option<&str>) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        if let Some(name) = name {
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            if comm.trim_end() != name {
                return None;
            }
        }
        e.file_name().to_str()?.parse().ok()
    })
    .collect()
}

fn io_threads() -> Vec<u32> {
    tasks(Some(IO_THREAD))
}

/// CPU seconds of the threads alive now (nanoseconds from `schedstat`).
fn threads_cpu_s() -> f64 {
    tasks(None).into_iter().filter_map(schedstat_s).sum()
}

/// User+system CPU seconds of the whole process, threads that ended included (10 ms ticks).
fn process_stat_cpu_s() -> f64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some((_, rest)) = text.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (tick(11) + tick(12)) as f64 / 100.0
}

/// Time a thread has run, from `/proc/self/task/TID/schedstat` (nanoseconds).
fn schedstat_s(tid: u32) -> Option<f64> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map(|ns| ns as f64 / 1e9)
}

/// The median and the maximum of `v` (`None` if empty).
fn median_max(v: &mut [f64]) -> Option<(f64, f64)> {
    v.sort_by(f64::total_cmp);
    Some((v[(v.len().checked_sub(1)?) / 2], *v.last()?))
}

/// A median and a maximum as JSON numbers, `null`s for none.
fn json_pair(v: Option<(f64, f64)>) -> (String, String) {
    v.map_or(("null".to_owned(), "null".to_owned()), |(a, b)| {
        (format!("{a:.3}"), format!("{b:.3}"))
    })
}
