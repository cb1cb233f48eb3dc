//! assign + poll against a real Kafka broker: every record exactly once and in order, every
//! codec, transactions, seeks, pause/resume, offsets by time, offset reset, wakeup.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use kafka_consumer::{ErrorKind, TopicPartition};

/// Reads `count` records of a topic written by [`Produce`] and checks each one against the
/// producer's formula: right partition, consecutive offsets, increasing sequence per
/// partition, exact keys, values (null ones too) and headers (duplicates and nulls too).
fn consume_and_verify(
    topic: &str,
    partitions: i32,
    count: u64,
    value_size: usize,
    extra: &[(&str, &str)],
) {
    let mut c = consumer(extra);
    let tps = all_partitions(topic, partitions);
    c.assign(&tps).unwrap();
    let mut next_offset: HashMap<i32, i64> = HashMap::new();
    let mut last_seq: HashMap<i32, u64> = HashMap::new();
    let mut seen = vec![false; count as usize];
    let mut total = 0u64;
    poll_until(&mut c, Duration::from_secs(120), "all records", |recs| {
        for r in recs {
            let i = seq(&r);
            assert!(i < count, "unexpected sequence {i}");
            assert!(!seen[i as usize], "record {i} delivered twice");
            seen[i as usize] = true;
            total += 1;
            let e = expected(i, partitions, value_size);
            assert_eq!(r.topic(), topic);
            assert_eq!(r.partition(), e.partition, "record {i}");
            let off = next_offset.entry(r.partition()).or_insert(0);
            assert_eq!(
                r.offset(),
                *off,
                "offsets of partition {} are consecutive",
                r.partition()
            );
            *off += 1;
            if let Some(prev) = last_seq.insert(r.partition(), i) {
                assert_eq!(
                    i,
                    prev + partitions as u64,
                    "order within partition {}",
                    r.partition()
                );
            }
            assert_eq!(r.key(), e.key.as_deref().map(str::as_bytes), "key of {i}");
            assert_eq!(
                r.value(),
                e.value.as_deref().map(str::as_bytes),
                "value of {i}"
            );
            let headers: Vec<(String, Option<String>)> = r
                .headers()
                .map(|h| {
                    (
                        h.key_str().into_owned(),
                        h.value().map(|v| String::from_utf8(v.to_vec()).unwrap()),
                    )
                })
                .collect();
            assert_eq!(headers, e.headers, "headers of {i}");
            assert!(r.timestamp() > 0);
        }
        total == count
    });
    // Nothing more arrives: no duplicates after the end.
    let extra_recs = c.poll(Duration::from_millis(500)).unwrap();
    assert!(
        extra_recs.is_empty(),
        "{} records after the end",
        extra_recs.len()
    );
    for tp in &tps {
        assert_eq!(c.position(tp).unwrap(), next_offset[&tp.partition()]);
    }
    c.close().unwrap();
}

fn codec_round_trip(codec: &str) {
    let topic = unique_topic(&format!("codec-{codec}"));
    let count = 100_000;
    let mut p = Produce::new(&topic, 6, count);
    p.compression = codec;
    p.value_size = 20;
    p.run();
    consume_and_verify(&topic, 6, count, 20, &[]);
}

#[test]
fn every_record_exactly_once_in_order_uncompressed() {
    codec_round_trip("none");
}

#[test]
fn every_record_exactly_once_in_order_gzip() {
    codec_round_trip("gzip");
}

#[test]
fn every_record_exactly_once_in_order_snappy() {
    codec_round_trip("snappy");
}

#[test]
fn every_record_exactly_once_in_order_lz4() {
    codec_round_trip("lz4");
}

#[test]
fn every_record_exactly_once_in_order_zstd() {
    codec_round_trip("zstd");
}

#[test]
fn small_poll_batches_and_crc_checks_off_still_deliver_everything() {
    let topic = unique_topic("small-polls");
    Produce::new(&topic, 3, 3_000).run();
    // Tiny fetches and polls exercise partial chunks, many fetch-session round trips and
    // the prefetch budget.
    consume_and_verify(
        &topic,
        3,
        3_000,
        0,
        &[
            ("max.poll.records", "7"),
            ("max.partition.fetch.bytes", "1000"),
            ("fetch.buffer.bytes", "131072"),
            ("check.crcs", "false"),
        ],
    );
}

#[test]
fn poll_returns_at_most_max_poll_records() {
    let topic = unique_topic("max-poll");
    Produce::new(&topic, 1, 1_000).run();
    let mut c = consumer(&[("max.poll.records", "33")]);
    c.assign(&all_partitions(&topic, 1)).unwrap();
    let mut got = 0;
    poll_until(&mut c, Duration::from_secs(30), "1000 records", |recs| {
        assert!(recs.len() <= 33, "poll returned {}", recs.len());
        got += recs.len();
        got == 1_000
    });
}

