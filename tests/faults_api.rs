//! API defects and name resolution, provoked with a fake cluster on 127.0.0.1
//! (`tests/common/fake`): several fake nodes, newer API versions (Metadata v13,
//! Fetch v12), every request recorded with the instant it arrived.
//!
//! Each test names, in a comment, the defect the code before the refactor (commit
//! `68251e0`) had, when it had one.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fake::*;
use kafka_consumer::testing::api::offset_commit::OffsetCommitRequest;
use kafka_consumer::testing::records::testing::{
    control_batch, encode_batch, encode_raw_record, encode_records, BatchSpec, RecordSpec,
};
use kafka_consumer::testing::wire::Writer;
use kafka_consumer::{
    Consumer, ConsumerConfig, Error, ErrorKind, IsolationLevel, OffsetReset, TopicPartition,
};

const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const NOT_COORDINATOR: i16 = 16;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBOOTSTRAP_REQUIRED: i16 = 129;

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

/// A configuration for a fake: quick retries, short fetch waits, `auto.offset.reset=earliest`.
fn config(bootstrap: &str) -> ConsumerConfig {
    common::init_log();
    ConsumerConfig::new(bootstrap)
        .auto_offset_reset(OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(10))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
        .retry_backoff(Duration::from_millis(50))
        .fetch_max_wait(Duration::from_millis(100))
}

/// Polls until `n` records arrived (panics on an error or after `limit`); returns
/// `(partition, offset, value)` in delivery order.
fn poll_records(c: &mut Consumer, n: usize, limit: Duration) -> Vec<(i32, i64, Vec<u8>)> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    while got.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} records within {limit:?}: {:?}",
            got.len(),
            got.iter()
                .map(|g: &(i32, i64, Vec<u8>)| (g.0, g.1))
                .collect::<Vec<_>>()
        );
        let recs = c.poll(Duration::from_millis(100)).expect("poll");
        got.extend(recs.iter().map(|r| {
            (
                r.partition(),
                r.offset(),
                r.value().unwrap_or_default().to_vec(),
            )
        }));
    }
    got
}

/// Polls until `poll` returns an error, collecting the offsets delivered before it.
fn poll_error(c: &mut Consumer, limit: Duration) -> (Vec<i64>, Error) {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    loop {
        assert!(
            Instant::now() < deadline,
            "no error within {limit:?}; records {got:?}"
        );
        match c.poll(Duration::from_millis(100)) {
            Ok(recs) => got.extend(recs.iter().map(|r| r.offset())),
            Err(e) => return (got, e),
        }
    }
}

fn offsets(recs: &[(i32, i64, Vec<u8>)]) -> Vec<i64> {
    recs.iter().map(|r| r.1).collect()
}

// ----- 1. name resolution off the I/O thread ---------------------------------------------

// Defect at 68251e0: names were resolved on the I/O thread, so a hung lookup held close().
#[test]
fn close_returns_at_once_while_the_bootstrap_name_is_still_resolving() {
    let mut c = Consumer::new(
        config("x.hang.invalid:9092").default_api_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    // The I/O thread looked the name up for its first metadata refresh; this call only
    // returns once the thread has run past that.
    let e = c.partitions_for("t").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    let t0 = Instant::now();
    c.close().expect("close");
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "close() took {took:?} behind a hung name lookup"
    );
}

// Defect at 68251e0: bootstrap servers tried one at a time, resolved on the I/O thread.
#[test]
fn a_hung_bootstrap_name_does_not_delay_the_healthy_second_server() {
    let fake = FakeCluster::start(1, |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        _ => Reply::Close,
    });
    let mut c = Consumer::new(config(&format!("x.hang.invalid:9092,{}", fake.addr(0)))).unwrap();
    let t0 = Instant::now();
    let parts = c.partitions_for("t").expect("partitions_for");
    let took = t0.elapsed();
    assert_eq!(parts, vec![tp(0)]);
    assert!(
        took < Duration::from_secs(3),
        "partitions_for took {took:?}: the healthy server waited for the hung lookup"
    );
}

// Defect at 68251e0: a broker's name was resolved on the I/O thread, stalling every partition.
#[test]
fn a_broker_whose_name_hangs_holds_up_only_its_own_partitions() {
    let fake = FakeCluster::start(1, |r| match r.key {
        METADATA => {
            let brokers = [broker(0, r.ports[0]), (1, "b1.hang.invalid", r.ports[0])];
            Reply::Send(metadata(r, &brokers, &[part("t", 0, 0), part("t", 1, 1)]))
        }
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => fetch_reply(r, |w| match (w.partition, w.offset) {
            (0, 0) => FetchPart::records(3, batch(0, 3)),
            _ => FetchPart::empty(3),
        }),
        _ => Reply::Close,
    });
    let mut c = Consumer::new(config(&fake.addr(0))).unwrap();
    let t0 = Instant::now();
    c.assign(&[tp(0), tp(1)]).unwrap();
    let got = poll_records(&mut c, 3, Duration::from_secs(10));
    let took = t0.elapsed();
    assert_eq!(
        got.iter().map(|g| (g.0, g.1)).collect::<Vec<_>>(),
        vec![(0, 0), (0, 1), (0, 2)]
    );
    assert!(
        took < Duration::from_secs(3),
        "t-0's records took {took:?}: they waited for node 1's name"
    );
}

