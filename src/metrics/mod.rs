//! The consumer's metrics as the application sees them: [`Metrics`] (from
//! [`Consumer::metrics`](crate::Consumer::metrics): the whole consumer and each broker) and
//! [`PartitionMetrics`] (from [`Consumer::partition_metrics`](crate::Consumer::partition_metrics)),
//! each figure named after the Java client's metric where it has one, and [`Metric`], the
//! same figures as `(group, name, tags, value)` for exporters.
//!
//! Where the figures come from: the I/O thread counts requests, answers, connections,
//! fetches, commits and rebalances into a structure it shares with the user side, at the
//! points where it does that work anyway (one short lock per request and per answer); the
//! user side counts what `poll` returned and keeps the largest lag and smallest lead as
//! positions and ends change. So [`Consumer::metrics`](crate::Consumer::metrics) costs no
//! round trip to the I/O thread and O(brokers), whatever the number of partitions; only
//! [`Consumer::partition_metrics`](crate::Consumer::partition_metrics) walks the partitions.
//! The accounting, with its windows (Java's: two samples of 30 s), is in `stats.rs`.

pub(crate) mod stats;
#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::types::TopicPartition;

/// Java's metric group of the fetch figures (`consumer-fetch-manager-metrics`).
const FETCH_MANAGER_GROUP: &str = "consumer-fetch-manager-metrics";
/// Java's metric group of the group member's figures (`consumer-coordinator-metrics`).
const COORDINATOR_GROUP: &str = "consumer-coordinator-metrics";
/// Java's metric group of the client-wide connection figures (`consumer-metrics`).
const CONSUMER_GROUP: &str = "consumer-metrics";
/// Java's metric group of the per-broker figures (`consumer-node-metrics`).
const NODE_GROUP: &str = "consumer-node-metrics";

