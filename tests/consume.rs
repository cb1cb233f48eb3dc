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
    let mut c = new_consumer(cfg);
    let e = c.partitions_for("anything").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
}

#[test]
fn a_dead_bootstrap_server_is_skipped_for_the_next_one() {
    let topic = unique_topic("bootstrap");
    Produce::new(&topic, 2, 10).run();
    let cfg = kafka_consumer::ConsumerConfig::new(&format!("127.0.0.1:1,{}", bootstrap()))
        .default_api_timeout(Duration::from_secs(20));
    let mut c = new_consumer(cfg);
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

/// Polls for `window` and returns the offsets of every record delivered.
fn offsets_over(c: &mut kafka_consumer::Consumer, window: Duration) -> Vec<i64> {
    let end = Instant::now() + window;
    let mut offsets = Vec::new();
    while Instant::now() < end {
        let recs = c.poll(Duration::from_millis(100)).expect("poll");
        offsets.extend(recs.iter().map(|r| r.offset()));
    }
    offsets
}

/// Polls until `n` records arrived (or panics after 30 s); returns their offsets.
fn take_offsets(c: &mut kafka_consumer::Consumer, n: usize, what: &str) -> Vec<i64> {
    let mut offsets = Vec::new();
    poll_until(c, Duration::from_secs(30), what, |recs| {
        offsets.extend(recs.iter().map(|r| r.offset()));
        offsets.len() >= n
    });
    offsets
}

#[test]
fn seek_to_beginning_then_pause_then_resume_reads_from_the_beginning_exactly_once() {
    let topic = unique_topic("seek-begin-pause");
    Produce::new(&topic, 1, 100).run();
    let tp = TopicPartition::new(topic.as_str(), 0);
    let one = std::slice::from_ref(&tp);
    // auto.offset.reset=latest: falling back to it would read nothing.
    let mut c = consumer(&[("auto.offset.reset", "latest")]);
    c.assign(one).unwrap();
    c.seek(&tp, 0).unwrap();
    assert_eq!(
        take_offsets(&mut c, 100, "the first read"),
        (0..100).collect::<Vec<_>>()
    );
    for poll_while_paused in [false, true] {
        c.seek_to_beginning(one).unwrap();
        c.pause(one).unwrap();
        if poll_while_paused {
            assert!(offsets_over(&mut c, Duration::from_millis(500)).is_empty());
        }
        c.resume(one).unwrap();
        let offsets = take_offsets(&mut c, 100, "the records after resume");
        assert_eq!(
            offsets,
            (0..100).collect::<Vec<_>>(),
            "from the beginning, once (polled while paused: {poll_while_paused})"
        );
        assert!(offsets_over(&mut c, Duration::from_millis(500)).is_empty());
    }
}

#[test]
fn seek_to_end_then_pause_then_resume_delivers_nothing_old() {
    let topic = unique_topic("seek-end-pause");
    Produce::new(&topic, 1, 100).run();
    let tp = TopicPartition::new(topic.as_str(), 0);
    let one = std::slice::from_ref(&tp);
    // auto.offset.reset=earliest: falling back to it would deliver old records.
    let mut c = consumer(&[("max.poll.records", "30")]);
    c.assign(one).unwrap();
    assert_eq!(
        take_offsets(&mut c, 30, "the first read"),
        (0..30).collect::<Vec<_>>()
    );
    for (round, poll_while_paused) in [false, true].into_iter().enumerate() {
        c.seek_to_end(one).unwrap();
        c.pause(one).unwrap();
        if poll_while_paused {
            assert!(offsets_over(&mut c, Duration::from_millis(500)).is_empty());
        }
        c.resume(one).unwrap();
        let old = offsets_over(&mut c, Duration::from_secs(1));
        assert!(old.is_empty(), "old records after seek_to_end: {old:?}");
        let end = 100 + 10 * round as i64;
        assert_eq!(c.position(&tp).unwrap(), end);
        let mut p = Produce::new(&topic, 1, 10);
        p.start = end as u64;
        p.run();
        assert_eq!(
            take_offsets(&mut c, 10, "the new records"),
            (end..end + 10).collect::<Vec<_>>()
        );
    }
}

#[test]
fn seek_on_a_paused_partition_fetches_nothing_until_resume_then_reads_from_the_offset() {
    let topic = unique_topic("seek-paused");
    Produce::new(&topic, 1, 100).run();
    let tp = TopicPartition::new(topic.as_str(), 0);
    let one = std::slice::from_ref(&tp);
    let cfg = kafka_consumer::ConsumerConfig::new(bootstrap())
        .client_id("it")
        .auto_offset_reset(kafka_consumer::OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(30));
    let (mut c, io) = IoThread::of(cfg);
    c.assign(one).unwrap();
    assert_eq!(
        take_offsets(&mut c, 100, "the first read"),
        (0..100).collect::<Vec<_>>()
    );
    c.pause(one).unwrap();
    c.seek(&tp, 30).unwrap();
    assert_eq!(c.position(&tp).unwrap(), 30);
    assert_eq!(
        c.paused(),
        vec![tp.clone()],
        "seek keeps the partition paused"
    );
    assert!(offsets_over(&mut c, Duration::from_secs(1)).is_empty());
    let busy = io.busy_fraction_over(Duration::from_secs(3));
    assert!(
        busy < 0.05,
        "the I/O thread was {:.0}% busy with a paused partition",
        busy * 100.0
    );
    let m = c.metrics();
    assert_eq!(
        (m.prefetched_bytes, m.buffered_records),
        (0, 0),
        "nothing is fetched for a paused partition"
    );
    assert!(offsets_over(&mut c, Duration::from_millis(300)).is_empty());
    c.resume(one).unwrap();
    assert_eq!(
        take_offsets(&mut c, 70, "the records after resume"),
        (30..100).collect::<Vec<_>>()
    );
    assert!(offsets_over(&mut c, Duration::from_millis(500)).is_empty());
}

#[test]
fn with_auto_offset_reset_none_an_out_of_range_seek_on_a_paused_partition_is_reported_after_resume()
{
    let topic = unique_topic("seek-paused-none");
    Produce::new(&topic, 1, 100).run();
    let tp = TopicPartition::new(topic.as_str(), 0);
    let one = std::slice::from_ref(&tp);
    let mut c = consumer(&[("auto.offset.reset", "none")]);
    c.assign(one).unwrap();
    c.seek(&tp, 0).unwrap();
    assert_eq!(
        take_offsets(&mut c, 100, "the first read"),
        (0..100).collect::<Vec<_>>()
    );
    c.pause(one).unwrap();
    c.seek(&tp, 10_000).unwrap();
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        let recs = c
            .poll(Duration::from_millis(100))
            .expect("nothing is reported for a paused partition");
        assert!(recs.is_empty());
    }
    c.resume(one).unwrap();
    let e = c.poll(Duration::from_secs(10)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OffsetOutOfRange, "{e}");
    assert_eq!(e.partition(), Some(&tp));
}