// Defect at 68251e0: only the first address a name resolved to was tried.
#[test]
fn a_name_with_several_addresses_connects_to_the_next_when_the_first_refuses() {
    let fake = FakeCluster::start(1, |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        _ => Reply::Close,
    });
    // multi.invalid resolves to 127.0.0.2 (nothing listens there) and then 127.0.0.1.
    let mut c = Consumer::new(
        config(&format!("multi.invalid:{}", fake.port(0)))
            .default_api_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    assert_eq!(c.partitions_for("t").expect("partitions_for"), vec![tp(0)]);
}

// Defect at 68251e0 and at the start of this branch: an answer read with the close was dropped.
#[test]
fn an_answer_followed_at_once_by_the_broker_closing_the_connection_is_not_lost() {
    let fake = FakeCluster::start(1, |r| match r.key {
        METADATA => Reply::SendAndClose(simple_metadata(r, 1)),
        _ => Reply::Close,
    });
    let mut c =
        Consumer::new(config(&fake.addr(0)).default_api_timeout(Duration::from_secs(5))).unwrap();
    assert_eq!(c.partitions_for("t").expect("partitions_for"), vec![tp(0)]);
    assert_eq!(c.partitions_for("t").expect("partitions_for"), vec![tp(0)]);
}

// ----- 2. wakeup ---------------------------------------------------------------------------

// Defect at 68251e0: wakeup() did not interrupt these calls and was left for the next poll.
#[test]
fn wakeup_interrupts_blocked_metadata_and_offset_calls_and_leaves_no_stale_wakeup() {
    type Call = fn(&mut Consumer) -> kafka_consumer::Result<()>;
    let calls: [(&str, i16, Call); 3] = [
        ("partitions_for", METADATA, |c| {
            c.partitions_for("t").map(drop)
        }),
        ("end_offsets", LIST_OFFSETS, |c| {
            c.end_offsets(&[tp(0)]).map(drop)
        }),
        ("offsets_for_times", LIST_OFFSETS, |c| {
            c.offsets_for_times(&HashMap::from([(tp(0), 1_000)]))
                .map(drop)
        }),
    ];
    for (name, never_answered, call) in calls {
        // Metadata naming `t` (or any ListOffsets) is never answered.
        let fake = Arc::new(FakeCluster::start(1, move |r| match r.key {
            METADATA if never_answered == METADATA && !r.metadata_topics().is_empty() => {
                Reply::Hang
            }
            METADATA => Reply::Send(simple_metadata(r, 1)),
            LIST_OFFSETS => Reply::Hang,
            _ => Reply::Close,
        }));
        let mut c =
            Consumer::new(config(&fake.addr(0)).default_api_timeout(Duration::from_secs(20)))
                .unwrap();
        let wakeup = c.wakeup_handle();
        let watcher = Arc::clone(&fake);
        let waker = std::thread::spawn(move || {
            // The call is blocked once its request reached the fake.
            let blocked = watcher.wait_until(Duration::from_secs(10), |reqs| {
                reqs.iter().any(|r| {
                    r.key == never_answered
                        && (r.key != METADATA || !r.metadata_topics().is_empty())
                })
            });
            let at = Instant::now();
            wakeup.wakeup();
            (blocked, at)
        });
        let result = call(&mut c);
        let returned = Instant::now();
        let (blocked, woken) = waker.join().unwrap();
        assert!(blocked, "{name}: its request never reached the fake");
        let e = result.expect_err(name);
        assert_eq!(e.kind(), ErrorKind::Wakeup, "{name}: {e}");
        let took = returned.saturating_duration_since(woken);
        assert!(
            took < Duration::from_secs(1),
            "{name} returned {took:?} after wakeup()"
        );
        let next = c.poll(Duration::from_millis(200));
        assert!(
            next.is_ok(),
            "{name}: the next poll failed: {:?}",
            next.err()
        );
    }
}

// ----- 3. aborted transactions under read_uncommitted ---------------------------------------

// Defect at 68251e0: the aborted-transactions list filtered records under read_uncommitted too.
#[test]
fn read_uncommitted_delivers_records_the_fetch_lists_as_aborted() {
    const PRODUCER: i64 = 7;
    let fake = FakeCluster::start(1, |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => fetch_reply(r, |w| {
            if w.offset != 0 {
                return FetchPart::empty(4);
            }
            // A transaction of three records (0-2), then its ABORT marker (3).
            let values = [b"a0", b"a1", b"a2"];
            let recs: Vec<RecordSpec<'_>> = values
                .iter()
                .enumerate()
                .map(|(i, v)| (i as i32, 0, None, Some(&v[..]), &[][..]))
                .collect();
            let mut set = encode_batch(&BatchSpec {
                base_offset: 0,
                attributes: 0x10, // transactional
                producer_id: PRODUCER,
                producer_epoch: 0,
                records: &recs,
                ..BatchSpec::default()
            });
            set.extend(control_batch(3, PRODUCER, 0));
            FetchPart {
                aborted: Some(vec![(PRODUCER, 0)]),
                ..FetchPart::records(4, set)
            }
        }),
        _ => Reply::Close,
    });

    let mut c = Consumer::new(config(&fake.addr(0))).unwrap();
    c.assign(&[tp(0)]).unwrap();
    let got = poll_records(&mut c, 3, Duration::from_secs(10));
    assert_eq!(offsets(&got), vec![0, 1, 2]);
    assert_eq!(got[0].2, b"a0");

    // The same answer under read_committed: the aborted records are dropped, the position
    // moves past the marker.
    let mut rc =
        Consumer::new(config(&fake.addr(0)).isolation_level(IsolationLevel::ReadCommitted))
            .unwrap();
    rc.assign(&[tp(0)]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let recs = rc.poll(Duration::from_millis(100)).expect("poll");
        assert!(recs.is_empty(), "read_committed delivered aborted records");
        if rc.partition_metrics()[0].position == Some(4) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "read_committed never moved past the marker"
        );
    }
}

