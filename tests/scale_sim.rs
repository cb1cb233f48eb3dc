//! Scale in simulation: the paths a real broker here cannot hold at 100,000 partitions,
//! driven through the sans-IO components against the simulated brokers
//! (`kafka_consumer::testing::scale`): a Metadata answer parsed and applied; fetch planning
//! and fetch sessions (the first, full requests and their answers, an idle round, an
//! incremental round after 10 partitions got records); ListOffsets and OffsetFetch answers
//! applied; an OffsetCommit built and its answer applied; range, roundrobin and
//! cooperative-sticky assignments over 50 members; KIP-848 reconciliation of a heartbeat
//! answer assigning every partition, then moving a tenth of them away.
//!
//! Each step's result is asserted; its time is printed, not asserted (the target is a
//! second or less each, in release). Also printed: the heap each idle partition takes in
//! the fetcher and in the metadata cache, measured by what dropping them frees (a counting
//! allocator; this file is its own test binary). Run: `cargo test --release --test
//! scale_sim -- --nocapture`.

#[path = "common/counting.rs"]
mod counting;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_consumer::testing::assignor::{
    Assignor, CooperativeSticky, MemberSubscription, PartitionInfo, Range, RoundRobin,
};
use kafka_consumer::testing::scale::{
    CommitPath, FetchPath, Kip848Path, MetadataPath, Requests, Start,
};
use kafka_consumer::TopicPartition;

use counting::{freed_by, Counting};

