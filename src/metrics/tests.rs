//! The accounting behind the metrics on a simulated clock: windowed rates, averages and
//! maxima as the Java client computes them, the largest lag and smallest lead kept as
//! partitions change, rebalances, connection states per broker, and the names exporters
//! get.

use std::time::Duration;

use super::stats::{Extremes, IoStats, UnassignedClock, UserStats, Windowed};
use super::*;
use crate::group::member::RebalancePhase::{self, *};
use crate::link::{Lane, Peer, Route};
use crate::sim::{ms, Clock};
use crate::types::NodeId;

const SECOND: Duration = Duration::from_secs(1);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

// ----- windowed statistics ----------------------------------------------------------------

#[test]
fn a_rate_in_the_first_seconds_divides_by_the_time_elapsed_plus_one_window_as_java_does() {
    let mut clock = Clock::new();
    let mut w = Windowed::default();
    // 30 events a second for 10 s.
    for _ in 0..10 {
        for _ in 0..30 {
            w.record(1.0, clock.now());
        }
        clock.advance(SECOND);
    }
    // Java: 300 events over 10 s elapsed + 30 s for the missing earlier window.
    let rate = w.count_rate(clock.now(), SECOND);
    assert!(close(rate, 300.0 / 40.0), "{rate}");
}

#[test]
fn a_steady_rate_reads_as_itself_once_a_window_has_passed() {
    let mut clock = Clock::new();
    let mut w = Windowed::default();
    for _ in 0..300 {
        for _ in 0..10 {
            w.record(2.0, clock.now());
            clock.advance(ms(100));
        }
    }
    let now = clock.now();
    let events = w.count_rate(now, SECOND);
    let sum = w.sum_rate(now, SECOND);
    // 10 events of 2 a second; the window holds between 60 and 90 s of them.
    assert!((events - 10.0).abs() < 0.2, "{events}");
    assert!((sum - 20.0).abs() < 0.4, "{sum}");
}

#[test]
fn a_burst_fades_from_the_rate_after_two_windows_and_the_stats_have_no_value() {
    let mut clock = Clock::new();
    let mut w = Windowed::default();
    for v in [10.0, 30.0] {
        w.record(v, clock.now());
    }
    let now = clock.now();
    assert_eq!(w.avg(now), Some(20.0));
    assert_eq!(w.max(now), Some(30.0));
    assert_eq!(w.count(now), 2);
    clock.advance(secs(59));
    assert_eq!(w.count(clock.now()), 2, "still within the two windows");
    clock.advance(secs(1));
    let now = clock.now();
    assert_eq!((w.count(now), w.avg(now), w.max(now)), (0, None, None));
    assert_eq!(w.count_rate(now, SECOND), 0.0);
}

#[test]
fn a_value_counts_until_its_sample_saw_no_event_for_two_windows() {
    let mut clock = Clock::new();
    let mut w = Windowed::default();
    w.record(500.0, clock.now());
    // A value every 30 s from then on, each in a sample of its own.
    clock.advance(secs(30));
    w.record(7.0, clock.now());
    clock.advance(secs(29));
    assert_eq!(w.max(clock.now()), Some(500.0));
    clock.advance(secs(1));
    w.record(7.0, clock.now());
    assert_eq!(w.max(clock.now()), Some(7.0));
    assert_eq!(w.count(clock.now()), 2);
}

#[test]
fn reading_changes_nothing() {
    let mut clock = Clock::new();
    let mut w = Windowed::default();
    w.record(4.0, clock.now());
    clock.advance(secs(45));
    w.record(6.0, clock.now());
    let later = clock.now() + secs(20);
    let first = (w.count(later), w.sum(later), w.count_rate(later, SECOND));
    assert_eq!(first.0, 1, "the first sample is over");
    // A read in between, at an earlier instant, does not drop anything.
    assert_eq!(w.count(clock.now()), 2);
    assert_eq!(
        (w.count(later), w.sum(later), w.count_rate(later, SECOND)),
        first
    );
}

// ----- lag and lead -------------------------------------------------------------------------

#[test]
fn extremes_follow_each_partitions_value_as_it_changes_and_leaves() {
    let mut e = Extremes::default();
    assert_eq!((e.max(), e.min()), (None, None));
    // Three partitions: lags 5, 0, 5.
    e.replace(None, Some(5));
    e.replace(None, Some(0));
    e.replace(None, Some(5));
    assert_eq!((e.max(), e.min()), (Some(5), Some(0)));
    // One of the 5s catches up: another partition still lags 5.
    e.replace(Some(5), Some(0));
    assert_eq!(e.max(), Some(5));
    // The other leaves the assignment.
    e.replace(Some(5), None);
    assert_eq!((e.max(), e.min()), (Some(0), Some(0)));
    e.replace(Some(0), Some(0));
    e.replace(Some(0), None);
    e.replace(Some(0), None);
    assert_eq!((e.max(), e.min()), (None, None));
}