// ----- 4. offsets that contradict their batch ------------------------------------------------

/// A partition holding a good batch (0-2), `bad` (3-5) and a good batch (6-8); a fetch
/// gets every batch from the one holding its offset.
fn serve_with_bad_batch(bad: Vec<u8>) -> FakeCluster {
    FakeCluster::start(1, move |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => fetch_reply(r, |w| {
            let mut set = Vec::new();
            if w.offset < 3 {
                set.extend(batch(0, 3));
            }
            if w.offset < 6 {
                set.extend(&bad);
            }
            if w.offset < 9 {
                set.extend(batch(6, 3));
            }
            FetchPart::records(9, set)
        }),
        _ => Reply::Close,
    })
}

/// A batch at 3 of three records with these offset deltas and `lastOffsetDelta`.
fn batch_with_deltas(deltas: [i32; 3], last_offset_delta: i32) -> Vec<u8> {
    let recs: Vec<RecordSpec<'_>> = deltas
        .iter()
        .map(|&d| (d, 0, None, Some(&b"bad"[..]), &[][..]))
        .collect();
    encode_batch(&BatchSpec {
        base_offset: 3,
        last_offset_delta: Some(last_offset_delta),
        records: &recs,
        ..BatchSpec::default()
    })
}

// Defect at 68251e0: record offsets were not checked; such records were delivered as they were.
#[test]
fn records_whose_offsets_contradict_their_batch_are_an_error_naming_partition_and_offset() {
    // (what, the bad batch, the offending record's offset)
    let cases = [
        (
            "offsets going backwards",
            batch_with_deltas([0, 2, 1], 2),
            4,
        ),
        (
            "an offset past lastOffsetDelta",
            batch_with_deltas([0, 1, 2], 1),
            5,
        ),
    ];
    for (what, bad, record) in cases {
        let fake = serve_with_bad_batch(bad);
        let mut c = Consumer::new(config(&fake.addr(0))).unwrap();
        c.assign(&[tp(0)]).unwrap();
        let (got, e) = poll_error(&mut c, Duration::from_secs(10));
        assert_eq!(
            got,
            vec![0, 1, 2],
            "{what}: the batch before it is delivered, nothing else"
        );
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{what}: {e}");
        assert_eq!(e.partition(), Some(&tp(0)), "{what}: {e}");
        assert_eq!(e.offset(), Some(3), "{what}: {e}");
        let msg = e.to_string();
        assert!(msg.contains("t-0"), "{what}: {msg}");
        assert!(msg.contains(&format!("offset {record}")), "{what}: {msg}");
        assert_eq!(c.position(&tp(0)).unwrap(), 3, "{what}");
        // The bad records are never delivered: the same error comes again.
        let (again, e2) = poll_error(&mut c, Duration::from_secs(10));
        assert!(again.is_empty(), "{what}: delivered {again:?}");
        assert_eq!(e2.offset(), Some(3));
    }
}

// ----- 5. header keys that are not UTF-8 -----------------------------------------------------

// Defect at 68251e0: a non-UTF-8 header key failed the batch and stopped the partition.
#[test]
fn a_header_key_that_is_not_utf8_is_delivered_as_bytes_with_the_records_after_it() {
    let fake = FakeCluster::start(1, |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => fetch_reply(r, |w| {
            if w.offset != 0 {
                return FetchPart::empty(3);
            }
            let mut w = Writer::new();
            let key: &[u8] = &[0xff, 0xfe, 0x6b];
            encode_raw_record(&mut w, &(0, 0, None, Some(b"r0"), &[(key, Some(b"x"))]));
            encode_raw_record(&mut w, &(1, 0, None, Some(b"r1"), &[]));
            encode_raw_record(&mut w, &(2, 0, None, Some(b"r2"), &[(b"ok", None)]));
            let section = w.into_inner();
            FetchPart::records(
                3,
                encode_batch(&BatchSpec {
                    records_section: Some(&section),
                    record_count: Some(3),
                    last_offset_delta: Some(2),
                    ..BatchSpec::default()
                }),
            )
        }),
        _ => Reply::Close,
    });
    let mut c = Consumer::new(config(&fake.addr(0))).unwrap();
    c.assign(&[tp(0)]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while seen.len() < 3 {
        assert!(Instant::now() < deadline, "records missing: {seen:?}");
        let recs = c.poll(Duration::from_millis(100)).expect("poll");
        for r in &recs {
            let headers: Vec<(Vec<u8>, String, Option<Vec<u8>>)> = r
                .headers()
                .map(|h| {
                    (
                        h.key().to_vec(),
                        h.key_str().into_owned(),
                        h.value().map(<[u8]>::to_vec),
                    )
                })
                .collect();
            seen.push((r.offset(), r.value().map(<[u8]>::to_vec), headers));
        }
    }
    assert_eq!(
        seen,
        vec![
            (
                0,
                Some(b"r0".to_vec()),
                vec![(
                    vec![0xff, 0xfe, 0x6b],
                    "\u{fffd}\u{fffd}k".to_owned(),
                    Some(b"x".to_vec())
                )]
            ),
            (1, Some(b"r1".to_vec()), vec![]),
            (
                2,
                Some(b"r2".to_vec()),
                vec![(b"ok".to_vec(), "ok".to_owned(), None)]
            ),
        ]
    );
}