#[test]
fn pause_or_resume_with_an_unassigned_partition_fails_and_changes_nothing() {
    let topic = unique_topic("pause-unassigned");
    Produce::new(&topic, 2, 200).run();
    let tps = all_partitions(&topic, 2);
    let other = TopicPartition::new(topic.as_str(), 5);
    let mut c = consumer(&[]);
    c.assign(&tps).unwrap();
    let e = c.pause(&[tps[0].clone(), other.clone()]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotAssigned, "{e}");
    assert_eq!(e.partition(), Some(&other));
    assert!(c.paused().is_empty(), "pause paused {:?}", c.paused());
    // Both partitions are still fetched.
    let mut per: HashMap<i32, usize> = HashMap::new();
    poll_until(&mut c, Duration::from_secs(30), "both partitions", |recs| {
        for r in recs {
            *per.entry(r.partition()).or_default() += 1;
        }
        per.values().sum::<usize>() >= 200
    });
    assert_eq!(per.get(&0), Some(&100));
    assert_eq!(per.get(&1), Some(&100));

    c.pause(&tps).unwrap();
    let e = c.resume(&[tps[0].clone(), other.clone()]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotAssigned, "{e}");
    assert_eq!(c.paused(), tps, "resume resumed some");
}

#[test]
fn held_consumer_records_stop_the_prefetch_within_the_budget_and_dropping_them_lets_it_finish() {
    let topic = unique_topic("held");
    let total = 20_000usize;
    let mut p = Produce::new(&topic, 2, total as u64);
    p.value_size = 100;
    p.run();
    let budget = 256 * 1024;
    let partition_max = 64 * 1024;
    let cfg = kafka_consumer::ConsumerConfig::new(bootstrap())
        .client_id("it")
        .auto_offset_reset(kafka_consumer::OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(30))
        .fetch_buffer_bytes(budget)
        .max_partition_fetch_bytes(partition_max as i32)
        .set("max.poll.records", "200")
        .unwrap();
    let (mut c, io) = IoThread::of(cfg);
    c.assign(&all_partitions(&topic, 2)).unwrap();

    let mut next: HashMap<i32, i64> = HashMap::new();
    let mut check = |recs: &kafka_consumer::ConsumerRecords| {
        for r in recs {
            let want = next.entry(r.partition()).or_insert(0);
            assert_eq!(
                r.offset(),
                *want,
                "partition {}: exactly once, in order",
                r.partition()
            );
            *want += 1;
        }
        recs.len()
    };
    // Keep every ConsumerRecords (and an owned copy of some records).
    let mut held = Vec::new();
    let mut copies = Vec::new();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let recs = c.poll(Duration::from_millis(200)).unwrap();
        if recs.is_empty() && c.metrics().fetch_blocked_by_memory {
            break;
        }
        got += check(&recs);
        copies.extend(recs.iter().step_by(37).map(|r| r.to_owned_record()));
        held.push(recs);
        assert!(
            got < total,
            "everything arrived while held: fetching never stopped"
        );
        assert!(
            Instant::now() < deadline,
            "fetching never stopped for memory"
        );
    }
    // Fetching has stopped: nothing more arrives, the thread is idle, and the memory held
    // is the budget plus at most one response (half the budget, plus one whole batch the
    // broker returns beyond the limit).
    assert!(offsets_over(&mut c, Duration::from_millis(500)).is_empty());
    let busy = io.busy_fraction_over(Duration::from_secs(3));
    assert!(
        busy < 0.05,
        "the I/O thread was {:.0}% busy while blocked by memory",
        busy * 100.0
    );
    let m = c.metrics();
    assert!(m.fetch_blocked_by_memory);
    assert!(
        m.prefetched_bytes <= budget + budget / 2 + 2 * partition_max,
        "holding {got} records pins {} bytes with a budget of {budget}",
        m.prefetched_bytes
    );
    eprintln!(
        "held {got} records in {} polls: {} bytes (budget {budget})",
        held.len(),
        m.prefetched_bytes
    );

    // Dropping them lets consumption finish, exactly once.
    drop(held);
    poll_until(&mut c, Duration::from_secs(60), "the rest", |recs| {
        got += check(recs);
        got >= total
    });
    assert_eq!(got, total);
    assert!(offsets_over(&mut c, Duration::from_millis(500)).is_empty());
    assert!(!c.metrics().fetch_blocked_by_memory);

    // The owned copies outlived their ConsumerRecords.
    assert!(copies.len() > 10);
    for r in &copies {
        let i = std::str::from_utf8(r.headers[0].1.as_deref().unwrap())
            .unwrap()
            .parse::<u64>()
            .unwrap();
        let e = expected(i, 2, 100);
        assert_eq!(r.topic_partition.partition(), e.partition);
        assert_eq!(r.offset, (i / 2) as i64);
        assert_eq!(r.key.as_deref(), e.key.as_deref().map(str::as_bytes));
        assert_eq!(r.value.as_deref(), e.value.as_deref().map(str::as_bytes));
        let headers: Vec<(String, Option<String>)> = r
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    String::from_utf8(k.clone()).unwrap(),
                    v.as_ref().map(|v| String::from_utf8(v.clone()).unwrap()),
                )
            })
            .collect();
        assert_eq!(headers, e.headers);
    }
}

