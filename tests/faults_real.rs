//! Faults and edge settings against the real broker: a topic deleted (and recreated) while
//! consumed, zero backoffs, offset lookups beside fetch long-polls, wakeups of blocked
//! calls. Each checks what a user sees (errors once, records exactly once) and that the
//! I/O thread stays idle when there is nothing to do.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use kafka_consumer::{Consumer, ConsumerConfig, ErrorKind, OffsetReset, TopicPartition};

fn config() -> ConsumerConfig {
    ConsumerConfig::new(bootstrap())
        .client_id("it")
        .auto_offset_reset(OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(30))
}

/// Polls for `window`, returning every error; records are a failure.
fn errors_over(c: &mut Consumer, window: Duration) -> Vec<kafka_consumer::Error> {
    let end = Instant::now() + window;
    let mut errors = Vec::new();
    while Instant::now() < end {
        match c.poll(Duration::from_millis(100)) {
            Ok(recs) => assert!(recs.is_empty(), "{} unexpected records", recs.len()),
            Err(e) => errors.push(e),
        }
    }
    errors
}

#[test]
fn a_deleted_topic_is_reported_once_per_partition_the_thread_idles_and_a_recreated_topic_is_consumed(
) {
    let topic = unique_topic("deleted");
    Produce::new(&topic, 2, 100).run();
    let (mut c, io) = IoThread::of(config());
    let tps = all_partitions(&topic, 2);
    c.assign(&tps).unwrap();
    let mut got = 0;
    poll_until(&mut c, Duration::from_secs(30), "the first records", |r| {
        got += r.len();
        got >= 100
    });
    assert_eq!(got, 100);

    admin("delete-topic", &[("--topic", &topic)]);
    let mut reported: HashMap<TopicPartition, usize> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while reported.len() < tps.len() {
        assert!(
            Instant::now() < deadline,
            "the deletion was reported for {reported:?} only"
        );
        match c.poll(Duration::from_millis(200)) {
            Ok(recs) => assert!(recs.is_empty(), "records from a deleted topic"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::UnknownTopicOrPartition, "{e}");
                let tp = e.partition().expect("the error names the partition");
                *reported.entry(tp.clone()).or_default() += 1;
            }
        }
    }
    // Once per partition, not a flood: nothing more while the topic stays deleted.
    let more = errors_over(&mut c, Duration::from_secs(3));
    assert!(more.is_empty(), "errors after the first report: {more:?}");
    assert!(
        reported.values().all(|n| *n == 1),
        "reported more than once: {reported:?}"
    );
    // The thread waits for the topic with spaced metadata refreshes, not in a loop.
    let busy = io.busy_fraction_over(Duration::from_secs(3));
    assert!(
        busy < 0.05,
        "the I/O thread was {:.0}% busy waiting for a deleted topic",
        busy * 100.0
    );
    let more = errors_over(&mut c, Duration::from_millis(500));
    assert!(more.is_empty(), "errors after the idle window: {more:?}");

    // Recreated (fewer records than were read: the old positions are out of range and
    // auto.offset.reset=earliest starts the new topic from its beginning).
    let mut p = Produce::new(&topic, 2, 10);
    p.start = 1_000;
    p.run();
    let mut seqs = Vec::new();
    poll_until(
        &mut c,
        Duration::from_secs(60),
        "records of the recreated topic",
        |recs| {
            seqs.extend(recs.iter().map(|r| seq(&r)));
            seqs.len() >= 10
        },
    );
    seqs.sort_unstable();
    assert_eq!(seqs, (1_000..1_010).collect::<Vec<u64>>());
    assert!(c.poll(Duration::from_millis(500)).unwrap().is_empty());
    let busy = io.busy_fraction_over(Duration::from_secs(3));
    assert!(
        busy < 0.05,
        "the I/O thread was {:.0}% busy after the topic came back",
        busy * 100.0
    );
}