// ----- 6. preferred read replica (KIP-392) ---------------------------------------------------

// Defect at 68251e0: preferred_read_replica was ignored; no record ever came from the leader here.
#[test]
fn records_come_from_the_preferred_read_replica_and_an_error_there_goes_back_to_the_leader() {
    let fake = FakeCluster::start(2, |r| match (r.node, r.key) {
        (_, METADATA) => {
            let brokers = [broker(0, r.ports[0]), broker(1, r.ports[1])];
            let p = Part {
                replicas: vec![0, 1],
                ..part("t", 0, 0)
            };
            Reply::Send(metadata(r, &brokers, &[p]))
        }
        (_, LIST_OFFSETS) => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        // The leader sends the consumer to node 1 at first, and serves 5-7 itself.
        (0, FETCH) => fetch_reply(r, |w| match w.offset {
            0 => FetchPart {
                preferred_read_replica: Some(1),
                ..FetchPart::empty(8)
            },
            5 => FetchPart::records(8, batch(5, 3)),
            _ => FetchPart::empty(8),
        }),
        // The follower serves 0-4, then is no longer a replica.
        (1, FETCH) => fetch_reply(r, |w| match w.offset {
            0 => FetchPart::records(8, batch(0, 5)),
            _ => FetchPart::error(NOT_LEADER_OR_FOLLOWER),
        }),
        _ => Reply::Close,
    });
    // Five records a poll: the first poll returns exactly those from the follower.
    let mut c = Consumer::new(config(&fake.addr(0)).max_poll_records(5)).unwrap();
    c.assign(&[tp(0)]).unwrap();
    let first = poll_records(&mut c, 5, Duration::from_secs(15));
    assert_eq!(offsets(&first), (0..5).collect::<Vec<i64>>());
    let from = |c: &mut Consumer| c.partition_metrics()[0].fetched_from;
    assert_eq!(from(&mut c), Some(1), "the metrics name the follower");
    let rest = poll_records(&mut c, 3, Duration::from_secs(15));
    let got: Vec<_> = first.into_iter().chain(rest).collect();
    assert_eq!(offsets(&got), (0..8).collect::<Vec<i64>>());
    assert_eq!(from(&mut c), Some(0), "and then the leader");
    let fetches_at = |node: usize, offset: i64| {
        fake.requests_of(FETCH)
            .iter()
            .filter(|r| r.node == node && r.wanted().iter().any(|w| w.offset == offset))
            .count()
    };
    assert!(
        fetches_at(1, 0) >= 1,
        "records 0-4 were fetched from node 1"
    );
    assert!(
        fetches_at(1, 5) >= 1,
        "node 1 answered offset 5 with an error"
    );
    assert!(
        fetches_at(0, 5) >= 1,
        "after the error the leader was asked again"
    );
}

// ----- 7. throttling (KIP-219) ---------------------------------------------------------------

// Defect at 68251e0: throttle_time_ms was ignored; the next fetch went out at once.
#[test]
fn a_throttled_fetch_delays_the_next_one_on_its_connection_and_consumption_goes_on() {
    let fake = FakeCluster::start(1, |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => match r.wanted()[0].offset {
            0 => Reply::Send(fetch(r, 1500, |_| FetchPart::records(6, batch(0, 3)))),
            3 => Reply::Send(fetch(r, 0, |_| FetchPart::records(6, batch(3, 3)))),
            _ => fetch_reply(r, |_| FetchPart::empty(6)),
        },
        _ => Reply::Close,
    });
    let mut c = Consumer::new(config(&fake.addr(0))).unwrap();
    c.assign(&[tp(0)]).unwrap();
    let got = poll_records(&mut c, 6, Duration::from_secs(10));
    assert_eq!(offsets(&got), (0..6).collect::<Vec<i64>>());
    let fetches = fake.requests_of(FETCH);
    let first = fetches.iter().find(|r| r.wanted()[0].offset == 0).unwrap();
    let next = fetches.iter().find(|r| r.wanted()[0].offset == 3).unwrap();
    let gap = next.at - first.at;
    assert!(
        gap >= Duration::from_millis(1400) && gap < Duration::from_millis(3500),
        "the fetch after a 1500 ms throttle came {gap:?} later"
    );
    assert_eq!(next.conn, first.conn, "the same connection was used");
}

// ----- 8. REBOOTSTRAP_REQUIRED (KIP-1102) -----------------------------------------------------