/// The metrics of the one partition of a single-partition consumer.
fn partition_metrics(c: &mut kafka_consumer::Consumer) -> kafka_consumer::PartitionMetrics {
    let m = c.partition_metrics();
    assert_eq!(m.len(), 1);
    m[0].clone()
}

/// Waits (without polling) until the partition's metrics satisfy `f`.
fn metrics_until(
    c: &mut kafka_consumer::Consumer,
    what: &str,
    f: impl Fn(&kafka_consumer::PartitionMetrics) -> bool,
) -> kafka_consumer::PartitionMetrics {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = partition_metrics(c);
        if f(&m) {
            return m;
        }
        assert!(Instant::now() < deadline, "{what}: {m:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn metrics_report_the_end_offset_and_the_lag_as_records_are_consumed() {
    let topic = unique_topic("lag");
    let n = 1_000i64;
    Produce::new(&topic, 1, n as u64).run();
    let mut c = consumer(&[("max.poll.records", "100")]);
    let tp = TopicPartition::new(topic.as_str(), 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let mut k = 0i64;
    poll_until(&mut c, Duration::from_secs(30), "the first records", |r| {
        k += r.len() as i64;
        k > 0
    });
    assert!(k < n);
    let m = metrics_until(&mut c, "the end offset", |m| m.end_offset == Some(n));
    assert_eq!(m.partition, tp);
    assert_eq!(m.position, Some(k));
    assert_eq!(m.lag, Some(n - k), "{m:?}");
    assert!(!m.paused);
    poll_until(&mut c, Duration::from_secs(30), "the rest", |r| {
        k += r.len() as i64;
        k >= n
    });
    assert_eq!(k, n);
    let m = partition_metrics(&mut c);
    assert_eq!(
        (m.position, m.end_offset, m.lag),
        (Some(n), Some(n), Some(0))
    );
    assert_eq!(m.buffered_records, 0);
}

#[test]
fn under_read_committed_the_end_offset_is_the_last_stable_offset_of_an_open_transaction() {
    let topic = unique_topic("lso");
    Produce::new(&topic, 1, 100).run();
    let mut p = Produce::new(&topic, 1, 50);
    p.start = 100;
    let txn_id = format!("it-{topic}");
    p.txn = Some((&txn_id, "commit"));
    let open = p.hold_open();
    let tp = TopicPartition::new(topic.as_str(), 0);
    let one = std::slice::from_ref(&tp);

    let mut committed = consumer(&[("isolation.level", "read_committed")]);
    committed.assign(one).unwrap();
    assert_eq!(
        take_offsets(&mut committed, 100, "the committed records").len(),
        100
    );
    assert!(offsets_over(&mut committed, Duration::from_millis(500)).is_empty());
    let m = metrics_until(&mut committed, "the last stable offset", |m| {
        m.end_offset == Some(100)
    });
    assert_eq!(m.lag, Some(0), "{m:?}");
    assert_eq!(committed.end_offsets(one).unwrap()[&tp], 100);

    let mut uncommitted = consumer(&[]);
    uncommitted.assign(one).unwrap();
    assert_eq!(
        take_offsets(&mut uncommitted, 150, "every record").len(),
        150
    );
    let m = metrics_until(&mut uncommitted, "the high watermark", |m| {
        m.end_offset == Some(150)
    });
    assert_eq!(m.lag, Some(0), "{m:?}");
    assert_eq!(uncommitted.end_offsets(one).unwrap()[&tp], 150);

    // Committing the transaction moves the last stable offset past its marker.
    open.finish();
    let offsets = take_offsets(&mut committed, 50, "the transaction's records");
    assert_eq!(offsets, (100..150).collect::<Vec<_>>());
    let m = metrics_until(&mut committed, "the end after the marker", |m| {
        m.end_offset == Some(151) && m.lag == Some(0)
    });
    assert_eq!(m.position, Some(151), "{m:?}");
}
