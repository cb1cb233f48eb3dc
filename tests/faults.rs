//! Faults a real broker will not produce on demand, provoked with a small fake broker on
//! 127.0.0.1: hostile lengths, malformed responses, corrupt record batches, a connection
//! that dies mid-response. The consumer must report a clear error, never panic or
//! allocate from a length field, and recover when the broker behaves again.
//!
//! The real-broker behaviour is covered by `tests/consume.rs`; this file only adds faults.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::fake::*;
use kafka_consumer::testing::wire::Writer;
use kafka_consumer::{Consumer, ConsumerConfig, ErrorKind, OffsetReset, TopicPartition};

/// A fake broker speaking only old, non-flexible versions ([`OLD`]: Metadata v8, Fetch v7).
fn old_broker(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> FakeCluster {
    let opts = Options {
        versions: OLD.to_vec(),
        ..Options::default()
    };
    FakeCluster::with(opts, handler)
}

fn consumer(fake: &FakeCluster) -> Consumer {
    let cfg = ConsumerConfig::new(&fake.addr(0))
        .auto_offset_reset(OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(5))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
        .retry_backoff(Duration::from_millis(50));
    Consumer::new(cfg).expect("consumer")
}

/// A Fetch answer giving t-0 `records` (high watermark 1000).
fn fetch_records(r: &Request, records: &[u8]) -> Vec<u8> {
    fetch(r, 0, |_| FetchPart::records(1_000, records.to_vec()))
}

#[test]
fn a_malformed_metadata_response_is_a_protocol_error_not_a_panic() {
    let fake = old_broker(|r| match r.key {
        METADATA => {
            // A topics array that claims two billion entries in a 20-byte frame.
            let mut w = Writer::new();
            w.i32(16);
            w.i32(r.corr);
            w.i32(0); // brokers: empty
            w.i32(i32::MAX); // topics: hostile count
            w.i32(0);
            Reply::Send(w.into_inner())
        }
        _ => Reply::Close,
    });
    let mut c = consumer(&fake);
    let e = c.partitions_for("t").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("Metadata"), "{e}");
    // The consumer is still alive and answers again.
    let e = c.partitions_for("t").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol);
}

#[test]
fn a_frame_claiming_two_gigabytes_closes_the_connection_without_allocating_it() {
    let fake = old_broker(|r| match r.key {
        METADATA => Reply::Send(vec![0x7f, 0xff, 0xff, 0xf0, 0, 0, 0, 1]),
        _ => Reply::Close,
    });
    let mut c = consumer(&fake);
    let e = c.partitions_for("t").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
}

#[test]
fn a_corrupt_batch_is_an_error_naming_the_partition_after_the_good_records() {
    let fake = old_broker(|r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => {
            let mut set = batch(0, 3);
            let mut bad = batch(3, 3);
            let n = bad.len();
            bad[n - 1] ^= 0x55;
            set.extend(bad);
            Reply::Send(fetch_records(r, &set))
        }
        _ => Reply::Close,
    });
    let mut c = consumer(&fake);
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let mut got = Vec::new();
    let err = loop {
        match c.poll(Duration::from_secs(5)) {
            Ok(recs) => {
                assert!(!recs.is_empty(), "timed out before the error");
                got.extend(recs.iter().map(|r| r.offset()));
            }
            Err(e) => break e,
        }
    };
    assert_eq!(
        got,
        vec![0, 1, 2],
        "records before the corrupt batch arrive first"
    );
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_eq!(err.partition(), Some(&tp));
    assert!(err.to_string().contains("t-0"), "{err}");
    // The position stays at the corrupt batch, as in the Java client.
    assert_eq!(c.position(&tp).unwrap(), 3);
}

#[test]
fn a_connection_that_dies_mid_response_is_reconnected_and_nothing_is_lost() {
    let fetches = Arc::new(AtomicUsize::new(0));
    let f2 = Arc::clone(&fetches);
    let fake = old_broker(move |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => {
            let full = fetch_records(r, &batch(0, 5));
            if f2.fetch_add(1, Ordering::SeqCst) == 0 {
                // The first fetch: half a response, then the connection drops.
                Reply::SendAndClose(full[..full.len() / 2].to_vec())
            } else {
                Reply::Send(full)
            }
        }
        _ => Reply::Close,
    });
    let mut c = consumer(&fake);
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let mut got = Vec::new();
    while got.len() < 5 {
        let recs = c.poll(Duration::from_secs(10)).expect("poll");
        assert!(!recs.is_empty(), "no records after the reconnect");
        got.extend(
            recs.iter()
                .map(|r| (r.offset(), r.value().map(<[u8]>::to_vec))),
        );
    }
    let want: Vec<(i64, Option<Vec<u8>>)> = (0..5)
        .map(|i| (i, Some(format!("v{i}").into_bytes())))
        .collect();
    assert_eq!(got, want);
    assert!(
        fetches.load(Ordering::SeqCst) >= 2,
        "the first fetch failed and was retried"
    );
}

