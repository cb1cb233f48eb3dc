//! Log truncation under the consumer (KIP-320), provoked on demand with the fake broker:
//! a partition's leader moves to a new leader epoch whose log no longer holds the last
//! records the consumer read. The consumer must find out before it fetches from the new
//! leader, tell the application (never skip records or reset silently), and go on where
//! the logs agree. The same on a real cluster, with an unclean election, is in
//! `tests/cluster_truncation.rs`.

mod common;

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fake::*;
use kafka_consumer::testing::api::offset_for_leader_epoch::{
    EpochEndOffset, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
};
use kafka_consumer::testing::frame::encode_response;
use kafka_consumer::{Consumer, ConsumerConfig, Error, ErrorKind, OffsetReset, TopicPartition};

/// Node 0 leads `t-0`. At leader epoch 0 its log holds `v0..v9` (epoch 0). Once the test
/// bumps the epoch to 1 (an unclean election, as it were), the log holds `v0..v6` of epoch
/// 0 and then `w7..w11` of epoch 1: it diverges from the old one at offset 7. Fetches
/// naming epoch 0 then get FENCED_LEADER_EPOCH, and OffsetForLeaderEpoch answers that
/// epoch 0 ends at 7.
fn truncating_broker(epoch: Arc<AtomicI32>) -> FakeCluster {
    let mut versions = MODERN.to_vec();
    versions.push((OFFSET_FOR_LEADER_EPOCH, 2, 4));
    let opts = Options {
        versions,
        ..Options::default()
    };
    FakeCluster::with(opts, move |r| {
        let now = epoch.load(Ordering::SeqCst);
        match r.key {
            METADATA => {
                let p = Part {
                    leader_epoch: now,
                    ..part("t", 0, 0)
                };
                Reply::Send(metadata(r, &[broker(0, r.ports[0])], &[p]))
            }
            LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, ts| {
                (0, if ts == -1 { 10 + 2 * now as i64 } else { 0 })
            })),
            FETCH => fetch_reply(r, |w| {
                if w.current_leader_epoch >= 0 && w.current_leader_epoch < now {
                    return FetchPart::error(74); // FENCED_LEADER_EPOCH
                }
                let log = if now == 0 {
                    vec![(0, 10, batch_at(0, 10, 0, "v"))]
                } else {
                    vec![
                        (0, 7, batch_at(0, 7, 0, "v")),
                        (7, 12, batch_at(7, 5, 1, "w")),
                    ]
                };
                let end = log.last().map_or(0, |b| b.1);
                let records: Vec<u8> = log
                    .into_iter()
                    .filter(|(_, next, _)| *next > w.offset)
                    .flat_map(|(_, _, bytes)| bytes)
                    .collect();
                FetchPart::records(end, records)
            }),
            OFFSET_FOR_LEADER_EPOCH => {
                let req = r.decode::<OffsetForLeaderEpochRequest>();
                let topics = req
                    .topics
                    .iter()
                    .map(|t| OffsetForLeaderTopicResult {
                        topic: t.topic.clone(),
                        partitions: t
                            .partitions
                            .iter()
                            .map(|p| {
                                let (leader_epoch, end_offset) = match (now, p.leader_epoch) {
                                    (0, _) => (0, 10),
                                    (_, 0) => (0, 7),
                                    (_, _) => (1, 12),
                                };
                                EpochEndOffset {
                                    error_code: 0,
                                    partition: p.partition,
                                    leader_epoch,
                                    end_offset,
                                }
                            })
                            .collect(),
                    })
                    .collect();
                let resp = OffsetForLeaderEpochResponse {
                    throttle_time_ms: 0,
                    topics,
                };
                Reply::Send(encode_response::<OffsetForLeaderEpochRequest>(
                    &resp, r.version, r.corr,
                ))
            }
            _ => Reply::Close,
        }
    })
}

fn consumer(fake: &FakeCluster, reset: OffsetReset) -> Consumer {
    let cfg = ConsumerConfig::new(&fake.addr(0))
        .auto_offset_reset(reset)
        .default_api_timeout(Duration::from_secs(5))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
        .retry_backoff(Duration::from_millis(50));
    common::new_consumer(cfg)
}

/// What `poll` hands out within `limit`: records as `(offset, value)` and errors, in order,
/// until `done` says so.
fn poll_until(
    c: &mut Consumer,
    limit: Duration,
    mut done: impl FnMut(&[(i64, String)], &[Error]) -> bool,
) -> (Vec<(i64, String)>, Vec<Error>) {
    let (mut records, mut errors) = (Vec::new(), Vec::new());
    let end = Instant::now() + limit;
    while !done(&records, &errors) {
        assert!(
            Instant::now() < end,
            "gave up after {limit:?}: records {records:?}, errors {errors:?}"
        );
        match c.poll(Duration::from_millis(100)) {
            Ok(rs) => records.extend(rs.iter().map(|r| {
                (
                    r.offset(),
                    String::from_utf8_lossy(r.value().unwrap_or_default()).into_owned(),
                )
            })),
            Err(e) => errors.push(e),
        }
    }
    (records, errors)
}

fn values(records: &[(i64, String)]) -> Vec<&str> {
    records.iter().map(|(_, v)| v.as_str()).collect()
}