// Defect at 68251e0: Metadata's top-level error was ignored; the bootstrap was never asked again.
#[test]
fn rebootstrap_required_makes_the_consumer_ask_the_bootstrap_server_again_and_recover() {
    // Listener 0 is only a bootstrap server (it closes after each answer); listener 1 is
    // broker 0.
    let armed = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicBool::new(false));
    let (armed2, sent2) = (Arc::clone(&armed), Arc::clone(&sent));
    let fake = FakeCluster::start(2, move |r| {
        let broker0 = broker(0, r.ports[1]);
        let normal = || metadata(r, &[broker0], &[part("t", 0, 0), part("u", 0, 0)]);
        match (r.node, r.key) {
            (0, METADATA) => Reply::SendAndClose(normal()),
            (1, METADATA) => {
                if armed2.load(Ordering::SeqCst) && !sent2.swap(true, Ordering::SeqCst) {
                    Reply::Send(metadata_error(r, REBOOTSTRAP_REQUIRED))
                } else {
                    Reply::Send(normal())
                }
            }
            (1, LIST_OFFSETS) => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
            (1, FETCH) => {
                let rebootstrapped = sent2.load(Ordering::SeqCst);
                fetch_reply(r, |w| match w.offset {
                    0 => FetchPart::records(6, batch(0, 3)),
                    3 if rebootstrapped => FetchPart::records(6, batch(3, 3)),
                    _ => FetchPart::empty(6),
                })
            }
            _ => Reply::Close,
        }
    });
    let mut c = Consumer::new(config(&fake.addr(0))).unwrap();
    c.assign(&[tp(0)]).unwrap();
    assert_eq!(
        offsets(&poll_records(&mut c, 3, Duration::from_secs(10))),
        vec![0, 1, 2]
    );
    let bootstrap_metadata = || {
        fake.requests_of(METADATA)
            .into_iter()
            .filter(|r| r.node == 0)
            .collect::<Vec<_>>()
    };
    let before = bootstrap_metadata().len();
    // partitions_for on a topic the cache does not know yet (t it answers from the cache)
    // sends a refresh at once, to the least-loaded ready link, brokers before bootstrap
    // servers: broker 0, whose control link answered the position lookup.
    armed.store(true, Ordering::SeqCst);
    assert_eq!(
        c.partitions_for("u").expect("partitions_for"),
        vec![TopicPartition::new("u", 0)]
    );
    assert!(
        sent.load(Ordering::SeqCst),
        "broker 0 answered REBOOTSTRAP_REQUIRED"
    );
    let rebootstrap_at = fake
        .requests_of(METADATA)
        .into_iter()
        .filter(|r| r.node == 1)
        .last()
        .unwrap()
        .at;
    let after = bootstrap_metadata();
    assert!(
        after.len() > before && after.last().unwrap().at > rebootstrap_at,
        "no new Metadata request on the bootstrap server after REBOOTSTRAP_REQUIRED"
    );
    // Consumption goes on.
    assert_eq!(
        offsets(&poll_records(&mut c, 3, Duration::from_secs(10))),
        vec![3, 4, 5]
    );
}

// ----- 9. fairness ----------------------------------------------------------------------------

// Defect at 68251e0: fetches listed partitions sorted, always the same one first (no rotation).
#[test]
fn sessionless_fetches_rotate_the_partition_that_comes_first() {
    let versions: Vec<(i16, i16, i16)> = MODERN
        .iter()
        .map(|&(k, lo, hi)| if k == FETCH { (k, 4, 6) } else { (k, lo, hi) })
        .collect();
    let opts = Options {
        versions,
        ..Options::default()
    };
    let fake = FakeCluster::with(opts, |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 3)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => fetch_reply(r, |_| FetchPart::empty(0)),
        _ => Reply::Close,
    });
    let mut c = Consumer::new(config(&fake.addr(0))).unwrap();
    c.assign(&[tp(0), tp(1), tp(2)]).unwrap();
    let full = |reqs: &[Arc<Request>]| -> Vec<i32> {
        reqs.iter()
            .filter(|r| r.key == FETCH)
            .map(|r| r.wanted())
            .filter(|f| f.len() == 3)
            .map(|f| f[0].partition)
            .collect()
    };
    assert!(
        fake.wait_until(Duration::from_secs(10), |reqs| full(reqs).len() >= 6),
        "fewer than six fetches of the three partitions"
    );
    let firsts = full(&fake.requests());
    assert!(fake.requests_of(FETCH).iter().all(|r| r.version <= 6));
    for pair in firsts.windows(2).take(5) {
        assert_ne!(
            pair[0], pair[1],
            "consecutive fetches put the same partition first: {firsts:?}"
        );
    }
    drop(c);
}

// ----- 10. offset lookups beside the fetch long-poll -------------------------------------------

// Defect at 68251e0: one connection per broker; lookups queued behind the fetch long-poll.
#[test]
fn offset_lookups_do_not_wait_behind_the_fetch_long_poll() {
    let fake = FakeCluster::start(1, |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, ts| {
            (0, if ts == -2 { 0 } else { 10 })
        })),
        // Every fetch is held for the whole of fetch.max.wait.ms, then answered empty.
        FETCH => Reply::SendAfter(
            Duration::from_secs(3),
            fetch(r, 0, |_| FetchPart::empty(10)),
        ),
        _ => Reply::Close,
    });
    let mut c =
        Consumer::new(config(&fake.addr(0)).fetch_max_wait(Duration::from_millis(3000))).unwrap();
    c.assign(&[tp(0)]).unwrap();
    assert!(
        fake.wait_until(Duration::from_secs(10), |reqs| reqs
            .iter()
            .any(|r| r.key == FETCH)),
        "no fetch"
    );
    let t0 = Instant::now();
    for _ in 0..12 {
        let end = c.end_offsets(&[tp(0)]).expect("end_offsets");
        assert_eq!(end, HashMap::from([(tp(0), 10)]));
    }
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "twelve end_offsets calls took {took:?} beside a 3 s fetch long-poll"
    );
}