/// A snapshot of the consumer's figures, from [`Consumer::metrics`](crate::Consumer::metrics).
///
/// Rates are per second (per hour where the name says so) over the last minute or so, and
/// latencies are over the same window, as the Java client computes them (two samples of
/// 30 s; a rate during the first 30 s divides by at least 30 s). `None` where the Java
/// client reports NaN: nothing happened in the window. Totals count from the start.
/// [`Metrics::iter`] lists them all under their Java names.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Metrics {
    /// The consumer's `client.id` (the `client-id` tag of every metric).
    pub client_id: String,
    /// Bytes fetched by the I/O thread and not yet released by the application (bounded
    /// by `fetch.buffer.bytes`, plus at most one response in flight). Ours:
    /// `prefetched-bytes`.
    pub prefetched_bytes: usize,
    /// Records handed to this thread and waiting to be returned by `poll` (records the I/O
    /// thread sent since the last call into the consumer are not counted yet; see
    /// [`PartitionMetrics::buffered_records`]). Ours: `buffered-records`.
    pub buffered_records: usize,
    /// Whether fetching has stopped because `fetch.buffer.bytes` is used up: the records
    /// the application still holds (`ConsumerRecords` not yet dropped) and those waiting
    /// to be returned pin that memory. Ours: `fetch-blocked-by-memory`.
    pub fetch_blocked_by_memory: bool,
    /// Records `poll` returned (Java: `records-consumed-total`).
    pub records_consumed_total: u64,
    /// Records `poll` returned per second (Java: `records-consumed-rate`).
    pub records_consumed_rate: f64,
    /// Bytes of the records `poll` returned, each counted as it is stored in its batch
    /// (uncompressed), as the Java client counts them (Java: `bytes-consumed-total`).
    pub bytes_consumed_total: u64,
    /// Those bytes per second (Java: `bytes-consumed-rate`).
    pub bytes_consumed_rate: f64,
    /// Fetch requests answered (Java: `fetch-total`).
    pub fetch_total: u64,
    /// Fetch requests answered per second (Java: `fetch-rate`).
    pub fetch_rate: f64,
    /// Mean time from sending a fetch to its answer (Java: `fetch-latency-avg`); it
    /// includes the broker's wait for data (`fetch.max.wait.ms`).
    pub fetch_latency_avg: Option<Duration>,
    /// Longest such time (Java: `fetch-latency-max`).
    pub fetch_latency_max: Option<Duration>,
    /// The largest [`PartitionMetrics::lag`] of the assigned partitions now (Java:
    /// `records-lag-max`, which is the largest sampled over its window). `None` while no
    /// partition's lag is known.
    pub records_lag_max: Option<i64>,
    /// The smallest [`PartitionMetrics::lead`] of the assigned partitions now (Java:
    /// `records-lead-min`, likewise over its window): how close the slowest partition is
    /// to losing records to retention.
    pub records_lead_min: Option<i64>,
    /// Partitions assigned to this consumer (Java: `assigned-partitions`).
    pub assigned_partitions: usize,
    /// Commit requests answered, automatic ones included (Java: `commit-total`).
    pub commit_total: u64,
    /// Commit requests answered per second (Java: `commit-rate`).
    pub commit_rate: f64,
    /// Mean time from sending a commit to its answer (Java: `commit-latency-avg`).
    pub commit_latency_avg: Option<Duration>,
    /// Longest such time (Java: `commit-latency-max`).
    pub commit_latency_max: Option<Duration>,
    /// Rebalances this member completed (Java: `rebalance-total`). Classic protocol: from
    /// the first JoinGroup to the SyncGroup answer with the new assignment (a
    /// cooperative rebalance that revokes partitions takes two); KIP-848: from the
    /// heartbeat that brought a new target assignment until it is reconciled.
    pub rebalance_total: u64,
    /// Rebalances completed per hour (Java: `rebalance-rate-per-hour`).
    pub rebalance_rate_per_hour: f64,
    /// Mean duration of the rebalances completed (Java: `rebalance-latency-avg`).
    pub rebalance_latency_avg: Option<Duration>,
    /// Longest (Java: `rebalance-latency-max`).
    pub rebalance_latency_max: Option<Duration>,
    /// Time spent in rebalances that completed (Java: `rebalance-latency-total`).
    pub rebalance_latency_total: Duration,
    /// How long the last completed rebalance took, however long ago (ours:
    /// `last-rebalance-latency`, in ms like Java's `rebalance-latency-*`).
    pub last_rebalance_latency: Option<Duration>,
    /// Whole seconds since the last rebalance completed (Java:
    /// `last-rebalance-seconds-ago`, -1 before the first).
    pub last_rebalance_seconds_ago: Option<u64>,
    /// Rebalances that ended without an assignment: an error answer to JoinGroup or
    /// SyncGroup, the member fenced or leaving in the middle (Java:
    /// `failed-rebalance-total`; unlike Java, the JoinGroup answered `MEMBER_ID_REQUIRED`
    /// that starts every new classic member is not counted).
    pub failed_rebalance_total: u64,
    /// Those per hour (Java: `failed-rebalance-rate-per-hour`).
    pub failed_rebalance_rate_per_hour: f64,
    /// Time this consumer was subscribed to a group and owned no partition: joining,
    /// waiting in rebalances, or left without any (ours, no Java equivalent:
    /// `unassigned-time-ms-total`).
    pub unassigned_time_total: Duration,
    /// Connections ready for requests, to all brokers (Java: `connection-count`).
    pub connection_count: usize,
    /// Connections that became ready (Java: `connection-creation-total`).
    pub connection_creation_total: u64,
    /// Ready connections that closed (Java: `connection-close-total`).
    pub connection_close_total: u64,
    /// Per broker the consumer has talked to, sorted by node id.
    pub brokers: Vec<BrokerMetrics>,
}

