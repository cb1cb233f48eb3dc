//! Small types shared by every layer: the topic-partition, where to start a partition
//! without a position ([`OffsetReset`], set by the configuration and followed by the
//! fetcher), and newtypes for the integers that mean different things (a broker's node id,
//! a partition's leader epoch, the epoch of a position, a request's correlation id). Mixing
//! them up is a compile error.

use std::fmt;
use std::sync::Arc;

/// A topic name and a partition number.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    topic: Arc<str>,
    partition: i32,
}

impl TopicPartition {
    /// A topic-partition.
    ///
    /// ```
    /// let tp = kafka_consumer::TopicPartition::new("orders", 3);
    /// assert_eq!(tp.to_string(), "orders-3");
    /// ```
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition number.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    pub(crate) fn topic_arc(&self) -> &Arc<str> {
        &self.topic
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Where to start reading a partition that has no valid position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OffsetReset {
    /// The oldest offset still in the log (`earliest`; librdkafka also `smallest`, `beginning`).
    Earliest,
    /// The end of the log: only records written from now on (`latest`; also `largest`, `end`).
    Latest,
    /// No automatic reset: `poll` returns an error naming the partition (`none`; also `error`).
    None,
}

/// A broker's node id, as Metadata lists it. Never negative for a real broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct NodeId(pub i32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// A partition's leader epoch (KIP-320): bumped by every leader change. `-1` means unknown,
/// and as a request field it asks the broker to skip the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LeaderEpoch(pub i32);

impl LeaderEpoch {
    /// Unknown (the wire's -1).
    pub const UNKNOWN: LeaderEpoch = LeaderEpoch(-1);

    /// The epoch, if known.
    pub fn known(self) -> Option<i32> {
        (self.0 >= 0).then_some(self.0)
    }
}

/// The epoch of a partition's position on the user side: bumped by every seek, resume and
/// (re)assignment. Data fetched under an older epoch is stale and never delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct PositionEpoch(pub u64);

/// The correlation id of one request on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CorrelationId(pub i32);

impl CorrelationId {
    /// The id after this one: positive, wrapping to 1.
    pub fn next(self) -> CorrelationId {
        CorrelationId(self.0.wrapping_add(1).max(1))
    }
}