/// Sequence numbers delivered from a transactional topic at one isolation level.
fn read_all_seqs(topic: &str, isolation: &str, expect: usize) -> Vec<u64> {
    let mut c = consumer(&[("isolation.level", isolation)]);
    c.assign(&all_partitions(topic, 1)).unwrap();
    let mut seqs = Vec::new();
    poll_until(
        &mut c,
        Duration::from_secs(30),
        "transactional records",
        |recs| {
            for r in recs {
                seqs.push(seq(&r));
            }
            seqs.len() >= expect
        },
    );
    let more = c.poll(Duration::from_millis(1000)).unwrap();
    seqs.extend(more.iter().map(|r| seq(&r)));
    seqs
}

#[test]
fn read_committed_hides_aborted_transactions_and_read_uncommitted_shows_them() {
    let topic = unique_topic("txn");
    Produce::new(&topic, 1, 100).run();
    let mut p = Produce::new(&topic, 1, 100);
    p.start = 100;
    p.txn = Some(("it-txn-a", "commit"));
    p.run();
    p.start = 200;
    p.txn = Some(("it-txn-b", "abort"));
    p.compression = "lz4";
    p.run();
    p.start = 300;
    p.txn = Some(("it-txn-a", "commit"));
    p.compression = "none";
    p.run();

    let committed = read_all_seqs(&topic, "read_committed", 300);
    let want: Vec<u64> = (0..200).chain(300..400).collect();
    assert_eq!(
        committed, want,
        "read_committed sees committed and plain records only"
    );

    let all = read_all_seqs(&topic, "read_uncommitted", 400);
    assert_eq!(
        all,
        (0..400).collect::<Vec<u64>>(),
        "read_uncommitted sees aborted records too"
    );

    // Control records take offsets but are never delivered; the end offset counts them.
    let mut c = consumer(&[("isolation.level", "read_committed")]);
    let tp = TopicPartition::new(topic.as_str(), 0);
    let end = c.end_offsets(std::slice::from_ref(&tp)).unwrap()[&tp];
    assert!(
        end >= 403,
        "end offset {end} includes three transaction markers"
    );
}

#[test]
fn seek_and_seek_to_end_and_beginning_behave_like_the_java_client() {
    let topic = unique_topic("seek");
    Produce::new(&topic, 1, 1_000).run();
    let tp = TopicPartition::new(topic.as_str(), 0);
    let mut c = consumer(&[]);
    c.assign(std::slice::from_ref(&tp)).unwrap();

    c.seek(&tp, 500).unwrap();
    assert_eq!(c.position(&tp).unwrap(), 500);
    let mut first = None;
    poll_until(
        &mut c,
        Duration::from_secs(30),
        "records after seek",
        |recs| {
            first = recs.iter().next().map(|r| (r.offset(), seq(&r)));
            first.is_some()
        },
    );
    assert_eq!(first, Some((500, 500)));

    c.seek_to_end(std::slice::from_ref(&tp)).unwrap();
    assert_eq!(c.position(&tp).unwrap(), 1_000);
    assert!(c.poll(Duration::from_millis(500)).unwrap().is_empty());
    let mut p = Produce::new(&topic, 1, 10);
    p.start = 1_000;
    p.run();
    let mut offsets = Vec::new();
    poll_until(
        &mut c,
        Duration::from_secs(30),
        "new records after seek_to_end",
        |recs| {
            offsets.extend(recs.iter().map(|r| r.offset()));
            offsets.len() >= 10
        },
    );
    assert_eq!(offsets, (1_000..1_010).collect::<Vec<i64>>());

    c.seek_to_beginning(std::slice::from_ref(&tp)).unwrap();
    assert_eq!(c.position(&tp).unwrap(), 0);
    let mut first = None;
    poll_until(
        &mut c,
        Duration::from_secs(30),
        "records after seek_to_beginning",
        |recs| {
            first = recs.iter().next().map(|r| r.offset());
            first.is_some()
        },
    );
    assert_eq!(first, Some(0));

    // Seeking a partition that is not assigned is an error, as in the Java client.
    let other = TopicPartition::new(topic.as_str(), 7);
    assert_eq!(
        c.seek(&other, 1).unwrap_err().kind(),
        ErrorKind::NotAssigned
    );
}