/// One broker's figures in [`Metrics`] (Java's `consumer-node-metrics`, tagged
/// `node-id`). Requests count every request sent to the broker on any of the consumer's
/// connections to it (fetches, metadata, group requests, and each connection's
/// ApiVersions and SASL exchange).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BrokerMetrics {
    /// The broker's node id; a bootstrap server before the metadata named the brokers
    /// is `-1` for the first, `-2` for the second, and so on (as in Java).
    pub node_id: i32,
    /// Whether the consumer has a connection ready to the broker (ours:
    /// `connection-state`).
    pub connection_state: ConnectionState,
    /// Connections ready to the broker: up to four (fetches, control requests, group
    /// requests, JoinGroup/SyncGroup) (ours: `connection-count` per node).
    pub connection_count: usize,
    /// Requests sent (Java: `request-total`).
    pub request_total: u64,
    /// Requests sent per second (Java: `request-rate`).
    pub request_rate: f64,
    /// Mean time from sending a request to its answer (Java: `request-latency-avg`).
    pub request_latency_avg: Option<Duration>,
    /// Longest such time (Java: `request-latency-max`).
    pub request_latency_max: Option<Duration>,
    /// Responses received (Java: `response-total`).
    pub response_total: u64,
    /// Responses received per second (Java: `response-rate`).
    pub response_rate: f64,
    /// Bytes of requests sent, size prefixes included (Java: `outgoing-byte-total`).
    pub outgoing_byte_total: u64,
    /// Those per second (Java: `outgoing-byte-rate`).
    pub outgoing_byte_rate: f64,
    /// Bytes of responses received, size prefixes included (Java: `incoming-byte-total`).
    pub incoming_byte_total: u64,
    /// Those per second (Java: `incoming-byte-rate`).
    pub incoming_byte_rate: f64,
}

/// Whether the consumer can send requests to a broker now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionState {
    /// No connection (never needed, closed while idle, or after a failure).
    Disconnected,
    /// A connection is being set up (name resolution, TCP, TLS, ApiVersions, SASL).
    Connecting,
    /// At least one connection is ready for requests.
    Connected,
}

impl ConnectionState {
    /// As a number, for exporters: 0 disconnected, 1 connecting, 2 connected.
    pub fn as_number(self) -> u8 {
        match self {
            ConnectionState::Disconnected => 0,
            ConnectionState::Connecting => 1,
            ConnectionState::Connected => 2,
        }
    }
}

/// One assigned partition, from [`Consumer::partition_metrics`](crate::Consumer::partition_metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionMetrics {
    /// The partition.
    pub partition: TopicPartition,
    /// The offset of the next record `poll` returns, if known.
    pub position: Option<i64>,
    /// The partition's end as of the last fetch: the high watermark, or the last stable
    /// offset under read_committed.
    pub end_offset: Option<i64>,
    /// The partition's first offset as of the last fetch (the log start offset).
    pub log_start_offset: Option<i64>,
    /// `end_offset - position` (at least 0): how far the application is behind (Java:
    /// `records-lag`, tagged `topic` and `partition`).
    pub lag: Option<i64>,
    /// `position - log_start_offset`: how many records the application could fall behind
    /// before retention deletes the next one it reads; negative when it already has (Java:
    /// `records-lead`).
    pub lead: Option<i64>,
    /// Records fetched and waiting to be returned by `poll`.
    pub buffered_records: usize,
    /// Whether the partition is paused.
    pub paused: bool,
    /// The node id of the broker the last records `poll` returned for this partition came
    /// from: its leader, or (with `client.rack`, KIP-392) a follower in the consumer's rack
    /// that the leader named; `None` before the first records.
    pub fetched_from: Option<i32>,
}

/// Whether a [`Metric`] only grows (a Prometheus counter) or goes up and down (a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricKind {
    /// A value that goes up and down (rates, averages, current states).
    Gauge,
    /// A total since the consumer started; its name ends in `-total`.
    Counter,
}

