//! The accounting behind [`Metrics`]: statistics over a sliding window as the Java client
//! keeps them, and the figures each side of the consumer keeps with them. Sans-IO: every
//! call takes `now`; the I/O thread keeps an [`IoStats`] behind a lock it shares with the
//! user side (`src/io/handle.rs`), the user side a [`UserStats`] of its own.
//!
//! A windowed statistic is Java's `SampledStat` with the client's defaults
//! (`metrics.num.samples=2`, `metrics.sample.window.ms=30000`):
//!
//! ```text
//!   time ─▶   ├── sample ──┤├── sample ──┤├── sample (current) ──▶ now
//!                  30 s          30 s        < 30 s
//!             dropped once its last event is 60 s old; rates divide by the time since
//!             the oldest sample kept began (at least 30 s, as Java's `Rate` does)
//! ```
//!
//! Invariants:
//! 1. Recording is O(1) (O(log n) for [`Extremes`], n the distinct values) and reading an
//!    aggregate never walks partitions: what depends on every partition (the largest lag,
//!    the smallest lead) is kept as partitions change.
//! 2. Reading changes nothing: a sample too old to count is skipped, not reset, so any
//!    number of readers see the same figures for the same `now`.
//! 3. A statistic with no sample in the window has no value (`None`), as Java's NaN; a
//!    rate over an empty window is 0.
//! 4. A rebalance completes or fails only once it started, and a second start while one is
//!    under way is ignored: its duration runs from the first.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::group::member::RebalancePhase;
use crate::link::{Lane, Peer, Route};
use crate::metrics::{BrokerMetrics, ConnectionState, Metrics};

/// How long one sample lasts (Java's `metrics.sample.window.ms` default).
pub(crate) const SAMPLE_WINDOW: Duration = Duration::from_secs(30);

/// How many samples a statistic counts (Java's `metrics.num.samples` default).
pub(crate) const SAMPLES: u32 = 2;

/// One sample of a windowed statistic: the events recorded from `start` on.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start: Instant,
    /// The last event recorded (or `start`): the sample counts until this is
    /// `SAMPLES * SAMPLE_WINDOW` old.
    last: Instant,
    count: u64,
    sum: f64,
    max: f64,
}

impl Sample {
    fn new(now: Instant) -> Sample {
        Sample {
            start: now,
            last: now,
            count: 0,
            sum: 0.0,
            max: f64::NEG_INFINITY,
        }
    }

    fn counts_at(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last) < SAMPLE_WINDOW * SAMPLES
    }
}

/// A statistic over the last minute or so: count, sum, average, maximum and rates of the
/// values recorded (Java's `SampledStat`; it keeps one sample more than it counts, the one
/// being filled).
#[derive(Debug, Clone, Default)]
pub(crate) struct Windowed {
    samples: [Option<Sample>; SAMPLES as usize + 1],
    /// The sample being filled.
    current: usize,
}

impl Windowed {
    /// Records `value` at `now`.
    pub fn record(&mut self, value: f64, now: Instant) {
        let full = self.samples[self.current]
            .is_some_and(|s| now.saturating_duration_since(s.start) >= SAMPLE_WINDOW);
        if full {
            self.current = (self.current + 1) % self.samples.len();
            self.samples[self.current] = None;
        }
        let s = self.samples[self.current].get_or_insert_with(|| Sample::new(now));
        s.count += 1;
        s.sum += value;
        s.max = s.max.max(value);
        s.last = now;
    }

    /// The samples that count at `now` (invariant 2).
    fn counted(&self, now: Instant) -> impl Iterator<Item = &Sample> {
        self.samples
            .iter()
            .flatten()
            .filter(move |s| s.counts_at(now))
    }

    /// Events in the window.
    pub fn count(&self, now: Instant) -> u64 {
        self.counted(now).map(|s| s.count).sum()
    }

    /// The sum of the values in the window.
    pub fn sum(&self, now: Instant) -> f64 {
        self.counted(now).map(|s| s.sum).sum()
    }

    /// The mean of the values in the window.
    pub fn avg(&self, now: Instant) -> Option<f64> {
        let count = self.count(now);
        (count > 0).then(|| self.sum(now) / count as f64)
    }

    /// The largest value in the window.
    pub fn max(&self, now: Instant) -> Option<f64> {
        self.counted(now)
            .filter(|s| s.count > 0)
            .map(|s| s.max)
            .reduce(f64::max)
    }