// ----- 11. pause, resume and seek ---------------------------------------------------------------

/// A fetch handler serving three records from offset 0 of each partition, nothing after.
fn serve_three_each(parts: &'static [i32], latest: i64) -> FakeCluster {
    FakeCluster::start(1, move |r| match r.key {
        METADATA => {
            let ps: Vec<Part> = parts.iter().map(|&p| part("t", p, 0)).collect();
            Reply::Send(metadata(r, &[broker(0, r.ports[0])], &ps))
        }
        LIST_OFFSETS => Reply::Send(list_offsets(r, move |_, _, ts| {
            (0, if ts == -2 { 0 } else { latest })
        })),
        FETCH => fetch_reply(r, |w| match w.offset {
            0 => FetchPart::records(latest, batch(0, 3)),
            o if o > latest => FetchPart::error(OFFSET_OUT_OF_RANGE),
            _ => FetchPart::empty(latest),
        }),
        _ => Reply::Close,
    })
}

// Defect at 68251e0: resume without a position fell back to auto.offset.reset.
#[test]
fn a_pending_seek_to_beginning_survives_pause_and_resume() {
    let fake = serve_three_each(&[0], 10);
    let mut c =
        Consumer::new(config(&fake.addr(0)).auto_offset_reset(OffsetReset::Latest)).unwrap();
    c.assign(&[tp(0)]).unwrap();
    c.seek_to_beginning(&[tp(0)]).unwrap();
    c.pause(&[tp(0)]).unwrap();
    c.resume(&[tp(0)]).unwrap();
    assert_eq!(
        offsets(&poll_records(&mut c, 3, Duration::from_secs(10))),
        vec![0, 1, 2],
        "the partition starts from the beginning, not from auto.offset.reset=latest"
    );
}

// Defect at 68251e0: a seek unpaused the partition on the I/O thread; it was fetched while paused.
#[test]
fn a_seek_on_a_paused_partition_does_not_fetch_it() {
    let fake = serve_three_each(&[0, 1], 3);
    let mut c = Consumer::new(config(&fake.addr(0)).auto_offset_reset(OffsetReset::None)).unwrap();
    c.assign(&[tp(0), tp(1)]).unwrap();
    c.seek(&tp(0), 0).unwrap();
    c.seek(&tp(1), 0).unwrap();
    assert_eq!(poll_records(&mut c, 6, Duration::from_secs(10)).len(), 6);

    c.pause(&[tp(0)]).unwrap();
    c.seek(&tp(0), 500).unwrap(); // out of range
    let mark = fake.requests().len();
    let fetches_since = |reqs: &[Arc<Request>]| {
        reqs[mark.min(reqs.len())..]
            .iter()
            .filter(|r| r.key == FETCH)
            .count()
    };
    // t-1 keeps being fetched meanwhile.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fetches_since(&fake.requests()) < 6 {
        assert!(Instant::now() < deadline, "t-1 is no longer fetched");
        let recs = c
            .poll(Duration::from_millis(100))
            .expect("no error while t-0 is paused");
        assert!(recs.is_empty());
    }
    let fetched_paused = fake
        .requests_of(FETCH)
        .iter()
        .filter(|r| {
            r.wanted()
                .iter()
                .any(|w| (w.topic.as_str(), w.partition, w.offset) == ("t", 0, 500))
        })
        .count();
    assert_eq!(
        fetched_paused, 0,
        "the paused partition was fetched after the seek"
    );
    assert_eq!(c.paused(), vec![tp(0)]);

    // Once resumed, the seek takes effect (and its offset is out of range).
    c.resume(&[tp(0)]).unwrap();
    let (_, e) = poll_error(&mut c, Duration::from_secs(10));
    assert_eq!(e.kind(), ErrorKind::OffsetOutOfRange, "{e}");
    assert_eq!(e.partition(), Some(&tp(0)));
}

