//! Failover on the local 3-node cluster (`scripts/cluster.sh`, see `tests/common/cluster.rs`):
//! a partition leader dies under the consumer, comes back, and takes its leaderships back;
//! the consumer reads every record exactly once and in order and delivers again within a
//! bounded time after each change.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, PartitionState};
use common::*;
use kafka_consumer::{Consumer, ConsumerConfig, OffsetReset, TopicPartition};

const PARTITIONS: i32 = 6;
/// Written before the consumer starts.
const BACKLOG: u64 = 60_000;
/// Written by the background producer per run of the Java producer, while the leader dies
/// and comes back.
const CHUNK: u64 = 3_000;
/// Written, while the consumer is not polled, just before the leaderships move back.
const BURST: u64 = 30_000;
/// How long the consumer may take to deliver again after a leader change before the test
/// fails (the broker fences a dead node 4 s after its last heartbeat).
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);

/// Prints past the test harness's output capture, so the numbers show in CI logs.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "cluster test: {line}");
}

/// Our consumer, with the checks: per partition, offsets without gap or duplicate from 0,
/// the producer's sequence numbers in order; every record once.
struct Reader {
    consumer: Consumer,
    topic: String,
    /// Per partition, the offset of the next record.
    next: Vec<i64>,
    last_seq: Vec<Option<u64>>,
    total: u64,
    /// Errors `poll` returned, with when.
    errors: Vec<(Instant, String)>,
}

impl Reader {
    fn new(bootstrap: &str, topic: &str) -> Reader {
        // Small fetches and a small prefetch buffer: the consumer cannot fetch far ahead
        // of the test, so after a leader change it needs the new leader soon.
        let config = ConsumerConfig::new(bootstrap)
            .client_id("it-cluster")
            .auto_offset_reset(OffsetReset::Earliest)
            .max_poll_records(200)
            .max_partition_fetch_bytes(32 * 1024)
            .fetch_buffer_bytes(256 * 1024)
            .default_api_timeout(Duration::from_secs(30));
        let mut consumer = new_consumer(config);
        consumer
            .assign(&all_partitions(topic, PARTITIONS))
            .unwrap_or_else(|e| panic!("assigning {topic}: {e}"));
        Reader {
            consumer,
            topic: topic.to_owned(),
            next: vec![0; PARTITIONS as usize],
            last_seq: vec![None; PARTITIONS as usize],
            total: 0,
            errors: Vec::new(),
        }
    }