    /// The time the rates divide by: since the oldest sample counted began, and at least
    /// `SAMPLES - 1` whole windows (Java's `Rate.windowSize`: samples missing at the start
    /// count as empty ones).
    fn span(&self, now: Instant) -> Duration {
        let elapsed = self
            .counted(now)
            .map(|s| now.saturating_duration_since(s.start))
            .max()
            .unwrap_or(Duration::ZERO);
        let whole =
            u32::try_from(elapsed.as_nanos() / SAMPLE_WINDOW.as_nanos()).unwrap_or(u32::MAX);
        if whole < SAMPLES - 1 {
            elapsed + SAMPLE_WINDOW * (SAMPLES - 1 - whole)
        } else {
            elapsed
        }
    }

    /// Events per `unit` (Java's `Rate` over a `WindowedCount`).
    pub fn count_rate(&self, now: Instant, unit: Duration) -> f64 {
        self.count(now) as f64 / self.span(now).div_duration_f64(unit)
    }

    /// Recorded values per `unit` (Java's `Rate` over a `WindowedSum`).
    pub fn sum_rate(&self, now: Instant, unit: Duration) -> f64 {
        self.sum(now) / self.span(now).div_duration_f64(unit)
    }
}

/// A count of events since the start and their latencies over the window: how many there
/// were (`-total`), how often (`-rate`) and how long they took (`-latency-avg`, `-max`).
#[derive(Debug, Clone, Default)]
pub(crate) struct LatencySensor {
    total: u64,
    /// Latencies in milliseconds.
    window: Windowed,
}

impl LatencySensor {
    pub fn record(&mut self, latency: Duration, now: Instant) {
        self.total += 1;
        self.window.record(millis(latency), now);
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Events per second.
    pub fn rate(&self, now: Instant) -> f64 {
        self.window.count_rate(now, SECOND)
    }

    pub fn avg(&self, now: Instant) -> Option<Duration> {
        self.window.avg(now).map(from_millis)
    }

    pub fn max(&self, now: Instant) -> Option<Duration> {
        self.window.max(now).map(from_millis)
    }
}

/// A total since the start and its rate over the window (Java's `Meter`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Meter {
    total: u64,
    window: Windowed,
}

impl Meter {
    pub fn record(&mut self, amount: u64, now: Instant) {
        self.total += amount;
        self.window.record(amount as f64, now);
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Amount per second.
    pub fn rate(&self, now: Instant) -> f64 {
        self.window.sum_rate(now, SECOND)
    }
}

/// The values some partitions have now, counted by value: the largest and the smallest in
/// O(log n) of the distinct values (most partitions share a lag of 0).
#[derive(Debug, Clone, Default)]
pub(crate) struct Extremes {
    counts: BTreeMap<i64, usize>,
}

impl Extremes {
    /// One partition's value went from `old` to `new` (`None`: it has none).
    pub fn replace(&mut self, old: Option<i64>, new: Option<i64>) {
        if old == new {
            return;
        }
        if let Some(o) = old {
            if let Some(n) = self.counts.get_mut(&o) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&o);
                }
            }
        }
        if let Some(n) = new {
            *self.counts.entry(n).or_default() += 1;
        }
    }

    pub fn max(&self) -> Option<i64> {
        self.counts.last_key_value().map(|(v, _)| *v)
    }

    pub fn min(&self) -> Option<i64> {
        self.counts.first_key_value().map(|(v, _)| *v)
    }
}

/// How long the consumer went without partitions while subscribed: stretches that ended,
/// and the one under way.
#[derive(Debug, Clone, Default)]
pub(crate) struct UnassignedClock {
    past: Duration,
    since: Option<Instant>,
}

impl UnassignedClock {
    /// From `now` on the consumer is (`true`) or is not without partitions.
    pub fn set(&mut self, unassigned: bool, now: Instant) {
        match (unassigned, self.since) {
            (true, None) => self.since = Some(now),
            (false, Some(since)) => {
                self.past += now.saturating_duration_since(since);
                self.since = None;
            }
            _ => {}
        }
    }

    /// The time without partitions up to `now`.
    pub fn total(&self, now: Instant) -> Duration {
        self.past
            + self
                .since
                .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }
}

/// What the user side counts: records and bytes `poll` returned, the lag and lead of the
/// assigned partitions, and the time without partitions.
#[derive(Debug, Default)]
pub(crate) struct UserStats {
    pub records: Meter,
    pub bytes: Meter,
    pub lags: Extremes,
    pub leads: Extremes,
    pub unassigned: UnassignedClock,
}