// Defect at 68251e0: pause paused the partitions before the first unassigned one, then failed.
#[test]
fn pausing_a_partition_not_assigned_fails_and_pauses_nothing() {
    let fake = serve_three_each(&[0], 3);
    let mut c = Consumer::new(config(&fake.addr(0))).unwrap();
    c.assign(&[tp(0)]).unwrap();
    let e = c.pause(&[tp(0), tp(9)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotAssigned, "{e}");
    assert_eq!(e.partition(), Some(&tp(9)));
    assert!(c.paused().is_empty(), "paused: {:?}", c.paused());
    // t-0 is still consumed.
    assert_eq!(poll_records(&mut c, 3, Duration::from_secs(10)).len(), 3);
}

// ----- 12. errors about records name their partition and offset -------------------------------

// Defect at 68251e0: record errors named no offset and no skip_to.
#[test]
fn an_unreadable_batch_is_an_error_naming_partition_offset_and_where_to_skip() {
    let three: Vec<RecordSpec<'_>> = (0..3)
        .map(|i| (i, 0, None, Some(&b"bad"[..]), &[][..]))
        .collect();
    let crc = {
        let mut b = batch(3, 3);
        let n = b.len();
        b[n - 1] ^= 0x55;
        b
    };
    let unknown_codec = encode_batch(&BatchSpec {
        base_offset: 3,
        attributes: 5,
        records: &three,
        ..BatchSpec::default()
    });
    let magic1 = encode_batch(&BatchSpec {
        base_offset: 3,
        magic: 1,
        records: &three,
        ..BatchSpec::default()
    });
    let malformed = {
        // Two good records, then one whose length runs past the section.
        let mut section = encode_records(&three[..2]);
        let mut w = Writer::new();
        w.varint(40);
        w.raw(&[0; 6]);
        section.extend(w.into_inner());
        encode_batch(&BatchSpec {
            base_offset: 3,
            records_section: Some(&section),
            record_count: Some(3),
            last_offset_delta: Some(2),
            ..BatchSpec::default()
        })
    };
    // (what, bad batch, kind, where to skip to)
    let cases = [
        ("a CRC mismatch", crc, ErrorKind::Corrupt, Some(6)),
        (
            "an unknown codec",
            unknown_codec,
            ErrorKind::Unsupported,
            Some(6),
        ),
        ("magic 1", magic1, ErrorKind::Unsupported, None),
        (
            "a malformed record",
            malformed,
            ErrorKind::Protocol,
            Some(6),
        ),
    ];
    for (what, bad, kind, skip_to) in cases {
        let fake = serve_with_bad_batch(bad);
        let mut c = Consumer::new(config(&fake.addr(0))).unwrap();
        c.assign(&[tp(0)]).unwrap();
        let (got, e) = poll_error(&mut c, Duration::from_secs(10));
        assert_eq!(got, vec![0, 1, 2], "{what}");
        assert_eq!(e.kind(), kind, "{what}: {e}");
        assert_eq!(e.partition(), Some(&tp(0)), "{what}: {e}");
        assert_eq!(e.offset(), Some(3), "{what}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("t-0") && msg.contains("offset 3"),
            "{what}: {msg}"
        );
        assert_eq!(e.skip_to(), skip_to, "{what}: {e}");
        if let Some(next) = skip_to {
            assert!(msg.contains(&format!("seek to {next}")), "{what}: {msg}");
            c.seek(&tp(0), next).unwrap();
            let after = poll_records(&mut c, 3, Duration::from_secs(10));
            assert_eq!(offsets(&after), vec![6, 7, 8], "{what}: after seek({next})");
        }
    }
}

// ----- 13. commits in manual-assignment mode ---------------------------------------------------

/// A group consumer whose assigned t-0 is at offset 5, and a fake coordinator (node 0)
/// whose FindCoordinator and OffsetCommit answers come from the closures (by call number).
fn committing(
    find: impl Fn(usize) -> i16 + Send + Sync + 'static,
    commit: impl Fn(usize) -> Option<i16> + Send + Sync + 'static,
    cfg: impl FnOnce(ConsumerConfig) -> ConsumerConfig,
) -> (FakeCluster, Consumer) {
    let finds = AtomicUsize::new(0);
    let commits = AtomicUsize::new(0);
    let fake = FakeCluster::start(1, move |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 5))),
        FETCH => fetch_reply(r, |_| FetchPart::empty(5)),
        OFFSET_FETCH => Reply::Send(offset_fetch_nothing(r)),
        FIND_COORDINATOR => {
            let n = finds.fetch_add(1, Ordering::SeqCst);
            Reply::Send(find_coordinator(r, find(n), 0, r.ports[0]))
        }
        OFFSET_COMMIT => match commit(commits.fetch_add(1, Ordering::SeqCst)) {
            Some(code) => Reply::Send(offset_commit(r, code)),
            None => Reply::Hang,
        },
        _ => Reply::Close,
    });
    let mut c = Consumer::new(cfg(config(&fake.addr(0)).group_id("g"))).unwrap();
    c.assign(&[tp(0)]).unwrap();
    c.seek(&tp(0), 5).unwrap();
    (fake, c)
}

// Not a defect at 68251e0: it could not commit at all.
#[test]
fn commit_sync_rides_out_not_coordinator_and_a_coordinator_still_loading() {
    let (fake, mut c) = committing(
        |n| if n == 0 { NOT_COORDINATOR } else { 0 },
        |n| {
            Some(if n == 0 {
                COORDINATOR_LOAD_IN_PROGRESS
            } else {
                0
            })
        },
        |cfg| cfg,
    );
    c.commit_sync().expect("commit_sync");
    assert!(fake.requests_of(FIND_COORDINATOR).len() >= 2);
    let commits = fake.requests_of(OFFSET_COMMIT);
    assert_eq!(commits.len(), 2, "one refused while loading, one accepted");
    let last: OffsetCommitRequest = commits[1].decode();
    assert_eq!(last.group_id, "g");
    assert_eq!(last.generation_id_or_member_epoch, -1);
    let committed: Vec<(String, i32, i64)> = last
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.clone(), p.partition_index, p.committed_offset))
        })
        .collect();
    assert_eq!(committed, vec![("t".to_owned(), 0, 5)]);
}

// Not a defect at 68251e0: it could not commit at all.
#[test]
fn a_commit_refused_for_an_unknown_member_says_the_group_has_active_members() {
    let (_fake, mut c) = committing(|_| 0, |_| Some(UNKNOWN_MEMBER_ID), |cfg| cfg);
    let e = c.commit_sync().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CommitFailed, "{e}");
    assert!(e.to_string().contains("active members"), "{e}");
}