    /// One poll (100 ms at most), then a 10 ms pause (the consumer reads at most ~15,000
    /// records a second: the backlog lasts through the first failover). Checks every record.
    fn poll(&mut self) {
        match self.consumer.poll(Duration::from_millis(100)) {
            Ok(records) => {
                for r in &records {
                    let p = r.partition() as usize;
                    assert_eq!(r.topic(), self.topic);
                    assert_eq!(
                        r.offset(),
                        self.next[p],
                        "partition {p}: offset {} where {} was next (a gap or a duplicate)",
                        r.offset(),
                        self.next[p]
                    );
                    self.next[p] += 1;
                    let s = seq(&r);
                    assert_eq!(
                        s % PARTITIONS as u64,
                        p as u64,
                        "record {s} in partition {p}"
                    );
                    if let Some(last) = self.last_seq[p] {
                        assert!(
                            s > last,
                            "partition {p} offset {}: record {s} after record {last}",
                            r.offset()
                        );
                    }
                    self.last_seq[p] = Some(s);
                    self.total += 1;
                }
            }
            Err(e) => {
                report(&format!("poll error: {e} (kind {:?})", e.kind()));
                self.errors.push((Instant::now(), e.to_string()));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    /// Per partition, the end of what the consumer has fetched so far (its position plus
    /// the records it holds): a record at or past it comes from a fetch made after now.
    fn fetched_end(&mut self) -> Vec<i64> {
        let m = self.consumer.partition_metrics();
        let mut end = self.next.clone();
        for pm in &m {
            let p = pm.partition.partition() as usize;
            end[p] = pm.position.unwrap_or(self.next[p]) + pm.buffered_records as i64;
        }
        end
    }

    /// Polls until every partition of `moved` delivered a record at or past `from` (as
    /// [`Reader::fetched_end`] gave it right after a leader change at `since`), or the
    /// limit passes; returns the delay per partition.
    fn recovery(
        &mut self,
        cluster: &Cluster,
        what: &str,
        since: Instant,
        moved: &[i32],
        from: &[i64],
    ) -> BTreeMap<i32, Duration> {
        let mut delays = BTreeMap::new();
        while delays.len() < moved.len() {
            self.poll();
            for &p in moved {
                if self.next[p as usize] > from[p as usize] && !delays.contains_key(&p) {
                    delays.insert(p, since.elapsed());
                }
            }
            if since.elapsed() > RECOVERY_LIMIT {
                let stuck: Vec<i32> = moved
                    .iter()
                    .copied()
                    .filter(|p| !delays.contains_key(p))
                    .collect();
                panic!(
                    "{what}: partitions {stuck:?} delivered nothing new within {RECOVERY_LIMIT:?} \
                     (fetched up to {from:?} at the change, now at {:?}; recovered: {delays:?}; \
                     poll errors: {:?})\nthe cluster sees:\n{}\nconsumer metrics: {:?}",
                    self.next,
                    self.errors,
                    describe_lines(&cluster.describe(&self.topic)),
                    self.consumer.partition_metrics()
                );
            }
        }
        delays
    }
}

fn describe_lines(parts: &[PartitionState]) -> String {
    parts
        .iter()
        .map(|p| {
            format!(
                "  partition {} leader {:?} epoch {} replicas {:?} isr {:?}",
                p.partition, p.leader, p.leader_epoch, p.replicas, p.isr
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes chunks of `CHUNK` records from sequence number `BACKLOG` on, one Java producer
/// (acks=all, idempotent) after another, until `stop` is set; returns how many it wrote.
fn background_producer(
    bootstrap: String,
    topic: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut written = 0;
        while !stop.load(Ordering::SeqCst) {
            let mut p = Produce::new(&topic, PARTITIONS, CHUNK);
            p.bootstrap = Some(&bootstrap);
            p.start = BACKLOG + written;
            p.run();
            written += CHUNK;
        }
        written
    })
}

#[test]
fn assigned_consumer_reads_everything_once_while_a_leader_is_killed_restarted_and_reelected() {
    let cluster = Cluster::from_env();
    let topic = unique_topic("failover");
    cluster.create_topic(&topic, PARTITIONS, &[]);
    let mut p = Produce::new(&topic, PARTITIONS, BACKLOG);
    p.bootstrap = Some(cluster.bootstrap());
    p.run();

    let mut reader = Reader::new(cluster.bootstrap(), &topic);
    let deadline = Instant::now() + Duration::from_secs(60);
    while reader.total < 10_000 {
        reader.poll();
        assert!(
            Instant::now() < deadline,
            "only {} of the first 10,000 records within 60 s",
            reader.total
        );
    }

    // Records keep coming in while the leader dies and comes back.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = background_producer(
        cluster.bootstrap().to_owned(),
        topic.clone(),
        Arc::clone(&stop),
    );

    // Kill the leader of partition 0 (and so of the other partitions it leads).
    let before = cluster.describe(&topic);
    let victim = before[0]
        .leader
        .unwrap_or_else(|| panic!("partition 0 has no leader:\n{}", describe_lines(&before)));
    let moved: Vec<i32> = before
        .iter()
        .filter(|p| p.leader == Some(victim))
        .map(|p| p.partition)
        .collect();
    let controller = cluster.quorum_leader();
    report(&format!(
        "killing node {victim}, leader of partitions {moved:?} (active controller: node {controller}); \
         consumer at {:?}\n{}",
        reader.next,
        describe_lines(&before)
    ));
    cluster.kill(victim as u8);
    let killed = Instant::now();
    // What the node sent before it died may still sit in our socket buffers: let the I/O
    // thread take it in before noting what the consumer fetched from the dead leader. (A
    // new leader takes seconds: the node is fenced 4 s after its last heartbeat.)
    std::thread::sleep(Duration::from_millis(300));
    let fetched = reader.fetched_end();
    let delays = reader.recovery(&cluster, "after the kill", killed, &moved, &fetched);
    let after = cluster.describe(&topic);
    report(&format!(
        "after killing node {victim}: delivering again after {delays:?} (worst {:?})\n{}",
        delays.values().max(),
        describe_lines(&after)
    ));
    for &p in &moved {
        let (b, a) = (&before[p as usize], &after[p as usize]);
        assert_ne!(
            a.leader,
            Some(victim),
            "partition {p} still led by {victim}"
        );
        assert!(
            a.leader_epoch > b.leader_epoch,
            "partition {p}: leader epoch {} after the failover, {} before",
            a.leader_epoch,
            b.leader_epoch
        );
    }

    // Restart the node while the consumer keeps reading; wait until it is in sync again.
    std::thread::scope(|s| {
        let restart = s.spawn(|| {
            cluster.restart(victim as u8);
            cluster.wait_isr(&topic)
        });
        while !restart.is_finished() {
            reader.poll();
        }
        let synced = restart
            .join()
            .unwrap_or_else(|_| panic!("restarting node {victim} failed (see above)"));
        report(&format!(
            "node {victim} back and in sync, consumer at {:?}\n{}",
            reader.next,
            describe_lines(&synced)
        ));
    });

    // The background producer finishes its chunk (the consumer keeps reading meanwhile).
    stop.store(true, Ordering::SeqCst);
    while !producer.is_finished() {
        reader.poll();
    }
    let live = producer
        .join()
        .unwrap_or_else(|_| panic!("the background producer failed (see above)"));
    report(&format!(
        "{live} records written while node {victim} was killed and restarted"
    ));

    // Give node `victim` its leaderships back (a clean leader change) with records waiting
    // on the brokers: written while the consumer is not polled, more than its prefetch
    // buffer holds, so what it reads after the change it must fetch from the new leaders.
    let mut p = Produce::new(&topic, PARTITIONS, BURST);
    p.bootstrap = Some(cluster.bootstrap());
    p.start = BACKLOG + live;
    p.run();
    let elected = cluster.elect_preferred(&topic);
    let changed = Instant::now();
    let fetched = reader.fetched_end();
    for &p in &moved {
        assert_eq!(elected[p as usize].leader, Some(victim), "partition {p}");
    }
    let delays = reader.recovery(
        &cluster,
        "after the preferred leader election",
        changed,
        &moved,
        &fetched,
    );
    report(&format!(
        "after moving the leaderships back to node {victim}: delivering again after {delays:?} \
         (worst {:?})\n{}",
        delays.values().max(),
        describe_lines(&elected)
    ));

    let written = BACKLOG + live + BURST;
    let deadline = Instant::now() + Duration::from_secs(60);
    while reader.total < written {
        reader.poll();
        assert!(
            Instant::now() < deadline,
            "read {} of {written} records; at {:?}",
            reader.total,
            reader.next
        );
    }
    for _ in 0..5 {
        reader.poll();
    }
    assert_eq!(reader.total, written, "records read vs written");
    let tps: Vec<TopicPartition> = all_partitions(&topic, PARTITIONS);
    let ends = reader
        .consumer
        .end_offsets(&tps)
        .unwrap_or_else(|e| panic!("end offsets of {topic}: {e}"));
    for tp in &tps {
        assert_eq!(
            ends.get(tp).copied(),
            Some(reader.next[tp.partition() as usize]),
            "{tp:?}: read up to the end"
        );
    }
    assert!(
        reader.errors.is_empty(),
        "poll returned errors during the failovers: {:?}",
        reader.errors
    );
    report(&format!(
        "read all {written} records exactly once and in order"
    ));
}
