//! `Consumer::metrics` and `Consumer::partition_metrics` against the real broker, checked
//! as a user would check them: the records and bytes consumed are what `poll` returned
//! (the bytes as the Java consumer counts the same records), lag and lead follow the
//! position, fetches, requests and connections are counted per broker, commits and
//! rebalances of a group member (both protocols) are counted and timed, and `metrics`
//! neither waits for the I/O thread nor takes records away from `poll`.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use kafka_consumer::{ConnectionState, Consumer, Metrics, TopicPartition};

/// Keys, values, header keys and header values of the records `poll` returned: a lower
/// bound of the bytes consumed (their sizes in the batches add framing).
fn payload(r: &kafka_consumer::Record<'_>) -> u64 {
    let headers: usize = r
        .headers()
        .map(|h| h.key().len() + h.value().map_or(0, <[u8]>::len))
        .sum();
    (r.key().map_or(0, <[u8]>::len) + r.value().map_or(0, <[u8]>::len) + headers) as u64
}

/// The one real broker of the snapshot (the bootstrap server is listed too, as node -1).
fn broker(m: &Metrics) -> &kafka_consumer::BrokerMetrics {
    let real: Vec<_> = m.brokers.iter().filter(|b| b.node_id >= 0).collect();
    assert_eq!(real.len(), 1, "{:?}", m.brokers);
    real[0]
}

/// What the Java consumer reports after reading the first `count` records of `topic`:
/// its records-consumed-total and bytes-consumed-total.
fn java_consumed(topic: &str, partitions: i32, count: u64) -> (u64, u64) {
    let out = admin(
        "consume-metrics",
        &[
            ("--topic", topic),
            ("--partitions", &partitions.to_string()),
            ("--count", &count.to_string()),
        ],
    );
    let line = last_line(&out);
    let f: Vec<u64> = line
        .strip_prefix("consumed ")
        .unwrap_or_else(|| panic!("unexpected output {out}"))
        .split(' ')
        .map(|x| x.parse().expect("a number"))
        .collect();
    (f[0], f[1])
}

