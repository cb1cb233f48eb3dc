//! Settings at their edges, through the public API: what can never work is rejected by
//! `Consumer::new` / `ConsumerConfig::from_properties` with an error naming the setting
//! and the reason; the longest durations are accepted and work without panicking.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kafka_consumer::{Consumer, ConsumerConfig, ErrorKind, OffsetReset, TopicPartition};

/// The error from building a consumer out of these properties (from `from_properties`, or
/// else from `Consumer::new`).
fn rejection(props: &[(&str, &str)]) -> kafka_consumer::Error {
    match ConsumerConfig::from_properties(props.iter().copied()) {
        Err(e) => e,
        Ok(cfg) => match Consumer::new(cfg) {
            Err(e) => e,
            Ok(_) => panic!("{props:?} was accepted"),
        },
    }
}

fn assert_names(e: &kafka_consumer::Error, setting: &str, reason: &str) {
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    let text = e.to_string();
    assert!(text.contains(setting), "names {setting}: {text}");
    assert!(text.contains(reason), "says `{reason}`: {text}");
}

#[test]
fn settings_that_can_never_work_are_rejected_naming_the_setting_and_the_reason() {
    let e = rejection(&[
        ("bootstrap.servers", bootstrap()),
        ("request.timeout.ms", "0"),
    ]);
    assert_names(&e, "request.timeout.ms", "no answer could ever arrive");
    let e = Consumer::new(ConsumerConfig::new(bootstrap()).request_timeout(Duration::ZERO))
        .unwrap_err();
    assert_names(&e, "request.timeout.ms", "no answer could ever arrive");

    for (server, reason) in [
        (
            "SSL://host:9093",
            "uses SSL, which this client does not support",
        ),
        ("http://host:9092", "unknown scheme `http://`"),
        ("a:b:9092", "more than one `:`"),
        ("host:0", "port 0"),
    ] {
        let e = rejection(&[("bootstrap.servers", server)]);
        assert_names(&e, "bootstrap.servers", reason);
        assert!(e.to_string().contains(server), "{e}");
        // The same through the builder, and second in a list.
        let list = format!("{},{server}", bootstrap());
        let e = Consumer::new(ConsumerConfig::new(&list)).unwrap_err();
        assert_names(&e, "bootstrap.servers", reason);
    }
}

/// Wakes a consumer up from another thread after a delay, unless dropped first (a
/// watchdog for calls that could block for ever).
struct WakeAfter {
    cancel: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn wake_after(c: &Consumer, after: Duration) -> WakeAfter {
    let handle = c.wakeup_handle();
    let (cancel, cancelled) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = cancelled.recv_timeout(after) {
            handle.wakeup();
        }
    });
    WakeAfter {
        cancel: Some(cancel),
        thread: Some(thread),
    }
}

impl Drop for WakeAfter {
    fn drop(&mut self) {
        drop(self.cancel.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn poll_with_duration_max_returns_records_or_a_wakeup() {
    let topic = unique_topic("poll-max");
    Produce::new(&topic, 1, 0).run();
    let mut c = consumer(&[]);
    c.assign(&all_partitions(&topic, 1)).unwrap();
    let waker = wake_after(&c, Duration::from_millis(300));
    let started = Instant::now();
    let e = c.poll(Duration::MAX).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Wakeup);
    assert!(started.elapsed() < Duration::from_secs(20));
    drop(waker);

    Produce::new(&topic, 1, 5).run();
    // A watchdog turns a poll that never returns into a failure.
    let watchdog = wake_after(&c, Duration::from_secs(60));
    let mut got = 0;
    while got < 5 {
        got += c
            .poll(Duration::MAX)
            .expect("records, not the watchdog")
            .len();
    }
    assert_eq!(got, 5);
    c.close_timeout(Duration::MAX).unwrap();
    drop(watchdog);
}

#[test]
fn every_duration_setter_takes_duration_max_without_panicking() {
    let topic = unique_topic("duration-max");
    Produce::new(&topic, 1, 10).run();
    let tp = TopicPartition::new(topic.as_str(), 0);
    let one = std::slice::from_ref(&tp);
    let max = Duration::MAX;

    // Timeouts, waits, ages and reconnect backoffs at their longest: everything works.
    let cfg = ConsumerConfig::new(bootstrap())
        .auto_offset_reset(OffsetReset::Earliest)
        .request_timeout(max)
        .default_api_timeout(max)
        .fetch_max_wait(max)
        .metadata_max_age(max)
        .connection_setup_timeout(max)
        .reconnect_backoff(max, max);
    let mut c = Consumer::new(cfg).unwrap();
    let watchdog = wake_after(&c, Duration::from_secs(60));
    c.assign(one).unwrap();
    let mut got = 0;
    while got < 10 {
        got += c.poll(max).expect("records, not the watchdog").len();
    }
    assert_eq!(c.end_offsets(one).unwrap()[&tp], 10);
    assert_eq!(c.beginning_offsets(one).unwrap()[&tp], 0);
    assert_eq!(c.partitions_for(&topic).unwrap(), vec![tp.clone()]);
    assert_eq!(c.position(&tp).unwrap(), 10);
    // A fetch that may wait for ever is in flight: close does not wait for it.
    let started = Instant::now();
    c.close_timeout(max).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(watchdog);

    // Every setter at once, retry backoffs too (metadata refreshes are then spaced by
    // ~25 days, so the topic's metadata may never come): calls return, nothing panics.
    let cfg = ConsumerConfig::new(bootstrap())
        .request_timeout(max)
        .default_api_timeout(max)
        .fetch_max_wait(max)
        .metadata_max_age(max)
        .connection_setup_timeout(max)
        .reconnect_backoff(max, max)
        .retry_backoff(max)
        .retry_backoff_max(max);
    let mut c = Consumer::new(cfg).unwrap();
    c.assign(one).unwrap();
    assert!(c.poll(Duration::from_millis(500)).is_ok());
    let waker = wake_after(&c, Duration::from_millis(500));
    match c.end_offsets(one) {
        Ok(end) => assert_eq!(end[&tp], 10),
        Err(e) => assert_eq!(e.kind(), ErrorKind::Wakeup, "{e}"),
    }
    drop(waker);
    let _ = c.poll(Duration::ZERO);
    let started = Instant::now();
    c.close_timeout(max).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
}
