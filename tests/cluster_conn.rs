//! Connections on the local 3-node cluster (`scripts/cluster.sh`, see
//! `tests/common/cluster.rs`): fetching from a follower in the consumer's rack (KIP-392)
//! while that follower goes away and comes back, a dead or silent bootstrap address, a
//! frozen leader and group coordinator, a connection cut in the middle of a Fetch response
//! (a proxy in front of a broker of our own), and the whole cluster gone for a minute.
//! Every test checks that each record arrives once and in order (or, in a group, again only
//! from the last commit on) and prints how long recovery took.

mod common;

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::*;
use kafka_consumer::{
    Consumer, ConsumerConfig, GroupProtocol, OffsetReset, Result as KResult, TopicPartition,
};

/// Prints past the test harness's output capture, so the numbers show in CI logs.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "cluster_conn: {line}");
}

fn produce(bootstrap: &str, topic: &str, partitions: i32, start: u64, count: u64) {
    let mut p = Produce::new(topic, partitions, count);
    p.bootstrap = Some(bootstrap);
    p.start = start;
    p.run();
}

/// What one consumer delivered, checked record by record: per partition, new records come
/// at the next offset with rising sequence numbers; a record delivered again (after a
/// rebalance) is allowed only at or after `floor`, the last offset the test saw committed
/// (`i64::MAX` while nothing may come twice).
struct Stream {
    topic: String,
    partitions: i32,
    /// Per partition, the offset after the highest record delivered.
    next: Vec<i64>,
    last_seq: Vec<Option<u64>>,
    floor: Vec<i64>,
    unique: u64,
    duplicates: u64,
    errors: Vec<String>,
}

impl Stream {
    fn new(topic: &str, partitions: i32) -> Stream {
        Stream {
            topic: topic.to_owned(),
            partitions,
            next: vec![0; partitions as usize],
            last_seq: vec![None; partitions as usize],
            floor: vec![i64::MAX; partitions as usize],
            unique: 0,
            duplicates: 0,
            errors: Vec::new(),
        }
    }

    /// One poll of `c` (100 ms at most); returns how many new records it delivered.
    fn poll(&mut self, c: &mut Consumer) -> u64 {
        let before = self.unique;
        match c.poll(Duration::from_millis(100)) {
            Ok(records) => {
                for r in &records {
                    let p = r.partition() as usize;
                    assert_eq!(r.topic(), self.topic);
                    let s = seq(&r);
                    assert_eq!(
                        s % self.partitions as u64,
                        p as u64,
                        "record {s} in partition {p}"
                    );
                    let o = r.offset();
                    if o == self.next[p] {
                        if let Some(last) = self.last_seq[p] {
                            assert!(s > last, "partition {p} offset {o}: record {s} after {last}");
                        }
                        self.last_seq[p] = Some(s);
                        self.next[p] += 1;
                        self.unique += 1;
                    } else if o < self.next[p] {
                        assert!(
                            o >= self.floor[p],
                            "partition {p}: offset {o} delivered again, but offsets up to {} were \
                             committed (next new offset {})",
                            self.floor[p],
                            self.next[p]
                        );
                        self.duplicates += 1;
                    } else {
                        panic!(
                            "partition {p}: offset {o} where {} was next (records lost)",
                            self.next[p]
                        );
                    }
                }
            }
            Err(e) => {
                report(&format!("poll error: {e} (kind {:?})", e.kind()));
                self.errors.push(e.to_string());
            }
        }
        self.unique - before
    }

    /// Polls until `total` distinct records arrived or `limit` passes (then panics).
    fn read_until(&mut self, c: &mut Consumer, total: u64, limit: Duration, what: &str) {
        let deadline = Instant::now() + limit;
        while self.unique < total {
            self.poll(c);
            assert!(
                Instant::now() < deadline,
                "{what}: {} of {total} records within {limit:?}, at {:?}; poll errors {:?}; \
                 metrics {:?}",
                self.unique,
                self.next,
                self.errors,
                c.metrics()
            );
        }
    }

    /// The whole topic was read: exactly `total` records, up to the end of every partition.
    fn check_complete(&mut self, c: &mut Consumer, total: u64) {
        for _ in 0..3 {
            self.poll(c);
        }
        assert_eq!(self.unique, total, "distinct records read vs written");
        let tps = all_partitions(&self.topic, self.partitions);
        let ends = c
            .end_offsets(&tps)
            .unwrap_or_else(|e| panic!("end offsets of {}: {e}", self.topic));
        for tp in &tps {
            assert_eq!(
                ends.get(tp).copied(),
                Some(self.next[tp.partition() as usize]),
                "{tp:?}: read up to the end"
            );
        }
    }
}

fn fetched_from(c: &mut Consumer, tp: &TopicPartition) -> Option<i32> {
    c.metrics()
        .partitions
        .iter()
        .find(|p| &p.partition == tp)
        .and_then(|p| p.fetched_from)
}