#[test]
fn a_log_truncated_below_the_records_read_is_reported_and_reading_resumes_where_it_diverges() {
    let epoch = Arc::new(AtomicI32::new(0));
    let fake = truncating_broker(Arc::clone(&epoch));
    let mut c = consumer(&fake, OffsetReset::Earliest);
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let (read, _) = poll_until(&mut c, Duration::from_secs(10), |r, _| r.len() >= 10);
    assert_eq!(read.last().map(|r| r.0), Some(9));

    epoch.store(1, Ordering::SeqCst);
    let (after, errors) = poll_until(&mut c, Duration::from_secs(10), |r, _| {
        r.iter().any(|(o, _)| *o == 11)
    });
    let truncation: Vec<&Error> = errors
        .iter()
        .filter(|e| e.kind() == ErrorKind::LogTruncation)
        .collect();
    assert_eq!(truncation.len(), 1, "told once: {errors:?}");
    let e = truncation[0];
    assert_eq!(e.partition(), Some(&tp));
    assert_eq!(e.offset(), Some(10), "the position before");
    assert_eq!(e.divergent_offset(), Some(7), "where the logs part");
    let text = e.to_string();
    assert!(
        text.contains("7") && text.contains("10") && text.contains("resumes at offset 7"),
        "{text}"
    );
    assert_eq!(
        values(&after),
        vec!["w7", "w8", "w9", "w10", "w11"],
        "the new leader's records from the divergence on, nothing skipped"
    );
    assert_eq!(c.position(&tp).unwrap(), 12);
    assert!(
        fake.count(OFFSET_FOR_LEADER_EPOCH) >= 1,
        "validated with OffsetForLeaderEpoch"
    );
}

#[test]
fn with_auto_offset_reset_none_a_truncation_stops_the_partition_until_a_seek() {
    let epoch = Arc::new(AtomicI32::new(0));
    let fake = truncating_broker(Arc::clone(&epoch));
    let mut c = consumer(&fake, OffsetReset::None);
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.seek(&tp, 0).unwrap();
    poll_until(&mut c, Duration::from_secs(10), |r, _| r.len() >= 10);

    epoch.store(1, Ordering::SeqCst);
    let (after, errors) = poll_until(&mut c, Duration::from_secs(10), |_, e| {
        e.iter().any(|e| e.kind() == ErrorKind::LogTruncation)
    });
    assert!(after.is_empty(), "nothing past the truncation: {after:?}");
    let e = errors.last().unwrap();
    assert_eq!(
        (e.offset(), e.divergent_offset()),
        (Some(10), Some(7)),
        "{e}"
    );
    assert!(e.to_string().contains("seek"), "{e}");
    // Stopped: nothing comes until the application seeks.
    let (nothing, _) = poll_for(&mut c, Duration::from_secs(2));
    assert!(nothing.is_empty(), "{nothing:?}");
    c.seek(&tp, 7).unwrap();
    let (resumed, _) = poll_until(&mut c, Duration::from_secs(10), |r, _| r.len() >= 5);
    assert_eq!(values(&resumed), vec!["w7", "w8", "w9", "w10", "w11"]);
}

#[test]
fn records_prefetched_past_the_divergence_but_never_returned_are_refetched_without_an_error() {
    let epoch = Arc::new(AtomicI32::new(0));
    let fake = truncating_broker(Arc::clone(&epoch));
    let cfg = ConsumerConfig::new(&fake.addr(0))
        .auto_offset_reset(OffsetReset::Earliest)
        .max_poll_records(3)
        .retry_backoff(Duration::from_millis(50));
    let mut c = common::new_consumer(cfg);
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    // Three records returned; the other seven wait in the consumer.
    let (first, _) = poll_until(&mut c, Duration::from_secs(10), |r, _| r.len() >= 3);
    assert_eq!(values(&first), vec!["v0", "v1", "v2"]);
    // Move the epoch and let the consumer find the truncation before polling again:
    // position 3 is before the divergence at 7, so nothing the application saw is gone,
    // but the prefetched v7..v9 are.
    epoch.store(1, Ordering::SeqCst);
    assert!(
        fake.wait_until(Duration::from_secs(10), |rs| rs
            .iter()
            .any(|r| r.key == OFFSET_FOR_LEADER_EPOCH)),
        "validated with OffsetForLeaderEpoch"
    );
    std::thread::sleep(Duration::from_millis(300));
    let (rest, errors) = poll_until(&mut c, Duration::from_secs(10), |r, _| {
        r.iter().any(|(o, _)| *o == 11)
    });
    assert!(errors.is_empty(), "nothing returned was lost: {errors:?}");
    let offsets: Vec<i64> = rest.iter().map(|r| r.0).collect();
    assert_eq!(offsets, (3..12).collect::<Vec<_>>(), "no gap, no repeat");
    let vals = values(&rest);
    assert_eq!(
        &vals[..4],
        &["v3", "v4", "v5", "v6"],
        "before the divergence"
    );
    assert_eq!(
        &vals[4..],
        &["w7", "w8", "w9", "w10", "w11"],
        "the new log after it"
    );
}

/// What `poll` hands out during `d`.
fn poll_for(c: &mut Consumer, d: Duration) -> (Vec<(i64, String)>, Vec<Error>) {
    let end = Instant::now() + d;
    poll_until(c, d + Duration::from_secs(1), |_, _| Instant::now() >= end)
}
