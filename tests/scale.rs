//! Scale: one consumer given 200,000 partitions of one topic, of which only partition 0
//! holds records, by a classic group's SyncGroup, by a KIP-848 ConsumerGroupHeartbeat, and
//! by `assign`; and 10,000 partitions by `assign` that all hold records. A fake cluster
//! (`tests/common/fake`) plays the broker and the group coordinator, with fetch sessions as
//! a broker keeps them (an incremental fetch is answered with the partitions that have
//! news only).
//!
//! Each case checks what a user would: the assignment is applied (the listener hears of
//! every partition, `assignment()` lists them), the partitions deliver their records, the
//! I/O thread goes idle afterwards, and `close` finishes within its timeout. No timing is
//! asserted beyond generous bounds that catch a quadratic blow-up or a fetch round that
//! walks the assignment; with `--nocapture` each case prints its figures (time to the
//! assignment, to the first record and to the first of every partition, idle I/O CPU,
//! close time, the heap the consumer held per partition (what closing it frees, counted by
//! this binary's allocator), RSS growth per partition).
//!
//! Run: `cargo test --release --test scale -- --nocapture --test-threads 1`.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::counting::{freed_by, Counting};
use common::fake::*;
use common::IoThread;
use kafka_consumer::testing::api::consumer_group_heartbeat::{
    Assignment, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, TopicPartitions,
};
use kafka_consumer::testing::api::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use kafka_consumer::testing::api::join_group::{JoinGroupRequest, JoinGroupResponse};
use kafka_consumer::testing::api::leave_group::{LeaveGroupRequest, LeaveGroupResponse};
use kafka_consumer::testing::api::metadata::{
    MetadataRequest, MetadataResponse, MetadataResponseBroker, MetadataResponsePartition,
    MetadataResponseTopic,
};
use kafka_consumer::testing::api::sync_group::{SyncGroupRequest, SyncGroupResponse};
use kafka_consumer::testing::consumer_protocol::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use kafka_consumer::testing::frame::encode_response;
use kafka_consumer::testing::message::{Bytes, Uuid};
use kafka_consumer::{
    Consumer, ConsumerConfig, GroupProtocol, OffsetReset, RebalanceListener, TopicPartition,
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Partitions of the topic, all given to the one consumer, in the large cases.
const PARTITIONS: i32 = 200_000;
/// Records in partition 0 (the others are empty, unless all hold records).
const RECORDS: i32 = 5;
const TOPIC: &str = "t";
const TOPIC_ID: Uuid = Uuid([7; 16]);

const JOIN_GROUP: i16 = 11;
const HEARTBEAT: i16 = 12;
const LEAVE_GROUP: i16 = 13;
const SYNC_GROUP: i16 = 14;
const CONSUMER_GROUP_HEARTBEAT: i16 = 68;

/// Generous bounds: a quadratic path at 200,000 partitions takes minutes.
const ASSIGNED_WITHIN: Duration = Duration::from_secs(60);
const FIRST_RECORD_WITHIN: Duration = Duration::from_secs(60);
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// The idle window, after the records arrived and the consumer settled.
const SETTLE: Duration = Duration::from_secs(1);
const WINDOW: Duration = Duration::from_secs(3);
/// The most CPU the idle I/O thread may use: a spin uses ~1.0. A fetch round (one per
/// `fetch.max.wait.ms` while nothing arrives) costs what changed, nothing when idle: 0.0 to
/// 0.3 % of a core at 200,000 partitions on the reference machine, against ~10 % when
/// each round walked the whole assignment (~25 % before the fetch session diff and the
/// in-flight marks were made cheap).
const IDLE: f64 = 0.05;

/// The fake cluster: one node that leads every partition of `t` (`partitions` of them)
/// and coordinates the group; partition 0 holds records, or every partition if `all_busy`.
fn cluster(partitions: i32, all_busy: bool) -> FakeCluster {
    let mut versions = MODERN.to_vec();
    versions.extend([
        (JOIN_GROUP, 0, 9),
        (SYNC_GROUP, 0, 5),
        (HEARTBEAT, 0, 4),
        (LEAVE_GROUP, 0, 5),
        (CONSUMER_GROUP_HEARTBEAT, 0, 1),
    ]);
    let opts = Options {
        versions,
        ..Options::default()
    };
    let sessions = FetchSessions::default();
    let mut log = Log::default();
    log.append(RECORDS);
    // Built once: encoding 200,000 partitions is the fake's cost, not the consumer's.
    let metadata: Mutex<Option<MetadataResponse>> = Mutex::new(None);
    let assignment = ConsumerProtocolAssignment {
        assigned_partitions: vec![AssignedTopic {
            topic: TOPIC.into(),
            partitions: (0..partitions).collect(),
        }],
        user_data: None,
    }
    .encode();
    FakeCluster::with(opts, move |r| match r.key {
        METADATA if r.metadata_topics().is_empty() && r.version >= 1 && !asks_all(r) => {
            // Brokers only, as a broker answers an empty topic list.
            let resp = MetadataResponse {
                topics: Vec::new(),
                ..metadata_response(r.ports[0], 0)
            };
            Reply::Send(encode_response::<MetadataRequest>(&resp, r.version, r.corr))
        }
        METADATA => {
            let mut m = metadata.lock().unwrap();
            let resp = m.get_or_insert_with(|| metadata_response(r.ports[0], partitions));
            Reply::Send(encode_response::<MetadataRequest>(resp, r.version, r.corr))
        }
        FIND_COORDINATOR => Reply::Send(find_coordinator(r, 0, 0, r.ports[0])),
        OFFSET_FETCH => Reply::Send(offset_fetch_nothing(r)),
        OFFSET_COMMIT => Reply::Send(offset_commit(r, 0)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, p, ts| {
            let end = if p == 0 || all_busy { log.end() } else { 0 };
            (0, if ts == -1 { end } else { 0 })
        })),
        FETCH => fetch_session_reply(r, &sessions, |w| {
            if w.partition == 0 || all_busy {
                log.answer(w)
            } else {
                FetchPart::empty(0)
            }
        }),
        JOIN_GROUP => {
            let req: JoinGroupRequest = r.decode();
            // Ours follows: the leader ("other") assigned, SyncGroup hands it out.
            let resp = JoinGroupResponse {
                generation_id: 1,
                protocol_type: Some("consumer".into()),
                protocol_name: req.protocols.first().map(|p| p.name.clone()),
                leader: "other".into(),
                member_id: "ours".into(),
                ..Default::default()
            };
            Reply::Send(encode_response::<JoinGroupRequest>(
                &resp, r.version, r.corr,
            ))
        }
        SYNC_GROUP => {
            let req: SyncGroupRequest = r.decode();
            let resp = SyncGroupResponse {
                protocol_type: req.protocol_type,
                protocol_name: req.protocol_name,
                assignment: Bytes(assignment.clone()),
                ..Default::default()
            };
            Reply::Send(encode_response::<SyncGroupRequest>(
                &resp, r.version, r.corr,
            ))
        }
        HEARTBEAT => Reply::Send(encode_response::<HeartbeatRequest>(
            &HeartbeatResponse::default(),
            r.version,
            r.corr,
        )),
        LEAVE_GROUP => Reply::Send(encode_response::<LeaveGroupRequest>(
            &LeaveGroupResponse::default(),
            r.version,
            r.corr,
        )),
        CONSUMER_GROUP_HEARTBEAT => {
            let req: ConsumerGroupHeartbeatRequest = r.decode();
            let member_id = if req.member_id.is_empty() {
                "ours".to_string()
            } else {
                req.member_id.clone()
            };
            let (epoch, assignment) = match req.member_epoch {
                // Joining: every partition at once.
                0 => (
                    1,
                    Some(Assignment {
                        topic_partitions: vec![TopicPartitions {
                            topic_id: TOPIC_ID,
                            partitions: (0..partitions).collect(),
                        }],
                    }),
                ),
                e if e < 0 => (e, None),
                e => (e, None),
            };
            let resp = ConsumerGroupHeartbeatResponse {
                member_id: Some(member_id),
                member_epoch: epoch,
                heartbeat_interval_ms: 3_000,
                assignment,
                ..Default::default()
            };
            Reply::Send(encode_response::<ConsumerGroupHeartbeatRequest>(
                &resp, r.version, r.corr,
            ))
        }
        _ => Reply::Close,
    })
}