/// KIP-392: with `client.rack=b`, partitions led by nodes 1 and 3 are read from their
/// follower on node 2 (rack b); when node 2 stops they are read from their leaders, and
/// once it is back in sync from node 2 again; every record once and in order throughout.
#[test]
fn rack_b_consumer_reads_from_the_follower_on_node_2_falls_back_to_the_leader_and_returns() {
    let cluster = Cluster::from_env();
    let boot = cluster.bootstrap().to_owned();
    let topic = unique_topic("follower");
    const PARTS: i32 = 3;
    cluster.create_topic(&topic, PARTS, &[]);
    let described = cluster.describe(&topic);
    // Partitions not led by node 2 (node creation spreads the leaders; at least two).
    let chosen: Vec<TopicPartition> = described
        .iter()
        .filter(|p| p.leader.is_some() && p.leader != Some(2))
        .map(|p| TopicPartition::new(topic.as_str(), p.partition))
        .collect();
    assert!(!chosen.is_empty(), "every partition led by node 2: {described:?}");
    let leaders: HashMap<i32, i32> = described
        .iter()
        .filter_map(|p| Some((p.partition, p.leader?)))
        .collect();
    let mut written = 3_000;
    produce(&boot, &topic, PARTS, 0, written);

    let config = ConsumerConfig::new(&boot)
        .client_id("it-follower")
        .auto_offset_reset(OffsetReset::Earliest)
        .client_rack("b")
        .metadata_max_age(Duration::from_secs(5))
        .max_partition_fetch_bytes(16 * 1024)
        .default_api_timeout(Duration::from_secs(30));
    let mut c = new_consumer(config);
    c.assign(&chosen).expect("assign");
    let mut s = Stream::new(&topic, PARTS);
    // Only the chosen partitions are read: the stream's other partitions stay at 0.
    let expected = |s: &Stream| -> u64 {
        chosen
            .iter()
            .map(|tp| s.next[tp.partition() as usize] as u64)
            .sum()
    };
    let in_chosen = |n: u64| n * chosen.len() as u64 / PARTS as u64;
    let started = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    while expected(&s) < in_chosen(written) {
        s.poll(&mut c);
        assert!(Instant::now() < deadline, "first records: {:?}", s.next);
    }
    for tp in &chosen {
        assert_eq!(
            fetched_from(&mut c, tp),
            Some(2),
            "{tp:?} (leader {}) read from node 2, the follower in rack b",
            leaders[&tp.partition()]
        );
    }
    report(&format!(
        "read {} records of {chosen:?} from the follower on node 2 in {:?} (leaders {leaders:?})",
        s.unique,
        started.elapsed()
    ));

    // Writes 300 records at a time (100 per partition) and reads those of the chosen
    // partitions, until the records of every chosen partition came from the node `want`
    // names; returns how long that took.
    let fetch_round = |c: &mut Consumer,
                           s: &mut Stream,
                           written: &mut u64,
                           want: &dyn Fn(&TopicPartition) -> i32,
                           what: &str|
     -> Duration {
        let start = Instant::now();
        loop {
            produce(&boot, &topic, PARTS, *written, 300);
            *written += 300;
            let round = Instant::now();
            while expected(s) < in_chosen(*written) && round.elapsed() < Duration::from_secs(10) {
                s.poll(c);
            }
            let now: Vec<(i32, Option<i32>)> = chosen
                .iter()
                .map(|tp| (tp.partition(), fetched_from(c, tp)))
                .collect();
            if expected(s) == in_chosen(*written)
                && chosen
                    .iter()
                    .zip(&now)
                    .all(|(tp, (_, from))| *from == Some(want(tp)))
            {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{what}: after 60 s the partitions' records came from {now:?} (read {:?} of \
                 {}); metrics {:?}",
                s.next,
                in_chosen(*written),
                c.metrics()
            );
        }
    };

    cluster.stop_node(2);
    let stopped = Instant::now();
    let to_leader = fetch_round(
        &mut c,
        &mut s,
        &mut written,
        &|tp| leaders[&tp.partition()],
        "node 2 stopped",
    );
    report(&format!(
        "node 2 stopped: records from the leaders after {to_leader:?} ({:?} after the stop)",
        stopped.elapsed()
    ));

    // Node 2 comes back while the consumer keeps reading from the leaders.
    std::thread::scope(|sc| {
        let restart = sc.spawn(|| {
            cluster.restart(2);
            cluster.wait_isr(&topic)
        });
        while !restart.is_finished() {
            s.poll(&mut c);
        }
        restart
            .join()
            .unwrap_or_else(|_| panic!("restarting node 2 failed (see above)"));
    });
    let back = fetch_round(&mut c, &mut s, &mut written, &|_| 2, "node 2 back in sync");
    report(&format!(
        "node 2 back in sync: records from the follower on node 2 again after {back:?} \
         (metadata.max.age.ms 5000)"
    ));
    assert!(
        back < Duration::from_secs(20),
        "back on the follower only after {back:?}"
    );
    assert!(s.errors.is_empty(), "poll errors: {:?}", s.errors);
    assert_eq!(s.duplicates, 0);
    assert_eq!(expected(&s), in_chosen(written), "every record of {chosen:?} once");
    let ends = c.end_offsets(&chosen).expect("end offsets");
    for tp in &chosen {
        assert_eq!(ends[tp], s.next[tp.partition() as usize], "{tp:?} read to its end");
    }
    report(&format!(
        "every one of {} records of {chosen:?} once and in order",
        expected(&s)
    ));
}
