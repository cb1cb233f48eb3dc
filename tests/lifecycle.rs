//! Closing: `close_timeout` returns promptly whatever the I/O thread is waiting for, and a
//! consumer that is closed or dropped leaves no I/O thread behind.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kafka_consumer::{ConsumerConfig, OffsetReset};

#[test]
fn close_timeout_returns_promptly_with_a_fetch_long_poll_in_flight_and_ends_the_thread() {
    let topic = unique_topic("close-fetching");
    Produce::new(&topic, 2, 0).run();
    let cfg = ConsumerConfig::new(bootstrap())
        .auto_offset_reset(OffsetReset::Earliest)
        .fetch_max_wait(Duration::from_secs(30));
    let (mut c, io) = IoThread::of(cfg);
    let tps = all_partitions(&topic, 2);
    c.assign(&tps).unwrap();
    for tp in &tps {
        assert_eq!(c.position(tp).unwrap(), 0);
    }
    // The broker now holds a fetch for up to 30 s.
    assert!(c.poll(Duration::from_millis(300)).unwrap().is_empty());
    let started = Instant::now();
    c.close_timeout(Duration::from_secs(20)).unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "close took {took:?}");
    assert!(!io.is_running(), "the I/O thread outlived close_timeout");
}

#[test]
fn close_timeout_returns_promptly_while_a_broker_name_is_being_resolved() {
    // With the `testing` feature, names under hang.invalid take 20 s to fail to resolve.
    let cfg = ConsumerConfig::new("broker.hang.invalid:9092");
    let (mut c, io) = IoThread::of(cfg);
    // The resolution is under way.
    assert!(c.poll(Duration::from_millis(300)).unwrap().is_empty());
    let started = Instant::now();
    c.close_timeout(Duration::from_secs(20)).unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "close took {took:?}");
    assert!(!io.is_running(), "the I/O thread outlived close_timeout");
}

#[test]
fn a_dropped_consumer_joins_its_io_thread() {
    let topic = unique_topic("drop-joins");
    Produce::new(&topic, 1, 100).run();
    let cfg = ConsumerConfig::new(bootstrap()).auto_offset_reset(OffsetReset::Earliest);
    let (mut c, io) = IoThread::of(cfg);
    c.assign(&all_partitions(&topic, 1)).unwrap();
    let mut got = 0;
    poll_until(&mut c, Duration::from_secs(30), "records", |r| {
        got += r.len();
        got >= 100
    });
    assert!(io.is_running());
    let started = Instant::now();
    drop(c);
    assert!(
        !io.is_running(),
        "the I/O thread still runs when drop returns"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}