#[test]
fn records_consumed_count_polls_with_records_and_their_rates_follow_the_clock() {
    let mut clock = Clock::new();
    let mut s = UserStats::default();
    for _ in 0..60 {
        s.consumed(100, 5_000, clock.now());
        s.consumed(0, 0, clock.now());
        clock.advance(SECOND);
    }
    let mut m = Metrics::empty("c");
    s.fill(&mut m, clock.now());
    assert_eq!(
        (m.records_consumed_total, m.bytes_consumed_total),
        (6_000, 300_000)
    );
    assert!((m.records_consumed_rate - 100.0).abs() < 1.0, "{m:?}");
    assert!((m.bytes_consumed_rate - 5_000.0).abs() < 50.0, "{m:?}");
}

#[test]
fn time_without_partitions_adds_the_stretches_and_the_one_under_way() {
    let mut clock = Clock::new();
    let mut u = UnassignedClock::default();
    u.set(true, clock.now());
    clock.advance(ms(300));
    u.set(false, clock.now());
    clock.advance(secs(10));
    u.set(false, clock.now());
    u.set(true, clock.now());
    clock.advance(ms(200));
    u.set(true, clock.now());
    clock.advance(ms(50));
    assert_eq!(u.total(clock.now()), ms(550));
}

// ----- rebalances -----------------------------------------------------------------------------

#[test]
fn rebalances_count_from_their_start_to_their_end_and_a_second_start_changes_nothing() {
    let mut clock = Clock::new();
    let mut io = IoStats::default();
    let steps: [(Duration, RebalancePhase); 7] = [
        (ms(0), Started),
        (ms(40), Started), // MEMBER_ID_REQUIRED's second JoinGroup: the same rebalance
        (ms(80), Completed),
        (secs(10), Completed), // none under way: nothing
        (ms(0), Started),
        (ms(120), Failed),
        (ms(0), Failed), // none under way: nothing
    ];
    for (after, phase) in steps {
        clock.advance(after);
        io.rebalance(phase, clock.now());
    }
    clock.advance(ms(0));
    io.rebalance(Started, clock.now());
    clock.advance(ms(200));
    io.rebalance(Completed, clock.now());
    clock.advance(ms(2_500));
    let mut m = Metrics::empty("c");
    io.fill(&mut m, clock.now());
    assert_eq!(m.rebalance_total, 2);
    assert_eq!(m.failed_rebalance_total, 1);
    assert_eq!(m.rebalance_latency_total, ms(320));
    assert_eq!(m.rebalance_latency_max, Some(ms(200)));
    assert_eq!(m.rebalance_latency_avg, Some(ms(160)));
    assert_eq!(m.last_rebalance_latency, Some(ms(200)));
    assert_eq!(m.last_rebalance_seconds_ago, Some(2));
    // Two since the first ended 12.82 s ago, plus the window Java adds before the first
    // window is full.
    assert!(
        close(m.rebalance_rate_per_hour, 2.0 * 3600.0 / 42.82),
        "{m:?}"
    );
}

#[test]
fn before_any_rebalance_the_member_reports_none_as_java_reports_minus_one() {
    let clock = Clock::new();
    let mut m = Metrics::empty("c");
    IoStats::default().fill(&mut m, clock.now());
    assert_eq!(m.last_rebalance_seconds_ago, None);
    let ago = m
        .iter()
        .find(|x| x.name == "last-rebalance-seconds-ago")
        .expect("listed");
    assert_eq!(ago.value, -1.0);
}

// ----- brokers ------------------------------------------------------------------------------

fn node(n: i32, lane: Lane) -> Route {
    Route::node(NodeId(n), lane)
}

#[test]
fn a_broker_is_connected_while_any_of_its_connections_is_ready() {
    let mut io = IoStats::default();
    let now = Clock::new().now();
    let state = |io: &IoStats, id: i32| {
        let mut m = Metrics::empty("c");
        io.fill(&mut m, now);
        let b = m.brokers.iter().find(|b| b.node_id == id).cloned();
        (b.map(|b| (b.connection_state, b.connection_count)), m)
    };
    io.connecting(node(1, Lane::Fetch));
    assert_eq!(state(&io, 1).0, Some((ConnectionState::Connecting, 0)));
    io.connected(node(1, Lane::Fetch));
    io.connecting(node(1, Lane::Control));
    assert_eq!(state(&io, 1).0, Some((ConnectionState::Connected, 1)));
    io.connected(node(1, Lane::Control));
    io.closed(node(1, Lane::Fetch));
    let (b, m) = state(&io, 1);
    assert_eq!(b, Some((ConnectionState::Connected, 1)));
    assert_eq!(
        (
            m.connection_creation_total,
            m.connection_close_total,
            m.connection_count
        ),
        (2, 1, 1)
    );
    // A setup that fails closes no ready connection.
    io.connecting(node(2, Lane::Group));
    io.closed(node(2, Lane::Group));
    io.closed(node(1, Lane::Control));
    let (b, m) = state(&io, 2);
    assert_eq!(b, Some((ConnectionState::Disconnected, 0)));
    assert_eq!((m.connection_close_total, m.connection_count), (2, 0));
    assert_eq!(state(&io, 1).0, Some((ConnectionState::Disconnected, 0)));
}