impl UserStats {
    /// `poll` returned `records` records of `bytes` bytes (each record's size in its
    /// batch, as Java's `bytes-consumed` counts it).
    pub fn consumed(&mut self, records: u64, bytes: u64, now: Instant) {
        if records > 0 {
            self.records.record(records, now);
            self.bytes.record(bytes, now);
        }
    }

    /// Writes the user side's figures into `m`.
    pub fn fill(&self, m: &mut Metrics, now: Instant) {
        m.records_consumed_total = self.records.total();
        m.records_consumed_rate = self.records.rate(now);
        m.bytes_consumed_total = self.bytes.total();
        m.bytes_consumed_rate = self.bytes.rate(now);
        m.records_lag_max = self.lags.max();
        m.records_lead_min = self.leads.min();
        m.unassigned_time_total = self.unassigned.total(now);
    }
}

/// Rebalances of the group member: how many completed and how long they took, how many
/// failed, when the last one ended (invariant 4).
#[derive(Debug, Clone, Default)]
pub(crate) struct RebalanceStats {
    under_way: Option<Instant>,
    last_end: Option<Instant>,
    last_took: Option<Duration>,
    completed: LatencySensor,
    latency_total: Duration,
    failed: LatencySensor,
}

impl RebalanceStats {
    pub fn record(&mut self, phase: RebalancePhase, now: Instant) {
        match phase {
            RebalancePhase::Started => {
                self.under_way.get_or_insert(now);
            }
            RebalancePhase::Completed => {
                if let Some(start) = self.under_way.take() {
                    let took = now.saturating_duration_since(start);
                    self.completed.record(took, now);
                    self.latency_total += took;
                    self.last_end = Some(now);
                    self.last_took = Some(took);
                }
            }
            RebalancePhase::Failed => {
                if self.under_way.take().is_some() {
                    self.failed.record(Duration::ZERO, now);
                }
            }
        }
    }

    fn fill(&self, m: &mut Metrics, now: Instant) {
        m.rebalance_total = self.completed.total();
        m.rebalance_rate_per_hour = self.completed.window.count_rate(now, HOUR);
        m.rebalance_latency_avg = self.completed.avg(now);
        m.rebalance_latency_max = self.completed.max(now);
        m.rebalance_latency_total = self.latency_total;
        m.last_rebalance_latency = self.last_took;
        m.last_rebalance_seconds_ago = self
            .last_end
            .map(|t| now.saturating_duration_since(t).as_secs());
        m.failed_rebalance_total = self.failed.total();
        m.failed_rebalance_rate_per_hour = self.failed.window.count_rate(now, HOUR);
    }
}

/// The node id a peer's metrics go by, as the Java client names them: the broker's id, and
/// for the i-th bootstrap server (counted from 0) `-(i + 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct MetricsNodeId(i32);

impl MetricsNodeId {
    fn of(peer: Peer) -> MetricsNodeId {
        match peer {
            Peer::Node(n) => MetricsNodeId(n.0),
            Peer::Bootstrap(i) => MetricsNodeId(-1 - i32::try_from(i).unwrap_or(i32::MAX - 1)),
        }
    }
}

/// Where one of a broker's connections is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum LinkState {
    #[default]
    Closed,
    /// Being set up (resolving, connecting, TLS, ApiVersions, SASL).
    Connecting,
    /// Ready for requests.
    Ready,
}

/// One broker's requests, answers and connections.
#[derive(Debug, Clone, Default)]
struct NodeStats {
    /// Requests sent, by size in bytes.
    sent: Windowed,
    requests_total: u64,
    bytes_out_total: u64,
    /// Responses received, by size in bytes.
    received: Windowed,
    responses_total: u64,
    bytes_in_total: u64,
    /// Response latencies in milliseconds.
    latency: Windowed,
    /// One connection per lane (fetch, control, group, join).
    links: [LinkState; 4],
}

impl NodeStats {
    fn state(&self) -> ConnectionState {
        if self.links.contains(&LinkState::Ready) {
            ConnectionState::Connected
        } else if self.links.contains(&LinkState::Connecting) {
            ConnectionState::Connecting
        } else {
            ConnectionState::Disconnected
        }
    }

    fn ready_links(&self) -> usize {
        self.links
            .iter()
            .filter(|l| **l == LinkState::Ready)
            .count()
    }
}