#[test]
fn pause_stops_a_partition_and_resume_continues_without_gaps_or_duplicates() {
    let topic = unique_topic("pause");
    Produce::new(&topic, 2, 2_000).run();
    let tps = all_partitions(&topic, 2);
    let mut c = consumer(&[("max.poll.records", "100")]);
    c.assign(&tps).unwrap();
    let mut offsets: HashMap<i32, Vec<i64>> = HashMap::new();
    // Read a little of both, then pause partition 0.
    poll_until(&mut c, Duration::from_secs(30), "some records", |recs| {
        for r in recs {
            offsets.entry(r.partition()).or_default().push(r.offset());
        }
        offsets.len() == 2 || offsets.values().map(Vec::len).sum::<usize>() >= 300
    });
    c.pause(&tps[..1]).unwrap();
    assert_eq!(c.paused(), vec![tps[0].clone()]);
    let paused_at = c.position(&tps[0]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        for r in &c.poll(Duration::from_millis(100)).unwrap() {
            assert_eq!(r.partition(), 1, "a paused partition returned a record");
            offsets.entry(1).or_default().push(r.offset());
        }
    }
    assert_eq!(
        c.position(&tps[0]).unwrap(),
        paused_at,
        "pause does not move the position"
    );
    assert_eq!(offsets[&1].len(), 1_000, "the other partition kept going");
    c.resume(&tps[..1]).unwrap();
    assert!(c.paused().is_empty());
    poll_until(
        &mut c,
        Duration::from_secs(30),
        "the rest of partition 0",
        |recs| {
            for r in recs {
                offsets.entry(r.partition()).or_default().push(r.offset());
            }
            offsets.get(&0).map_or(0, Vec::len) >= 1_000
        },
    );
    assert_eq!(
        offsets[&0],
        (0..1_000).collect::<Vec<i64>>(),
        "no gap, no duplicate"
    );
}

#[test]
fn offsets_for_times_and_beginning_and_end_offsets() {
    let topic = unique_topic("times");
    let t0 = 1_700_000_000_000i64;
    let mut p = Produce::new(&topic, 2, 200);
    p.timestamps = Some((t0, 10));
    p.run();
    let tps = all_partitions(&topic, 2);
    let mut c = consumer(&[]);
    let begin = c.beginning_offsets(&tps).unwrap();
    let end = c.end_offsets(&tps).unwrap();
    for tp in &tps {
        assert_eq!(begin[tp], 0);
        assert_eq!(end[tp], 100);
    }
    // Record i has timestamp t0 + 10 i and lands in partition i % 2 at offset i / 2.
    let q: HashMap<TopicPartition, i64> = [
        (tps[0].clone(), t0 + 55),       // first at or after: i = 6 -> offset 3
        (tps[1].clone(), t0 + 10 * 200), // after the last record
    ]
    .into_iter()
    .collect();
    let found = c.offsets_for_times(&q).unwrap();
    let hit = found[&tps[0]].expect("a record at or after the time");
    assert_eq!((hit.offset, hit.timestamp), (3, t0 + 60));
    assert_eq!(found[&tps[1]], None);
    // The timestamp is what the record carries.
    c.assign(&tps[..1]).unwrap();
    c.seek(&tps[0], hit.offset).unwrap();
    let mut ts = None;
    poll_until(
        &mut c,
        Duration::from_secs(30),
        "the record found by time",
        |recs| {
            ts = recs.iter().next().map(|r| (r.offset(), r.timestamp()));
            ts.is_some()
        },
    );
    assert_eq!(ts, Some((3, t0 + 60)));
}

#[test]
fn auto_offset_reset_latest_earliest_and_none() {
    let topic = unique_topic("reset");
    Produce::new(&topic, 1, 100).run();
    let tp = TopicPartition::new(topic.as_str(), 0);
    let one = std::slice::from_ref(&tp);

    // latest: start at the end and see only new records.
    let mut latest = consumer(&[("auto.offset.reset", "latest")]);
    latest.assign(one).unwrap();
    assert_eq!(latest.position(&tp).unwrap(), 100);
    let mut p = Produce::new(&topic, 1, 5);
    p.start = 100;
    p.run();
    let mut seqs = Vec::new();
    poll_until(
        &mut latest,
        Duration::from_secs(30),
        "new records",
        |recs| {
            seqs.extend(recs.iter().map(|r| seq(&r)));
            seqs.len() >= 5
        },
    );
    assert_eq!(seqs, (100..105).collect::<Vec<u64>>());

    // earliest: start at 0; an out-of-range seek resets to 0 as well.
    let mut earliest = consumer(&[("auto.offset.reset", "earliest")]);
    earliest.assign(one).unwrap();
    assert_eq!(earliest.position(&tp).unwrap(), 0);
    earliest.seek(&tp, 10_000).unwrap();
    let mut first = None;
    poll_until(
        &mut earliest,
        Duration::from_secs(30),
        "records after reset",
        |recs| {
            first = recs.iter().next().map(|r| r.offset());
            first.is_some()
        },
    );
    assert_eq!(first, Some(0));

    // none: no position is an error from poll; so is an out-of-range offset.
    let mut none = consumer(&[("auto.offset.reset", "none")]);
    none.assign(one).unwrap();
    let e = none.poll(Duration::from_secs(10)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoOffset, "{e}");
    assert_eq!(e.partition(), Some(&tp));
    assert_eq!(none.position(&tp).unwrap_err().kind(), ErrorKind::NoOffset);
    none.seek(&tp, 10_000).unwrap();
    let e = none.poll(Duration::from_secs(10)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OffsetOutOfRange, "{e}");
    assert_eq!(e.partition(), Some(&tp));
    assert_eq!(e.kafka_code(), Some(1));
    // After a valid seek it reads normally.
    none.seek(&tp, 42).unwrap();
    let mut first = None;
    poll_until(
        &mut none,
        Duration::from_secs(30),
        "records after a valid seek",
        |recs| {
            first = recs.iter().next().map(|r| r.offset());
            first.is_some()
        },
    );
    assert_eq!(first, Some(42));
}