/// Whether a Metadata request asks for every topic (a null list).
fn asks_all(r: &Request) -> bool {
    r.decode::<MetadataRequest>().topics.is_none()
}

fn metadata_response(port: u16, partitions: i32) -> MetadataResponse {
    MetadataResponse {
        brokers: vec![MetadataResponseBroker {
            node_id: 0,
            host: "127.0.0.1".into(),
            port: port as i32,
            rack: None,
        }],
        controller_id: 0,
        topics: vec![MetadataResponseTopic {
            name: Some(TOPIC.into()),
            topic_id: TOPIC_ID,
            partitions: (0..partitions)
                .map(|p| MetadataResponsePartition {
                    partition_index: p,
                    leader_id: 0,
                    leader_epoch: 0,
                    replica_nodes: vec![0],
                    isr_nodes: vec![0],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn config(fake: &FakeCluster) -> ConsumerConfig {
    ConsumerConfig::new(&fake.addr(0))
        .client_id("scale-test")
        .auto_offset_reset(OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(60))
        .request_timeout(Duration::from_secs(30))
}

/// Counts the partitions the listener was told of, and when it first heard of all
/// (`expect` of them).
#[derive(Clone, Default)]
struct Heard {
    expect: usize,
    assigned: Arc<AtomicUsize>,
    revoked_or_lost: Arc<AtomicUsize>,
    all_at: Arc<Mutex<Option<Instant>>>,
}

impl RebalanceListener for Heard {
    fn on_partitions_revoked(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        self.revoked_or_lost
            .fetch_add(partitions.len(), Ordering::SeqCst);
    }
    fn on_partitions_assigned(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        let n = self.assigned.fetch_add(partitions.len(), Ordering::SeqCst) + partitions.len();
        if n >= self.expect {
            self.all_at.lock().unwrap().get_or_insert_with(Instant::now);
        }
    }
    fn on_partitions_lost(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        self.revoked_or_lost
            .fetch_add(partitions.len(), Ordering::SeqCst);
    }
}

/// Resident memory of this process (kB, Linux `/proc`).
fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// How a case gives the consumer its partitions.
#[derive(Debug, Clone, Copy)]
enum Via {
    Assign,
    Classic,
    Kip848,
}

/// Figures of one case.
#[derive(Debug)]
struct Figures {
    assigned: Duration,
    first_record: Duration,
    /// Until every partition that holds records delivered its first.
    every_first: Duration,
    idle_cpu: f64,
    close: Duration,
    rss_bytes_per_partition: f64,
    /// The heap closing and dropping the consumer freed (what it held, both threads).
    heap_bytes_per_partition: f64,
}

/// One consumer given `partitions` partitions `via` one way; partition 0 holds records, or
/// every partition if `all_busy`.
fn run(via: Via, partitions: i32, all_busy: bool) -> Figures {
    let fake = cluster(partitions, all_busy);
    let cfg = config(&fake);
    let cfg = match via {
        Via::Assign => cfg,
        Via::Classic => cfg
            .group_id("scale")
            .partition_assignment_strategy(&["range"]),
        Via::Kip848 => cfg
            .group_id("scale")
            .group_protocol(GroupProtocol::Consumer),
    };
    let rss_before = rss_kb();
    let (mut c, io) = IoThread::of(cfg);
    let heard = Heard {
        expect: partitions as usize,
        ..Heard::default()
    };
    let start = Instant::now();
    match via {
        Via::Assign => {
            let all: Vec<TopicPartition> = (0..partitions)
                .map(|p| TopicPartition::new(TOPIC, p))
                .collect();
            c.assign(&all).expect("assign");
        }
        Via::Classic | Via::Kip848 => c
            .subscribe_with_listener(&[TOPIC], heard.clone())
            .expect("subscribe"),
    }

    // Poll until the records are all in.
    let busy = if all_busy { partitions as usize } else { 1 };
    let mut offsets: HashMap<i32, Vec<i64>> = HashMap::new();
    let mut received = 0;
    let mut first_record = None;
    let mut every_first = None;
    let mut assigned = match via {
        Via::Assign => Some(start.elapsed()),
        _ => None,
    };
    while received < busy * RECORDS as usize {
        assert!(
            start.elapsed() < FIRST_RECORD_WITHIN,
            "{via:?}: {received} of {} records within {FIRST_RECORD_WITHIN:?}, from {} partitions (listener heard of {} partitions)",
            busy * RECORDS as usize,
            offsets.len(),
            heard.assigned.load(Ordering::SeqCst)
        );
        let recs = c.poll(Duration::from_millis(100)).expect("poll");
        if assigned.is_none() {
            if let Some(at) = *heard.all_at.lock().unwrap() {
                assigned = Some(at - start);
            } else {
                assert!(
                    start.elapsed() < ASSIGNED_WITHIN,
                    "{via:?}: no assignment within {ASSIGNED_WITHIN:?}"
                );
            }
        }
        for r in recs.iter() {
            assert!(all_busy || r.partition() == 0, "only t-0 holds records");
            first_record.get_or_insert_with(|| start.elapsed());
            offsets.entry(r.partition()).or_default().push(r.offset());
            received += 1;
        }
        if offsets.len() == busy {
            every_first.get_or_insert_with(|| start.elapsed());
        }
    }
    assert_eq!(offsets.len(), busy);
    for (p, got) in &offsets {
        assert_eq!(got, &(0..RECORDS as i64).collect::<Vec<_>>(), "t-{p}");
    }
    let assigned = assigned.expect("the assignment was applied before records came");
    let first_record = first_record.expect("records");
    let every_first = every_first.expect("records");

    // The assignment as the user sees it.
    let owned = c.assignment();
    assert_eq!(owned.len(), partitions as usize, "{via:?}: assignment()");
    if !matches!(via, Via::Assign) {
        assert_eq!(
            heard.assigned.load(Ordering::SeqCst),
            partitions as usize,
            "{via:?}: the listener heard of every partition once"
        );
        assert_eq!(heard.revoked_or_lost.load(Ordering::SeqCst), 0);
    }
    let rss_after = rss_kb();
    drop(owned);
    drop(offsets);

    // Idle: nothing new anywhere, the consumer not polled.
    std::thread::sleep(SETTLE);
    let idle_cpu = io.busy_fraction_over(WINDOW);
    // A poll in between (the group's poll interval) leaves it idle too.
    let recs = c.poll(Duration::from_millis(100)).expect("poll");
    assert!(recs.is_empty(), "nothing new");

    let closing = Instant::now();
    let mut closed = None;
    let held = freed_by(|| {
        closed = Some(c.close_timeout(CLOSE_TIMEOUT));
    });
    closed.expect("closed").expect("close");
    let close = closing.elapsed();

    // The fake keeps every request it got (the full fetch lists every partition): that is
    // not the consumer's memory.
    let requests = fake.requests();
    let fake_log: usize = requests.iter().map(|r| r.body.len()).sum();
    if std::env::var_os("SCALE_TRACE").is_some() {
        for r in &requests {
            eprintln!(
                "{:>8.3?} node {} conn {} key {} v{} {} bytes",
                r.at.saturating_duration_since(start),
                r.node,
                r.conn,
                r.key,
                r.version,
                r.body.len()
            );
        }
    }
    let grown = (rss_after.saturating_sub(rss_before) * 1024).saturating_sub(fake_log as u64);
    let f = Figures {
        assigned,
        first_record,
        every_first,
        idle_cpu,
        close,
        rss_bytes_per_partition: grown as f64 / partitions as f64,
        heap_bytes_per_partition: held as f64 / partitions as f64,
    };
    let holding = if all_busy { "all" } else { "one" };
    println!(
        "scale {via:?} {partitions} partitions ({holding} holding records): assignment applied after {:.0?}, first record after {:.2?}, first of every partition after {:.2?}, idle I/O CPU {:.1} % of a core, close {:.0?}, heap held {:.0} B/partition (freed by close), RSS growth {:.0} B/partition (with peaks; fake's request log of {} MB subtracted)",
        f.assigned,
        f.first_record,
        f.every_first,
        f.idle_cpu * 100.0,
        f.close,
        f.heap_bytes_per_partition,
        f.rss_bytes_per_partition,
        fake_log / 1_000_000
    );
    assert!(
        f.idle_cpu < IDLE,
        "{via:?}: the idle I/O thread used {:.1} % of a core",
        f.idle_cpu * 100.0
    );
    assert!(
        close < CLOSE_TIMEOUT,
        "{via:?}: close took {close:?}, more than its timeout"
    );
    assert!(!io.is_running(), "{via:?}: the I/O thread stopped on close");
    f
}

#[test]
fn a_classic_sync_group_assigning_200_000_partitions_delivers_and_goes_idle() {
    run(Via::Classic, PARTITIONS, false);
}

#[test]
fn a_kip_848_heartbeat_assigning_200_000_partitions_delivers_and_goes_idle() {
    run(Via::Kip848, PARTITIONS, false);
}

#[test]
fn assigning_200_000_partitions_directly_delivers_and_goes_idle() {
    run(Via::Assign, PARTITIONS, false);
}

/// The target of a consumer with 10,000 partitions: every partition's first record comes
/// soon (within 2 s on the reference machine; not asserted beyond the generous bound) and
/// the idle I/O thread stays under 2 % of a core (asserted under [`IDLE`]).
#[test]
fn assigning_10_000_partitions_that_all_hold_records_delivers_them_all_and_goes_idle() {
    run(Via::Assign, 10_000, true);
}