#[test]
fn records_bytes_lag_lead_and_fetches_are_what_poll_returned_and_the_java_consumer_counts() {
    let topic = unique_topic("metrics");
    let total = 2_000u64;
    Produce {
        value_size: 100,
        ..Produce::new(&topic, 2, total)
    }
    .run();
    // Partition 1 loses its first 100 records: its log starts at 100.
    let out = admin(
        "delete-records",
        &[
            ("--topic", &topic),
            ("--partition", "1"),
            ("--before", "100"),
        ],
    );
    assert_eq!(last_line(&out), "log start 100");
    let readable = total - 100;

    let mut c = consumer(&[("max.poll.records", "100")]);
    let tps = all_partitions(&topic, 2);
    c.assign(&tps).unwrap();
    let mut got = 0u64;
    let mut bytes_at_least = 0u64;
    poll_until(&mut c, Duration::from_secs(30), "a first poll", |recs| {
        got += recs.len() as u64;
        bytes_at_least += recs.iter().map(|r| payload(&r)).sum::<u64>();
        got > 0
    });

    // Behind: each partition's lag is its end minus its position, and the lead is the
    // position minus the log start (partition 1 starts at its log start, 100).
    for tp in &tps {
        c.position(tp).unwrap();
    }
    let parts = metrics_once_ends_known(&mut c);
    let ends = c.end_offsets(&tps).unwrap();
    for p in &parts {
        let pos = p.position.expect("position");
        let end = ends[&p.partition];
        assert_eq!(p.end_offset, Some(end), "{p:?}");
        assert_eq!(p.lag, Some(end - pos), "{p:?}");
        let start = if p.partition.partition() == 1 { 100 } else { 0 };
        assert_eq!(p.log_start_offset, Some(start), "{p:?}");
        assert_eq!(p.lead, Some(pos - start), "{p:?}");
    }
    let m = c.metrics();
    let most = parts.iter().filter_map(|p| p.lag).max();
    let least = parts.iter().filter_map(|p| p.lead).min();
    assert!(most > Some(0), "behind: {parts:?}");
    assert_eq!((m.records_lag_max, m.records_lead_min), (most, least));

    poll_until(&mut c, Duration::from_secs(60), "every record", |recs| {
        got += recs.len() as u64;
        bytes_at_least += recs.iter().map(|r| payload(&r)).sum::<u64>();
        got >= readable
    });
    assert_eq!(got, readable);

    // Caught up: no lag; the lead is everything read.
    let parts = c.partition_metrics();
    assert!(parts.iter().all(|p| p.lag == Some(0)), "{parts:?}");
    let m = c.metrics();
    assert_eq!(m.records_lag_max, Some(0), "{m:?}");
    assert_eq!(
        m.records_lead_min,
        Some(900),
        "partition 1 read from 100 to 1000"
    );
    assert_eq!(m.assigned_partitions, 2);

    assert_eq!(m.records_consumed_total, readable);
    assert!(m.records_consumed_rate > 0.0);
    let (java_records, java_bytes) = java_consumed(&topic, 2, readable);
    assert_eq!(
        java_records, readable,
        "the Java consumer read the same records"
    );
    assert_eq!(
        m.bytes_consumed_total, java_bytes,
        "bytes-consumed-total as the Java consumer counts the same records"
    );
    assert!(
        m.bytes_consumed_total > bytes_at_least,
        "{} bytes consumed, {bytes_at_least} of keys, values and headers alone",
        m.bytes_consumed_total
    );
    assert!(m.bytes_consumed_rate > 0.0);

    assert!(m.fetch_total > 0 && m.fetch_rate > 0.0, "{m:?}");
    let (avg, max) = (m.fetch_latency_avg.unwrap(), m.fetch_latency_max.unwrap());
    assert!(avg <= max && max < Duration::from_secs(10), "{m:?}");

    let b = broker(&m);
    assert_eq!(b.connection_state, ConnectionState::Connected, "{b:?}");
    assert!(b.connection_count >= 1, "{b:?}");
    assert!(b.request_total >= m.fetch_total, "{b:?}");
    assert!(b.response_total >= m.fetch_total, "{b:?}");
    assert!(
        b.incoming_byte_total > m.bytes_consumed_total / 2,
        "the fetch responses carried the records: {b:?}"
    );
    assert!(
        b.outgoing_byte_total > 0 && b.request_latency_avg.is_some(),
        "{b:?}"
    );
    assert!(
        m.connection_count >= 1 && m.connection_creation_total >= 2,
        "{m:?}"
    );

    // The list for exporters carries the same figures under the Java names.
    let listed = m
        .iter()
        .find(|x| x.group == "consumer-fetch-manager-metrics" && x.name == "records-consumed-total")
        .expect("listed");
    assert_eq!(listed.value, readable as f64);
    assert_eq!(listed.tags, vec![("client-id", "it".to_owned())]);
    let lags: Vec<(String, f64)> = m
        .iter_partitions(&parts)
        .filter(|x| x.name == "records-lead")
        .map(|x| (x.tags[2].1.clone(), x.value))
        .collect();
    assert_eq!(
        lags,
        vec![("0".to_owned(), 1000.0), ("1".to_owned(), 900.0)]
    );
}

/// Partition metrics once every partition's position and end are known (the end of a
/// partition comes with its first fetch answer).
fn metrics_once_ends_known(c: &mut Consumer) -> Vec<kafka_consumer::PartitionMetrics> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let parts = c.partition_metrics();
        if parts
            .iter()
            .all(|p| p.position.is_some() && p.end_offset.is_some() && p.log_start_offset.is_some())
        {
            return parts;
        }
        assert!(Instant::now() < deadline, "{parts:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn metrics_answer_at_once_without_polling_and_leave_every_record_to_poll() {
    let topic = unique_topic("metrics-snap");
    Produce::new(&topic, 1, 500).run();
    let mut c = consumer(&[]);
    c.assign(&[TopicPartition::new(topic.as_str(), 0)]).unwrap();

    // Without a poll, the I/O thread's figures show up: it fetched.
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.metrics().fetch_total == 0 || c.metrics().prefetched_bytes == 0 {
        assert!(Instant::now() < deadline, "{:?}", c.metrics());
        std::thread::sleep(Duration::from_millis(10));
    }

    // A scrape loop: many snapshots, none waiting for the I/O thread.
    let start = Instant::now();
    let mut fetches = 0;
    for _ in 0..10_000 {
        let m = c.metrics();
        assert_eq!(m.records_consumed_total, 0, "nothing polled yet");
        fetches = fetches.max(m.fetch_total);
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "10,000 snapshots took {took:?}"
    );
    assert!(fetches > 0);
    eprintln!("10,000 metrics() calls: {took:?}");

    // Every record is still there for poll, once.
    let mut offsets = Vec::new();
    poll_until(&mut c, Duration::from_secs(30), "all 500", |recs| {
        offsets.extend(recs.iter().map(|r| r.offset()));
        offsets.len() >= 500
    });
    assert_eq!(offsets, (0..500).collect::<Vec<i64>>());
    assert_eq!(c.metrics().records_consumed_total, 500);
}