// Not a defect at 68251e0: it could not commit at all.
#[test]
fn a_coordinator_that_never_answers_times_commit_sync_out_at_default_api_timeout() {
    let (fake, mut c) = committing(
        |_| 0,
        |_| None,
        |cfg| cfg.default_api_timeout(Duration::from_secs(2)),
    );
    let t0 = Instant::now();
    let e = c.commit_sync().unwrap_err();
    let took = t0.elapsed();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(2800),
        "commit_sync failed after {took:?}, not at default.api.timeout.ms (2 s)"
    );
    assert!(!fake.requests_of(OFFSET_COMMIT).is_empty());
    let msg = e.to_string();
    assert!(
        msg.contains("OffsetCommit") && msg.contains("node 0"),
        "the timeout names the last problem: {msg}"
    );
    // Reading the committed offsets from it times out the same way (the group link is
    // stuck behind the unanswered commit).
    let t0 = Instant::now();
    let e = c.committed(&[tp(0)]).unwrap_err();
    let took = t0.elapsed();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(2800),
        "committed() failed after {took:?}, not at default.api.timeout.ms (2 s)"
    );
    assert!(e.to_string().contains("node 0"), "{e}");
}

// ----- groups ------------------------------------------------------------------------------

/// GROUP_AUTHORIZATION_FAILED: the broker does not let this client use the group.
const GROUP_AUTHORIZATION_FAILED: i16 = 30;

#[test]
fn subscribing_to_a_group_the_client_may_not_use_is_an_error_from_poll_naming_the_group() {
    let fake = FakeCluster::start(1, move |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        FIND_COORDINATOR => Reply::Send(find_coordinator(
            r,
            GROUP_AUTHORIZATION_FAILED,
            0,
            r.ports[0],
        )),
        _ => Reply::Close,
    });
    let mut c = Consumer::new(config(&fake.addr(0)).group_id("secret-group")).unwrap();
    c.subscribe(&["t"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let e = loop {
        match c.poll(Duration::from_millis(200)) {
            Err(e) => break e,
            Ok(r) => {
                assert!(r.is_empty());
                assert!(Instant::now() < deadline, "no error from poll");
            }
        }
    };
    assert_eq!(e.kafka_code(), Some(GROUP_AUTHORIZATION_FAILED), "{e}");
    assert!(e.to_string().contains("secret-group"), "{e}");
    // Discovery is retried with a backoff, not in a loop.
    let before = fake.count(FIND_COORDINATOR);
    std::thread::sleep(Duration::from_secs(2));
    let during = fake.count(FIND_COORDINATOR) - before;
    assert!(during <= 5, "{during} FindCoordinator requests in 2 s");
    c.close().unwrap();
}

/// Polls until `poll` returns an error; every poll before it returns no records.
fn poll_group_error(c: &mut Consumer, limit: Duration) -> Error {
    let deadline = Instant::now() + limit;
    loop {
        match c.poll(Duration::from_millis(100)) {
            Err(e) => return e,
            Ok(r) => {
                assert!(r.is_empty());
                assert!(Instant::now() < deadline, "no error from poll");
            }
        }
    }
}

#[test]
fn a_member_that_stopped_for_good_is_reported_once_and_poll_then_waits_until_subscribe() {
    // The fake speaks no JoinGroup: the member cannot join, whatever it retries.
    let fake = FakeCluster::start(1, move |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        FIND_COORDINATOR => Reply::Send(find_coordinator(r, 0, 0, r.ports[0])),
        OFFSET_FETCH => Reply::Send(offset_fetch_nothing(r)),
        _ => Reply::Close,
    });
    let mut c = Consumer::new(config(&fake.addr(0)).group_id("stuck")).unwrap();
    c.subscribe(&["t"]).unwrap();
    let e = poll_group_error(&mut c, Duration::from_secs(20));
    assert_eq!(e.kind(), ErrorKind::GroupFatal, "{e}");
    assert!(!e.is_retriable(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("stuck") && text.contains("JoinGroup"),
        "{text}"
    );

    // Once: a loop that logs the error and polls again waits out each timeout, without an
    // error and without records, still subscribed and owning nothing.
    for _ in 0..3 {
        let start = Instant::now();
        let records = c.poll(Duration::from_millis(300)).expect("no second error");
        assert!(records.is_empty());
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(300),
            "poll returned after {took:?}"
        );
    }
    assert_eq!(c.subscription().unwrap(), vec!["t".to_owned()]);
    assert!(c.assignment().is_empty());
    assert_eq!(c.group_metadata().unwrap().generation_id, -1);
    let e = c.assign(&[tp(0)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidState, "still subscribed: {e}");

    // Subscribing again starts over with a new member (which stops the same way here).
    c.subscribe(&["t"]).unwrap();
    let e = poll_group_error(&mut c, Duration::from_secs(20));
    assert_eq!(e.kind(), ErrorKind::GroupFatal, "{e}");
    // And unsubscribing ends it: polls are plain waits again.
    c.unsubscribe().unwrap();
    let start = Instant::now();
    assert!(c.poll(Duration::from_millis(200)).unwrap().is_empty());
    assert!(start.elapsed() >= Duration::from_millis(200));
    c.close().unwrap();
}