/// One figure as exporters take it: the Java client's group and name (or ours, for
/// figures Java does not have), its tags, and its value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Metric {
    /// The metric group, e.g. `consumer-fetch-manager-metrics`.
    pub group: &'static str,
    /// The metric name, e.g. `records-consumed-rate`.
    pub name: &'static str,
    /// What it measures, with its unit.
    pub description: &'static str,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// The tags, in order: `client-id`, then `node-id` (`node-1`; `node--1` for the first
    /// bootstrap server), or `topic` and `partition`.
    pub tags: Vec<(&'static str, String)>,
    /// The value; NaN where nothing happened in the window (an average or maximum with no
    /// sample), as in Java. Durations are in milliseconds, as in Java.
    pub value: f64,
}

/// Builds the list of [`Metric`]s, one group and tag set at a time.
struct MetricList {
    out: Vec<Metric>,
    group: &'static str,
    tags: Vec<(&'static str, String)>,
}

impl MetricList {
    fn gauge(&mut self, name: &'static str, description: &'static str, value: f64) {
        self.push(name, description, MetricKind::Gauge, value);
    }

    fn counter(&mut self, name: &'static str, description: &'static str, value: f64) {
        self.push(name, description, MetricKind::Counter, value);
    }

    fn push(&mut self, name: &'static str, description: &'static str, kind: MetricKind, v: f64) {
        self.out.push(Metric {
            group: self.group,
            name,
            description,
            kind,
            tags: self.tags.clone(),
            value: v,
        });
    }
}

/// A duration in milliseconds, NaN for none.
fn ms(d: Option<Duration>) -> f64 {
    d.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

/// A count, NaN for none.
fn count(v: Option<i64>) -> f64 {
    v.map_or(f64::NAN, |v| v as f64)
}

impl Metrics {
    /// A snapshot with nothing counted yet.
    pub(crate) fn empty(client_id: &str) -> Metrics {
        Metrics {
            client_id: client_id.to_owned(),
            prefetched_bytes: 0,
            buffered_records: 0,
            fetch_blocked_by_memory: false,
            records_consumed_total: 0,
            records_consumed_rate: 0.0,
            bytes_consumed_total: 0,
            bytes_consumed_rate: 0.0,
            fetch_total: 0,
            fetch_rate: 0.0,
            fetch_latency_avg: None,
            fetch_latency_max: None,
            records_lag_max: None,
            records_lead_min: None,
            assigned_partitions: 0,
            commit_total: 0,
            commit_rate: 0.0,
            commit_latency_avg: None,
            commit_latency_max: None,
            rebalance_total: 0,
            rebalance_rate_per_hour: 0.0,
            rebalance_latency_avg: None,
            rebalance_latency_max: None,
            rebalance_latency_total: Duration::ZERO,
            last_rebalance_latency: None,
            last_rebalance_seconds_ago: None,
            failed_rebalance_total: 0,
            failed_rebalance_rate_per_hour: 0.0,
            unassigned_time_total: Duration::ZERO,
            connection_count: 0,
            connection_creation_total: 0,
            connection_close_total: 0,
            brokers: Vec::new(),
        }
    }

    /// Every figure of the snapshot (client-wide, then per broker) as a [`Metric`], under
    /// the Java client's group and name, tagged with `client-id` (and `node-id` per
    /// broker). An exporter needs no code per figure:
    ///
    /// ```no_run
    /// use std::fmt::Write as _;
    /// # let consumer = kafka_consumer::Consumer::new(kafka_consumer::ConsumerConfig::new("127.0.0.1:9092"))?;
    /// let mut page = String::new();
    /// for m in consumer.metrics().iter() {
    ///     let _ = writeln!(page, "{} {} {:?} = {}", m.group, m.name, m.tags, m.value);
    /// }
    /// # Ok::<(), kafka_consumer::Error>(())
    /// ```
    pub fn iter(&self) -> std::vec::IntoIter<Metric> {
        let mut l = MetricList {
            out: Vec::with_capacity(48 + 14 * self.brokers.len()),
            group: FETCH_MANAGER_GROUP,
            tags: vec![("client-id", self.client_id.clone())],
        };
        l.counter(
            "records-consumed-total",
            "The total number of records consumed",
            self.records_consumed_total as f64,
        );
        l.gauge(
            "records-consumed-rate",
            "The average number of records consumed per second",
            self.records_consumed_rate,
        );
        l.counter(
            "bytes-consumed-total",
            "The total number of bytes consumed",
            self.bytes_consumed_total as f64,
        );
        l.gauge(
            "bytes-consumed-rate",
            "The average number of bytes consumed per second",
            self.bytes_consumed_rate,
        );
        l.counter(
            "fetch-total",
            "The total number of fetch requests",
            self.fetch_total as f64,
        );
        l.gauge(
            "fetch-rate",
            "The number of fetch requests per second",
            self.fetch_rate,
        );
        l.gauge(
            "fetch-latency-avg",
            "The average time taken for a fetch request, in ms",
            ms(self.fetch_latency_avg),
        );
        l.gauge(
            "fetch-latency-max",
            "The max time taken for any fetch request, in ms",
            ms(self.fetch_latency_max),
        );
        l.gauge(
            "records-lag-max",
            "The largest lag in number of records of any assigned partition now",
            count(self.records_lag_max),
        );
        l.gauge(
            "records-lead-min",
            "The smallest lead in number of records of any assigned partition now",
            count(self.records_lead_min),
        );
        l.gauge(
            "prefetched-bytes",
            "Bytes fetched and not yet released by the application",
            self.prefetched_bytes as f64,
        );
        l.gauge(
            "buffered-records",
            "Records fetched and waiting to be returned by poll",
            self.buffered_records as f64,
        );
        l.gauge(
            "fetch-blocked-by-memory",
            "1 while fetching waits for the application to release fetch.buffer.bytes",
            if self.fetch_blocked_by_memory {
                1.0
            } else {
                0.0
            },
        );

        l.group = COORDINATOR_GROUP;
        l.gauge(
            "assigned-partitions",
            "The number of partitions currently assigned to this consumer",
            self.assigned_partitions as f64,
        );
        l.counter(
            "commit-total",
            "The total number of commit calls",
            self.commit_total as f64,
        );
        l.gauge(
            "commit-rate",
            "The number of commit calls per second",
            self.commit_rate,
        );
        l.gauge(
            "commit-latency-avg",
            "The average time taken for a commit request, in ms",
            ms(self.commit_latency_avg),
        );
        l.gauge(
            "commit-latency-max",
            "The max time taken for a commit request, in ms",
            ms(self.commit_latency_max),
        );
        l.counter(
            "rebalance-total",
            "The total number of rebalance events",
            self.rebalance_total as f64,
        );
        l.gauge(
            "rebalance-rate-per-hour",
            "The number of rebalance events per hour",
            self.rebalance_rate_per_hour,
        );
        l.gauge(
            "rebalance-latency-avg",
            "The average time taken for a group to complete a rebalance, in ms",
            ms(self.rebalance_latency_avg),
        );
        l.gauge(
            "rebalance-latency-max",
            "The max time taken for a group to complete a rebalance, in ms",
            ms(self.rebalance_latency_max),
        );
        l.counter(
            "rebalance-latency-total",
            "The total number of milliseconds spent in rebalances",
            ms(Some(self.rebalance_latency_total)),
        );
        l.gauge(
            "last-rebalance-latency",
            "The time in ms the last completed rebalance took",
            ms(self.last_rebalance_latency),
        );
        l.gauge(
            "last-rebalance-seconds-ago",
            "The number of seconds since the last rebalance event (-1 before the first)",
            self.last_rebalance_seconds_ago.map_or(-1.0, |s| s as f64),
        );
        l.counter(
            "failed-rebalance-total",
            "The total number of failed rebalance events",
            self.failed_rebalance_total as f64,
        );
        l.gauge(
            "failed-rebalance-rate-per-hour",
            "The number of failed rebalance events per hour",
            self.failed_rebalance_rate_per_hour,
        );
        l.counter(
            "unassigned-time-ms-total",
            "The total time in ms this consumer was subscribed and owned no partition",
            ms(Some(self.unassigned_time_total)),
        );

        l.group = CONSUMER_GROUP;
        l.gauge(
            "connection-count",
            "The current number of active connections",
            self.connection_count as f64,
        );
        l.counter(
            "connection-creation-total",
            "The total number of new connections established",
            self.connection_creation_total as f64,
        );
        l.counter(
            "connection-close-total",
            "The total number of connections closed",
            self.connection_close_total as f64,
        );

        l.group = NODE_GROUP;
        for b in &self.brokers {
            l.tags = vec![
                ("client-id", self.client_id.clone()),
                ("node-id", format!("node-{}", b.node_id)),
            ];
            l.gauge(
                "connection-state",
                "0 no connection, 1 connecting, 2 at least one connection ready",
                f64::from(b.connection_state.as_number()),
            );
            l.gauge(
                "connection-count",
                "The current number of ready connections to the node",
                b.connection_count as f64,
            );
            l.counter(
                "request-total",
                "The total number of requests sent",
                b.request_total as f64,
            );
            l.gauge(
                "request-rate",
                "The number of requests sent per second",
                b.request_rate,
            );
            l.gauge(
                "request-latency-avg",
                "The average time from sending a request to its response, in ms",
                ms(b.request_latency_avg),
            );
            l.gauge(
                "request-latency-max",
                "The max time from sending a request to its response, in ms",
                ms(b.request_latency_max),
            );
            l.counter(
                "response-total",
                "The total number of responses received",
                b.response_total as f64,
            );
            l.gauge(
                "response-rate",
                "The number of responses received per second",
                b.response_rate,
            );
            l.counter(
                "outgoing-byte-total",
                "The total number of outgoing bytes",
                b.outgoing_byte_total as f64,
            );
            l.gauge(
                "outgoing-byte-rate",
                "The number of outgoing bytes per second",
                b.outgoing_byte_rate,
            );
            l.counter(
                "incoming-byte-total",
                "The total number of incoming bytes",
                b.incoming_byte_total as f64,
            );
            l.gauge(
                "incoming-byte-rate",
                "The number of incoming bytes per second",
                b.incoming_byte_rate,
            );
        }
        l.out.into_iter()
    }

    /// The per-partition figures of `partitions` (from
    /// [`Consumer::partition_metrics`](crate::Consumer::partition_metrics)) as
    /// [`Metric`]s: `records-lag` and `records-lead` in Java's
    /// `consumer-fetch-manager-metrics`, tagged `client-id`, `topic` and `partition`
    /// (a partition whose figure is not known yet is left out).
    pub fn iter_partitions(&self, partitions: &[PartitionMetrics]) -> std::vec::IntoIter<Metric> {
        let mut l = MetricList {
            out: Vec::with_capacity(2 * partitions.len()),
            group: FETCH_MANAGER_GROUP,
            tags: Vec::new(),
        };
        for p in partitions {
            l.tags = vec![
                ("client-id", self.client_id.clone()),
                ("topic", p.partition.topic().to_owned()),
                ("partition", p.partition.partition().to_string()),
            ];
            if let Some(lag) = p.lag {
                l.gauge("records-lag", "The latest lag of the partition", lag as f64);
            }
            if let Some(lead) = p.lead {
                l.gauge(
                    "records-lead",
                    "The latest lead of the partition",
                    lead as f64,
                );
            }
        }
        l.out.into_iter()
    }
}