#[test]
fn a_group_member_counts_its_rebalances_commits_and_time_without_partitions() {
    for protocol in ["classic", "consumer"] {
        let topic = unique_topic("metrics-group");
        Produce::new(&topic, 3, 30).run();
        let group = unique_topic("metrics-g");
        let mut c = consumer(&[
            ("group.id", &group),
            ("group.protocol", protocol),
            ("enable.auto.commit", "false"),
        ]);
        let subscribed = Instant::now();
        c.subscribe(&[&topic]).unwrap();
        let mut got = 0;
        poll_until(
            &mut c,
            Duration::from_secs(60),
            &format!("{protocol}: the 30 records"),
            |recs| {
                got += recs.len();
                got >= 30
            },
        );
        let since = subscribed.elapsed();
        let m = c.metrics();
        assert_eq!(m.assigned_partitions, 3, "{protocol}");
        // (A JoinGroup refused while a fresh broker loads the group's coordinator would
        // count as a failed rebalance, as in Java: not asserted.)
        assert!(m.rebalance_total >= 1, "{protocol}: {m:?}");
        assert!(
            m.last_rebalance_seconds_ago
                .is_some_and(|s| s <= since.as_secs()),
            "{protocol}: {m:?}"
        );
        let took = m.rebalance_latency_max.expect("a rebalance was timed");
        assert!(took <= since, "{protocol}: {took:?} of {since:?}");
        assert!(m.rebalance_latency_total >= took);
        assert!(m.last_rebalance_latency.is_some_and(|l| l <= took));
        // Without partitions from the subscribe until the first assignment.
        assert!(
            m.unassigned_time_total > Duration::ZERO && m.unassigned_time_total <= since,
            "{protocol}: {m:?}"
        );
        let still = m.unassigned_time_total;
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            c.metrics().unassigned_time_total,
            still,
            "{protocol}: owning partitions does not count"
        );

        assert_eq!(m.commit_total, 0, "{protocol}: no commit yet");
        c.commit_sync().unwrap();
        c.commit_sync().unwrap();
        let m = c.metrics();
        assert_eq!(m.commit_total, 2, "{protocol}: {m:?}");
        let (avg, max) = (m.commit_latency_avg.unwrap(), m.commit_latency_max.unwrap());
        assert!(avg <= max && max < Duration::from_secs(10), "{m:?}");
        assert!(m.commit_rate > 0.0);

        // The member's connections: fetches and group requests at least.
        let b = broker(&m);
        assert!(b.connection_count >= 2, "{protocol}: {b:?}");
        let by_name: BTreeMap<&str, f64> = m
            .iter()
            .filter(|x| x.group == "consumer-coordinator-metrics")
            .map(|x| (x.name, x.value))
            .collect();
        assert_eq!(by_name["commit-total"], 2.0);
        assert_eq!(by_name["assigned-partitions"], 3.0);
        assert!(by_name["rebalance-total"] >= 1.0);
        eprintln!(
            "{protocol}: rebalances {} ({} failed) taking {:?} at most, {:?} without partitions, \
             commits {} ({:?} avg)",
            m.rebalance_total, m.failed_rebalance_total, took, still, m.commit_total, avg
        );
        c.close().unwrap();
    }
}