/// Partitions in every path (a tenth in a debug build, which is ten times slower and
/// where the figures mean little).
const N: i32 = if cfg!(debug_assertions) {
    10_000
} else {
    100_000
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The steps timed so far.
#[derive(Default)]
struct Table(Vec<(String, Duration)>);

impl Table {
    fn time<T>(&mut self, what: &str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        self.0.push((what.to_owned(), start.elapsed()));
        out
    }

    fn print(&self) {
        println!("scale_sim, {N} partitions (release; times are of one run, not asserted):");
        for (what, took) in &self.0 {
            println!("  {what:<62} {:>9.1} ms", took.as_secs_f64() * 1e3);
        }
    }
}

fn requests(count: usize, partitions: usize, forgotten: usize, full: usize) -> Requests {
    Requests {
        count,
        partitions,
        forgotten,
        full,
    }
}

fn metadata(table: &mut Table) {
    let mut m = MetadataPath::new(N);
    let what = format!(
        "metadata: answer of {} KB parsed and applied",
        m.answer_bytes() / 1000
    );
    table.time(&what, || m.apply());
    assert_eq!(m.leaders_known(), N as usize);
}

/// Fetching from offset 0 (the logs empty at first); returns what an idle partition takes
/// in the fetcher and in the metadata cache, in bytes.
fn fetching(table: &mut Table) -> (f64, f64) {
    let mut f = FetchPath::new(N, 0, Start::Offset0);
    let first = table.time("fetch: first round (3 full session requests)", || f.round());
    assert_eq!(first, requests(3, N as usize, 0, 3));
    f.brokers_answer();
    let moved = table.time("fetch: full answers applied", || f.deliver());
    assert_eq!(moved, 0, "empty logs");
    let idle = table.time("fetch: next round (incremental, nothing changed)", || {
        f.round()
    });
    assert_eq!(
        idle,
        requests(3, 0, 0, 0),
        "no partition in an idle request"
    );
    // A long poll that ends with nothing, and the next.
    f.advance(Duration::from_millis(500));
    f.brokers_answer();
    let moved = table.time("fetch: empty incremental answers applied", || f.deliver());
    assert_eq!(moved, 0);
    let idle = table.time("fetch: idle round", || f.round());
    assert_eq!(
        idle,
        requests(3, 0, 0, 0),
        "no partition in an idle request"
    );
    let busy: Vec<i32> = (0..10).map(|i| i * (N / 10 - 27)).collect();
    f.produce(&busy, 1);
    f.brokers_answer();
    let moved = table.time(
        "fetch: answers with records for 10 partitions applied",
        || f.deliver(),
    );
    assert_eq!(moved, 10);
    for p in &busy {
        assert_eq!(f.position(*p), Some(1), "t-{p}");
    }
    let changed = table.time("fetch: incremental round, 10 partitions changed", || {
        f.round()
    });
    assert_eq!(
        changed,
        requests(3, 10, 0, 0),
        "only the partitions that moved"
    );
    // What an idle partition costs: what dropping the fetcher and the metadata frees.
    f.brokers_answer();
    f.deliver();
    let fetcher = freed_by(|| f.drop_fetcher());
    let cluster = freed_by(|| f.drop_cluster());
    (
        fetcher as f64 / f.partitions() as f64,
        cluster as f64 / f.partitions() as f64,
    )
}

fn list_offsets(table: &mut Table) {
    let mut f = FetchPath::new(N, 5, Start::Beginning);
    let resets = table.time("ListOffsets: requests built", || f.round());
    assert_eq!(resets, requests(3, N as usize, 0, 0));
    f.brokers_answer();
    let found = table.time("ListOffsets: answers applied", || f.deliver());
    assert_eq!(found, N as usize);
    assert_eq!(f.positioned(), N as usize);
    let fetches = f.round();
    assert_eq!(
        fetches,
        requests(3, N as usize, 0, 3),
        "then fetched from there"
    );
}

fn commits(table: &mut Table) {
    let mut c = CommitPath::new(N, 7);
    c.find_coordinator();
    let asked = table.time("OffsetFetch: the fetcher's positions asked", || {
        c.fetch_positions()
    });
    assert_eq!(asked, N as usize);
    c.brokers_answer();
    table.time(
        "OffsetFetch: answer applied (positions to the fetcher)",
        || c.deliver(),
    );
    assert_eq!(c.positioned_at(7), N as usize);
    let sent = table.time("OffsetCommit: request built", || c.commit_all(1, 9));
    assert_eq!(sent, N as usize);
    c.brokers_answer();
    table.time("OffsetCommit: answer applied", || c.deliver());
    assert_eq!(c.committed(), &[(1, true)]);
    assert_eq!(c.stored_at(9), N as usize);
}

/// 20 topics of 5,000 partitions on three racks; 50 members (9 of 10 on a rack), member
/// `m` subscribing to `subscribe(m)`, owning what `previous` gave it.
fn group(
    members: usize,
    previous: Option<&BTreeMap<String, Vec<TopicPartition>>>,
    subscribe: impl Fn(usize) -> Vec<String>,
) -> (
    BTreeMap<String, Vec<PartitionInfo>>,
    Vec<MemberSubscription>,
) {
    const RACKS: [&str; 3] = ["rack-a", "rack-b", "rack-c"];
    let per_topic = N / 20;
    let topics = (0..20)
        .map(|t| {
            let parts = (0..per_topic)
                .map(|p| PartitionInfo {
                    partition: p,
                    replica_racks: vec![
                        RACKS[(p as usize + t) % 3].to_owned(),
                        RACKS[(p as usize + t + 1) % 3].to_owned(),
                    ],
                })
                .collect();
            (format!("topic-{t:02}"), parts)
        })
        .collect();
    let members = (0..members)
        .map(|m| {
            let id = format!("consumer-{m:02}");
            let mut sub = MemberSubscription {
                topics: subscribe(m),
                ..MemberSubscription::new(&id, &[])
            };
            if m % 10 != 9 {
                sub.rack = Some(RACKS[m % 3].to_owned());
            }
            if let Some(prev) = previous {
                sub.owned_partitions = prev.get(&id).cloned().unwrap_or_default();
                sub.generation = 1;
            }
            sub
        })
        .collect();
    (topics, members)
}

/// Every partition given exactly once, each member within one of the fair share.
fn check_assignment(what: &str, a: &BTreeMap<String, Vec<TopicPartition>>, members: usize) {
    let mut given: Vec<&TopicPartition> = a.values().flatten().collect();
    let n = given.len();
    given.sort();
    given.dedup();
    assert_eq!(given.len(), n, "{what}: a partition given twice");
    assert_eq!(n, N as usize, "{what}: every partition given");
    assert_eq!(a.len(), members, "{what}: every member answered");
    let fair = N as usize / members;
    for (m, parts) in a {
        assert!(
            parts.len() >= fair - 1 && parts.len() <= fair + 1,
            "{what}: {m} got {}",
            parts.len()
        );
    }
}

fn assignors(table: &mut Table) {
    let all = |_: usize| (0..20).map(|t| format!("topic-{t:02}")).collect::<Vec<_>>();
    let (topics, members) = group(50, None, all);
    for a in [&Range as &dyn Assignor, &RoundRobin, &CooperativeSticky] {
        let what = format!("assignment: {} over 50 members", a.name());
        let out = table.time(&what, || a.assign(&topics, &members));
        // Range spreads each topic on its own: 5,000 over 50, so it is fair too.
        check_assignment(a.name(), &out, 50);
    }
    // Half the members new: cooperative-sticky moves only what it must (the target; the
    // first round of the cooperative protocol hands out what does not move).
    let (topics, members) = group(25, None, all);
    let first = CooperativeSticky.assign(&topics, &members);
    let (topics, members) = group(50, Some(&first), all);
    let again = table.time(
        "assignment: cooperative-sticky, 25 members join 25 owning all",
        || CooperativeSticky.target_assignment(&topics, &members),
    );
    check_assignment("cooperative-sticky rebalance", &again, 50);
    let kept: usize = members
        .iter()
        .map(|m| {
            let owned: BTreeSet<&TopicPartition> = m.owned_partitions.iter().collect();
            again[&m.member_id]
                .iter()
                .filter(|p| owned.contains(p))
                .count()
        })
        .sum();
    assert!(kept >= N as usize / 2 - 50, "only {kept} partitions kept");
}

fn kip848(table: &mut Table) {
    let mut k = Kip848Path::new(N);
    k.coordinator_assigns(0..N);
    let owned = table.time("KIP-848: heartbeat assigning all reconciled, acked", || {
        k.reconcile()
    });
    assert_eq!(
        owned, N as usize,
        "the acknowledging heartbeat reports them all"
    );
    assert_eq!(k.owned(), N as usize);
    let moved = N / 10;
    k.coordinator_assigns(moved..N);
    let owned = table.time(
        "KIP-848: heartbeat moving a tenth away reconciled, acked",
        || k.reconcile(),
    );
    assert_eq!(owned, (N - moved) as usize);
    assert_eq!(k.owned(), (N - moved) as usize);
    let callbacks = k.callbacks();
    assert!(
        callbacks.contains(&("on_partitions_assigned".to_owned(), N as usize)),
        "{callbacks:?}"
    );
    assert!(
        callbacks.contains(&("on_partitions_revoked".to_owned(), moved as usize)),
        "{callbacks:?}"
    );
}

#[test]
fn every_path_handles_100_000_partitions() {
    let mut table = Table::default();
    metadata(&mut table);
    let (fetcher, cluster) = fetching(&mut table);
    list_offsets(&mut table);
    commits(&mut table);
    assignors(&mut table);
    kip848(&mut table);
    table.print();
    println!("  heap per idle partition: fetcher {fetcher:.0} B, metadata cache {cluster:.0} B");
    // Not a timing: a generous bound that catches a per-partition copy of something big.
    assert!(
        fetcher < 1024.0 && cluster < 1024.0,
        "{fetcher} / {cluster}"
    );
}