#[test]
fn requests_and_answers_count_per_broker_with_their_latency_and_bytes() {
    let mut clock = Clock::new();
    let mut io = IoStats::default();
    let bootstrap = Route {
        peer: Peer::Bootstrap(0),
        lane: Lane::Control,
    };
    io.request_sent(bootstrap, 60, clock.now());
    clock.advance(ms(5));
    io.response_received(bootstrap, 400, ms(5), clock.now());
    for latency in [ms(500), ms(100)] {
        io.request_sent(node(3, Lane::Fetch), 100, clock.now());
        clock.advance(latency);
        io.response_received(node(3, Lane::Fetch), 1_000, latency, clock.now());
        io.fetch_answered(latency, clock.now());
    }
    io.commit_answered(ms(7), clock.now());
    let mut m = Metrics::empty("c");
    io.fill(&mut m, clock.now());
    let ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id).collect();
    assert_eq!(
        ids,
        vec![-1, 3],
        "the first bootstrap server is node -1, as in Java"
    );
    let b = &m.brokers[1];
    assert_eq!((b.request_total, b.response_total), (2, 2), "{b:?}");
    assert_eq!((b.outgoing_byte_total, b.incoming_byte_total), (200, 2_000));
    assert_eq!(b.request_latency_avg, Some(ms(300)));
    assert_eq!(b.request_latency_max, Some(ms(500)));
    // Since the first answer 100 ms ago, plus the window Java adds at first.
    assert!(close(b.incoming_byte_rate, 2_000.0 / 30.1), "{b:?}");
    assert_eq!(m.fetch_total, 2);
    assert_eq!(m.fetch_latency_max, Some(ms(500)));
    assert_eq!((m.commit_total, m.commit_latency_avg), (1, Some(ms(7))));
}

// ----- the list for exporters ----------------------------------------------------------------

#[test]
fn every_figure_is_listed_under_its_java_group_and_name_with_its_tags() {
    let now = Clock::new().now();
    let mut io = IoStats::default();
    io.connected(node(1, Lane::Fetch));
    io.fetch_answered(ms(20), now);
    let mut m = Metrics::empty("app-1");
    io.fill(&mut m, now);
    m.records_consumed_total = 42;
    m.records_lag_max = Some(3);
    let list: Vec<Metric> = m.iter().collect();
    let find = |group: &str, name: &str| {
        list.iter()
            .find(|x| x.group == group && x.name == name)
            .unwrap_or_else(|| panic!("{group} {name} missing"))
    };
    let consumed = find("consumer-fetch-manager-metrics", "records-consumed-total");
    assert_eq!(consumed.value, 42.0);
    assert_eq!(consumed.kind, MetricKind::Counter);
    assert_eq!(consumed.tags, vec![("client-id", "app-1".to_owned())]);
    assert_eq!(
        find("consumer-fetch-manager-metrics", "fetch-latency-avg").value,
        20.0
    );
    assert_eq!(
        find("consumer-fetch-manager-metrics", "records-lag-max").value,
        3.0
    );
    assert!(find("consumer-fetch-manager-metrics", "records-lead-min")
        .value
        .is_nan());
    assert!(find("consumer-coordinator-metrics", "commit-latency-max")
        .value
        .is_nan());
    let state = find("consumer-node-metrics", "connection-state");
    assert_eq!(state.value, 2.0);
    assert_eq!(
        state.tags,
        vec![
            ("client-id", "app-1".to_owned()),
            ("node-id", "node-1".to_owned())
        ]
    );
    for x in &list {
        assert_eq!(
            x.kind == MetricKind::Counter,
            x.name.ends_with("-total"),
            "{}: counters, and only they, end in -total",
            x.name
        );
    }
    let mut names: Vec<(&str, &str)> = list.iter().map(|x| (x.group, x.name)).collect();
    let all = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all, "one broker: every name once");

    let parts = vec![PartitionMetrics {
        partition: TopicPartition::new("orders", 2),
        position: Some(10),
        end_offset: Some(15),
        log_start_offset: Some(4),
        lag: Some(5),
        lead: Some(6),
        buffered_records: 0,
        paused: false,
        fetched_from: None,
    }];
    let per: Vec<Metric> = m.iter_partitions(&parts).collect();
    let named: Vec<(&str, f64)> = per.iter().map(|x| (x.name, x.value)).collect();
    assert_eq!(named, vec![("records-lag", 5.0), ("records-lead", 6.0)]);
    let tags = vec![
        ("client-id", "app-1".to_owned()),
        ("topic", "orders".to_owned()),
        ("partition", "2".to_owned()),
    ];
    assert!(per.iter().all(|x| x.tags == tags), "{per:?}");
}