#[test]
fn zero_reconnect_backoff_and_zero_metadata_max_age_leave_an_idle_consumer_idle() {
    let topic = unique_topic("zero-backoff");
    Produce::new(&topic, 2, 0).run();
    let cfg = (|| {
        config()
            .set("reconnect.backoff.ms", "0")?
            .set("reconnect.backoff.max.ms", "0")?
            .set("metadata.max.age.ms", "0")
    })()
    .unwrap();
    let (mut c, io) = IoThread::of(cfg);
    let tps = all_partitions(&topic, 2);
    c.assign(&tps).unwrap();
    for tp in &tps {
        assert_eq!(c.position(tp).unwrap(), 0);
    }
    // Warm-up: the fetch long-polls are under way.
    assert!(c.poll(Duration::from_secs(1)).unwrap().is_empty());
    let busy = io.busy_fraction_over(Duration::from_secs(3));
    assert!(
        busy < 0.05,
        "the I/O thread was {:.0}% busy on an empty topic",
        busy * 100.0
    );
    // And it still consumes.
    Produce::new(&topic, 2, 6).run();
    let mut got = 0;
    poll_until(&mut c, Duration::from_secs(30), "new records", |r| {
        got += r.len();
        got >= 6
    });
    assert_eq!(got, 6);
}

#[test]
fn offset_lookups_do_not_wait_behind_fetch_long_polls() {
    let topic = unique_topic("lookup-beside-fetch");
    Produce::new(&topic, 2, 0).run();
    let cfg = config().set("fetch.max.wait.ms", "3000").unwrap();
    let mut c = Consumer::new(cfg).unwrap();
    let tps = all_partitions(&topic, 2);
    c.assign(&tps).unwrap();
    for tp in &tps {
        assert_eq!(c.position(tp).unwrap(), 0);
    }
    // The fetch long-polls are in flight (the broker holds them up to 3 s), and the
    // control connection is open.
    assert!(c.poll(Duration::from_millis(300)).unwrap().is_empty());
    assert_eq!(c.end_offsets(&tps).unwrap().len(), 2);

    let started = Instant::now();
    for i in 0..12 {
        let offsets = if i % 2 == 0 {
            c.end_offsets(&tps).unwrap()
        } else {
            c.beginning_offsets(&tps).unwrap()
        };
        for tp in &tps {
            assert_eq!(offsets[tp], 0, "{tp}");
        }
    }
    let took = started.elapsed();
    eprintln!("twelve offset lookups beside fetch long-polls: {took:?}");
    assert!(
        took < Duration::from_millis(1_500),
        "twelve offset lookups took {took:?} beside 3 s fetch long-polls"
    );
}

#[test]
fn wakeup_interrupts_a_blocked_lookup_and_leaves_no_stale_wakeup_behind() {
    // Nothing listens on port 1: every call blocks until its timeout.
    let cfg = ConsumerConfig::new("127.0.0.1:1").default_api_timeout(Duration::from_secs(60));
    let mut c = Consumer::new(cfg).unwrap();
    let tp = TopicPartition::new("t", 0);
    type Call = fn(&mut Consumer, &TopicPartition) -> kafka_consumer::Result<()>;
    let calls: [(&str, Call); 3] = [
        ("end_offsets", |c, tp| {
            c.end_offsets(std::slice::from_ref(tp)).map(|_| ())
        }),
        ("beginning_offsets", |c, tp| {
            c.beginning_offsets(std::slice::from_ref(tp)).map(|_| ())
        }),
        ("partitions_for", |c, tp| {
            c.partitions_for(tp.topic()).map(|_| ())
        }),
    ];
    for (name, call) in calls {
        let handle = c.wakeup_handle();
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            handle.wakeup();
        });
        let started = Instant::now();
        let e = call(&mut c, &tp).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Wakeup, "{name}: {e}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{name} returned {:?} after the wakeup",
            started.elapsed()
        );
        waker.join().unwrap();
        // The wakeup was used up: the next poll is not failed by it.
        let recs = c
            .poll(Duration::from_millis(200))
            .unwrap_or_else(|e| panic!("poll after a woken {name}: {e}"));
        assert!(recs.is_empty());
    }
}