fn lane_slot(lane: Lane) -> usize {
    match lane {
        Lane::Fetch => 0,
        Lane::Control => 1,
        Lane::Group => 2,
        Lane::Join => 3,
    }
}

/// What the I/O thread counts: per broker, requests, answers, bytes and connections;
/// fetch and commit answers; the member's rebalances. Each call is O(log b) for b brokers.
#[derive(Debug, Default)]
pub(crate) struct IoStats {
    nodes: BTreeMap<MetricsNodeId, NodeStats>,
    fetches: LatencySensor,
    commits: LatencySensor,
    rebalances: RebalanceStats,
    connections_created: u64,
    connections_closed: u64,
}

impl IoStats {
    fn node(&mut self, route: Route) -> &mut NodeStats {
        self.nodes.entry(MetricsNodeId::of(route.peer)).or_default()
    }

    /// A request of `bytes` bytes (its frame, size prefix included) was queued on `route`.
    pub fn request_sent(&mut self, route: Route, bytes: usize, now: Instant) {
        let n = self.node(route);
        n.requests_total += 1;
        n.bytes_out_total += bytes as u64;
        n.sent.record(bytes as f64, now);
    }

    /// A response of `bytes` bytes arrived on `route`, `latency` after its request was
    /// queued.
    pub fn response_received(
        &mut self,
        route: Route,
        bytes: usize,
        latency: Duration,
        now: Instant,
    ) {
        let n = self.node(route);
        n.responses_total += 1;
        n.bytes_in_total += bytes as u64;
        n.received.record(bytes as f64, now);
        n.latency.record(millis(latency), now);
    }

    /// A connection for `route` is being set up (replacing any it had).
    pub fn connecting(&mut self, route: Route) {
        self.closed(route);
        self.node(route).links[lane_slot(route.lane)] = LinkState::Connecting;
    }

    /// `route`'s connection is ready for requests.
    pub fn connected(&mut self, route: Route) {
        self.connections_created += 1;
        self.node(route).links[lane_slot(route.lane)] = LinkState::Ready;
    }

    /// `route`'s connection closed (or its setup failed).
    pub fn closed(&mut self, route: Route) {
        let slot = &mut self.node(route).links[lane_slot(route.lane)];
        let was = std::mem::take(slot);
        if was == LinkState::Ready {
            self.connections_closed += 1;
        }
    }

    /// A Fetch was answered `latency` after it was sent.
    pub fn fetch_answered(&mut self, latency: Duration, now: Instant) {
        self.fetches.record(latency, now);
    }

    /// An OffsetCommit was answered `latency` after it was sent.
    pub fn commit_answered(&mut self, latency: Duration, now: Instant) {
        self.commits.record(latency, now);
    }

    /// The group member's rebalance reached `phase`.
    pub fn rebalance(&mut self, phase: RebalancePhase, now: Instant) {
        self.rebalances.record(phase, now);
    }

    /// Writes the I/O thread's figures into `m`: O(brokers).
    pub fn fill(&self, m: &mut Metrics, now: Instant) {
        m.fetch_total = self.fetches.total();
        m.fetch_rate = self.fetches.rate(now);
        m.fetch_latency_avg = self.fetches.avg(now);
        m.fetch_latency_max = self.fetches.max(now);
        m.commit_total = self.commits.total();
        m.commit_rate = self.commits.rate(now);
        m.commit_latency_avg = self.commits.avg(now);
        m.commit_latency_max = self.commits.max(now);
        self.rebalances.fill(m, now);
        m.connection_creation_total = self.connections_created;
        m.connection_close_total = self.connections_closed;
        m.connection_count = self.nodes.values().map(NodeStats::ready_links).sum();
        m.brokers = self
            .nodes
            .iter()
            .map(|(id, n)| BrokerMetrics {
                node_id: id.0,
                connection_state: n.state(),
                connection_count: n.ready_links(),
                request_total: n.requests_total,
                request_rate: n.sent.count_rate(now, SECOND),
                request_latency_avg: n.latency.avg(now).map(from_millis),
                request_latency_max: n.latency.max(now).map(from_millis),
                response_total: n.responses_total,
                response_rate: n.received.count_rate(now, SECOND),
                outgoing_byte_total: n.bytes_out_total,
                outgoing_byte_rate: n.sent.sum_rate(now, SECOND),
                incoming_byte_total: n.bytes_in_total,
                incoming_byte_rate: n.received.sum_rate(now, SECOND),
            })
            .collect();
    }
}

const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn from_millis(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(Duration::ZERO)
}