#[test]
fn wakeup_interrupts_a_blocked_poll_from_another_thread() {
    let topic = unique_topic("wakeup");
    Produce::new(&topic, 1, 0).run();
    let mut c = consumer(&[]);
    c.assign(&all_partitions(&topic, 1)).unwrap();
    let handle = c.wakeup_handle();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        handle.wakeup();
    });
    let started = Instant::now();
    let e = c.poll(Duration::from_secs(60)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Wakeup);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "poll returned long before its timeout"
    );
    t.join().unwrap();
    // The wakeup is consumed: the next poll works normally.
    assert!(c.poll(Duration::from_millis(200)).unwrap().is_empty());
    // A wakeup while not polling makes the next poll return at once.
    c.wakeup_handle().wakeup();
    assert_eq!(
        c.poll(Duration::from_secs(60)).unwrap_err().kind(),
        ErrorKind::Wakeup
    );
}

#[test]
fn unknown_topics_are_clear_errors() {
    let mut c = consumer(&[]);
    let e = c.partitions_for("no-such-topic-here").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownTopicOrPartition, "{e}");
    let tp = TopicPartition::new("no-such-topic-here", 0);
    let e = c.end_offsets(std::slice::from_ref(&tp)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownTopicOrPartition, "{e}");
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let e = c.poll(Duration::from_secs(20)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownTopicOrPartition, "{e}");
    assert_eq!(e.partition(), Some(&tp));
}

#[test]
fn an_unreachable_broker_times_out_with_a_clear_error() {
    let cfg = kafka_consumer::ConsumerConfig::new("127.0.0.1:1")
        .default_api_timeout(Duration::from_secs(2));
    let mut c = kafka_consumer::Consumer::new(cfg).unwrap();
    let e = c.partitions_for("anything").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
}

#[test]
fn a_dead_bootstrap_server_is_skipped_for_the_next_one() {
    let topic = unique_topic("bootstrap");
    Produce::new(&topic, 2, 10).run();
    let cfg = kafka_consumer::ConsumerConfig::new(&format!("127.0.0.1:1,{}", bootstrap()))
        .default_api_timeout(Duration::from_secs(20));
    let mut c = kafka_consumer::Consumer::new(cfg).unwrap();
    assert_eq!(c.partitions_for(&topic).unwrap(), all_partitions(&topic, 2));
}

#[test]
fn a_slow_application_does_not_make_the_prefetch_buffer_grow() {
    let topic = unique_topic("backpressure");
    let mut p = Produce::new(&topic, 4, 100_000);
    p.value_size = 100; // about 12 MB in all
    p.run();
    let limit = 1024 * 1024;
    let mut c = consumer(&[
        ("fetch.buffer.bytes", &limit.to_string()),
        ("max.partition.fetch.bytes", "262144"),
    ]);
    c.assign(&all_partitions(&topic, 4)).unwrap();
    // The application takes one poll's worth and then does not poll for a while.
    let mut got = 0;
    poll_until(&mut c, Duration::from_secs(30), "a first record", |r| {
        got += r.len();
        got > 0
    });
    std::thread::sleep(Duration::from_secs(3));
    let m = c.metrics();
    assert!(m.prefetched_bytes > 0, "the I/O thread fetched ahead");
    // One response may be in flight when the budget fills: at most 4 x 256 KiB.
    assert!(
        m.prefetched_bytes <= limit + 4 * 262_144,
        "prefetched {} bytes with a budget of {limit}",
        m.prefetched_bytes
    );
    // Everything still arrives, exactly once.
    poll_until(&mut c, Duration::from_secs(60), "all records", |recs| {
        got += recs.len();
        got >= 100_000
    });
    assert_eq!(got, 100_000);
    assert!(c.poll(Duration::from_millis(300)).unwrap().is_empty());
}
