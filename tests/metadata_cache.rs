//! The blocking calls answer known topics from the metadata cache, against the real broker:
//! `partitions_for` on a topic the consumer already knows costs no Metadata round trip, nor
//! do the offset lookups on it; `partitions_for` on a new topic costs one round trip and
//! never waits a retry backoff. The figures are printed (run with `--nocapture`).
//!
//! Metadata requests are counted from the library's own log line for each one
//! (`metadata request ...`, target `kafka_consumer::cluster`), so the tests of this file run
//! one at a time, each with its own consumer.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use common::*;
use kafka_consumer::{Consumer, TopicPartition};

static METADATA_REQUESTS: AtomicUsize = AtomicUsize::new(0);

struct CountMetadata;

impl log::Log for CountMetadata {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.target() == "kafka_consumer::cluster"
            && r.args().to_string().starts_with("metadata request ")
        {
            METADATA_REQUESTS.fetch_add(1, Ordering::SeqCst);
        }
        if std::env::var_os("TEST_LOG").is_some() {
            eprintln!("{} {}: {}", r.level(), r.target(), r.args());
        }
    }
    fn flush(&self) {}
}

static LOGGER: CountMetadata = CountMetadata;

/// Runs the tests of this file one at a time, counting Metadata requests.
fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        log::set_logger(&LOGGER).expect("no other logger in this test binary");
        log::set_max_level(log::LevelFilter::Debug);
    });
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn metadata_requests() -> usize {
    METADATA_REQUESTS.load(Ordering::SeqCst)
}

/// `n` new topics named after `prefix`, created with `partitions` partitions each.
fn new_topics(prefix: &str, n: usize, partitions: i32) -> Vec<String> {
    let topics: Vec<String> = (0..n)
        .map(|i| unique_topic(&format!("{prefix}{i}")))
        .collect();
    admin(
        "create-topics",
        &[
            ("--topics", &topics.join(",")),
            ("--partitions", &partitions.to_string()),
        ],
    );
    topics
}

/// `partitions_for(topic)`, checked, and how long it took.
fn timed_partitions_for(c: &mut Consumer, topic: &str, partitions: i32) -> Duration {
    let t0 = Instant::now();
    let got = c.partitions_for(topic).expect("partitions_for");
    let took = t0.elapsed();
    assert_eq!(got, all_partitions(topic, partitions), "{topic}");
    took
}

#[test]
fn partitions_for_and_offset_lookups_on_known_topics_take_less_than_one_metadata_round_trip() {
    let _serial = serial();
    let topics = new_topics("known", 5, 3);
    let mut c = consumer(&[]);
    // The first call also waits for the connection; each next new topic costs one
    // Metadata round trip: the shortest is the yardstick.
    timed_partitions_for(&mut c, &topics[0], 3);
    let mut learning = Vec::new();
    for t in &topics[1..] {
        let before = metadata_requests();
        learning.push(timed_partitions_for(&mut c, t, 3));
        assert_eq!(metadata_requests() - before, 1, "{t}: one Metadata request");
    }
    let round_trip = learning.iter().copied().min().expect("samples");

    let before = metadata_requests();
    let t0 = Instant::now();
    let mut calls = Vec::new();
    for i in 0..20 {
        calls.push(timed_partitions_for(&mut c, &topics[i % topics.len()], 3));
    }
    let twenty = t0.elapsed();
    let requests_for_calls = metadata_requests() - before;

    let before = metadata_requests();
    let t0 = Instant::now();
    let mut lookups = Vec::new();
    for t in &topics {
        let tps = all_partitions(t, 3);
        let l0 = Instant::now();
        let begin = c.beginning_offsets(&tps).expect("beginning_offsets");
        let end = c.end_offsets(&tps).expect("end_offsets");
        lookups.push(l0.elapsed());
        for tp in &tps {
            assert_eq!((begin[tp], end[tp]), (0, 0), "{tp}");
        }
    }
    let lookups_took = t0.elapsed();
    let requests_for_lookups = metadata_requests() - before;

    eprintln!(
        "partitions_for on new topics (one Metadata round trip each): {learning:?}; \
         20 calls on known topics: {twenty:?} in all (each {calls:?}), \
         {requests_for_calls} Metadata requests; \
         beginning_offsets + end_offsets on {} known topics: {lookups_took:?} \
         (each pair {lookups:?}), {requests_for_lookups} Metadata requests",
        topics.len()
    );
    assert_eq!(requests_for_calls, 0, "partitions_for on known topics");
    assert!(
        twenty < round_trip,
        "20 partitions_for calls on known topics took {twenty:?}, more than one Metadata \
         round trip ({round_trip:?})"
    );
    assert_eq!(requests_for_lookups, 0, "offset lookups on known topics");
    c.close().expect("close");
}

#[test]
fn partitions_for_on_new_topics_costs_one_round_trip_each_and_never_waits_a_retry_backoff() {
    let _serial = serial();
    let topics = new_topics("fresh", 16, 2);
    let mut c = consumer(&[]);
    // Warm-up: the connection and the consumer's first refresh.
    timed_partitions_for(&mut c, &topics[0], 2);
    let before = metadata_requests();
    let t0 = Instant::now();
    let each: Vec<Duration> = topics[1..]
        .iter()
        .map(|t| timed_partitions_for(&mut c, t, 2))
        .collect();
    let total = t0.elapsed();
    let requests = metadata_requests() - before;
    eprintln!(
        "partitions_for on 15 new topics, one after the other: {total:?} in all, \
         {requests} Metadata requests; each {each:?}"
    );
    // retry.backoff.ms, the default: the refresh spacing starts there.
    let retry_backoff = Duration::from_millis(100);
    assert!(
        each.iter().all(|d| *d < retry_backoff),
        "a call waited a retry backoff ({retry_backoff:?}): {each:?}"
    );
    assert_eq!(requests, 15, "one Metadata request per new topic");
    // Known now: asked again, each is answered from the cache.
    let t0 = Instant::now();
    for t in &topics[1..] {
        timed_partitions_for(&mut c, t, 2);
    }
    let again = t0.elapsed();
    eprintln!("the same 15 topics again: {again:?} in all");
    assert_eq!(
        metadata_requests() - before,
        15,
        "no request the second time"
    );
    c.close().expect("close");
}

#[test]
fn partitions_for_a_topic_that_does_not_exist_is_still_an_error_and_then_sees_it_created() {
    let _serial = serial();
    let mut c = consumer(&[]);
    let topic = unique_topic("later");
    let e = c.partitions_for(&topic).expect_err("no such topic yet");
    assert_eq!(
        e.kind(),
        kafka_consumer::ErrorKind::UnknownTopicOrPartition,
        "{e}"
    );
    admin(
        "create-topics",
        &[("--topics", &topic), ("--partitions", "2")],
    );
    // The failure is not answered from the cache: the next call asks again.
    assert_eq!(
        c.partitions_for(&topic).expect("created"),
        vec![
            TopicPartition::new(topic.as_str(), 0),
            TopicPartition::new(topic.as_str(), 1)
        ]
    );
    c.close().expect("close");
}