#[test]
fn not_leader_refreshes_metadata_and_the_fetch_is_retried() {
    let metadata_calls = Arc::new(AtomicUsize::new(0));
    let fetches = Arc::new(AtomicUsize::new(0));
    let (m2, f2) = (Arc::clone(&metadata_calls), Arc::clone(&fetches));
    let fake = old_broker(move |r| match r.key {
        METADATA => {
            m2.fetch_add(1, Ordering::SeqCst);
            Reply::Send(simple_metadata(r, 1))
        }
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => {
            if f2.fetch_add(1, Ordering::SeqCst) == 0 {
                // NOT_LEADER_OR_FOLLOWER
                Reply::Send(fetch(r, 0, |_| FetchPart::error(6)))
            } else {
                Reply::Send(fetch_records(r, &batch(0, 3)))
            }
        }
        _ => Reply::Close,
    });
    let mut c = consumer(&fake);
    c.assign(&[TopicPartition::new("t", 0)]).unwrap();
    let recs = c.poll(Duration::from_secs(10)).unwrap();
    let offsets: Vec<i64> = recs.iter().map(|r| r.offset()).collect();
    assert_eq!(offsets, vec![0, 1, 2]);
    assert!(
        metadata_calls.load(Ordering::SeqCst) >= 2,
        "metadata was refreshed after the error"
    );
}

#[test]
fn a_fetch_without_an_answer_times_out_and_is_retried_on_a_new_connection() {
    let fetches = Arc::new(AtomicUsize::new(0));
    let f2 = Arc::clone(&fetches);
    let fake = old_broker(move |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH if f2.fetch_add(1, Ordering::SeqCst) == 0 => Reply::Hang,
        FETCH => Reply::Send(fetch_records(r, &batch(0, 2))),
        _ => Reply::Close,
    });
    let cfg = ConsumerConfig::new(&fake.addr(0))
        .auto_offset_reset(OffsetReset::Earliest)
        .request_timeout(Duration::from_millis(800))
        .fetch_max_wait(Duration::from_millis(100))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100));
    let mut c = Consumer::new(cfg).unwrap();
    c.assign(&[TopicPartition::new("t", 0)]).unwrap();
    let recs = c.poll(Duration::from_secs(10)).unwrap();
    assert_eq!(
        recs.len(),
        2,
        "records arrive after the timed-out fetch is retried"
    );
    assert!(fetches.load(Ordering::SeqCst) >= 2);
}

/// A leader that stops answering (frozen: its connections stay open) and loses the
/// partition to another broker: once the fetch to it times out, the consumer asks for
/// newer metadata at once (as the Java client does after any disconnect) and reads from
/// the new leader, instead of fetching from the old one again until `metadata.max.age.ms`.
#[test]
fn a_fetch_timeout_refreshes_metadata_and_reading_moves_to_the_new_leader() {
    let hung = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let h2 = Arc::clone(&hung);
    let opts = Options {
        nodes: 2,
        versions: OLD.to_vec(),
        ..Options::default()
    };
    let fake = FakeCluster::with(opts, move |r| match r.key {
        METADATA => {
            // After node 0 froze, the cluster says node 1 leads t-0.
            let leader = if h2.load(Ordering::SeqCst) { 1 } else { 0 };
            let brokers = [broker(0, r.ports[0]), broker(1, r.ports[1])];
            Reply::Send(metadata(r, &brokers, &[part("t", 0, leader)]))
        }
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH if r.node == 0 => {
            h2.store(true, Ordering::SeqCst);
            Reply::Hang
        }
        FETCH => Reply::Send(fetch_records(r, &batch(0, 2))),
        _ => Reply::Close,
    });
    let cfg = ConsumerConfig::new(&fake.addr(0))
        .auto_offset_reset(OffsetReset::Earliest)
        .request_timeout(Duration::from_millis(800))
        .fetch_max_wait(Duration::from_millis(100))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100));
    common::init_log();
    let mut c = Consumer::new(cfg).unwrap();
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut offsets = Vec::new();
    while offsets.len() < 2 && std::time::Instant::now() < deadline {
        let recs = c.poll(Duration::from_millis(200)).unwrap();
        offsets.extend(recs.iter().map(|r| r.offset()));
    }
    assert_eq!(
        offsets,
        vec![0, 1],
        "read from the new leader within 5 s (fetches to node 0 timed out after 0.8 s)"
    );
    let m = c.partition_metrics();
    assert_eq!(m[0].fetched_from, Some(1), "records from node 1");
    assert!(
        hung.load(Ordering::SeqCst),
        "the first fetch went to node 0"
    );
}
