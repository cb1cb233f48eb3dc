//! Records as the application sees them: views into the fetched buffers, no copy.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::buffer::FrameBuf;
use crate::protocol::records::HeaderIter;
pub use crate::protocol::records::TimestampType;

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

/// One record as stored in a [`Chunk`]: offsets into the chunk's buffers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoredRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: i32,
    /// Start of the key in its buffer; `key_len < 0` means null.
    pub key_start: u32,
    pub key_len: i32,
    pub value_start: u32,
    pub value_len: i32,
    pub headers_start: u32,
    pub headers_len: u32,
    pub header_count: u32,
    pub timestamp_type: TimestampType,
    /// Whether the ranges point into `Chunk::inflated` (decompressed) or into the frame.
    pub inflated: bool,
}

/// Records fetched for one partition from one fetch response, handed from the I/O thread
/// to the application. Dropping it returns its bytes to the prefetch budget.
pub(crate) struct Chunk {
    pub tp: TopicPartition,
    /// The position epoch this data was fetched under; a chunk from an older epoch is stale.
    pub epoch: u64,
    /// The position the fetch was made from.
    pub fetch_offset: i64,
    /// The position after the whole chunk (past control records and aborted batches too).
    pub next_offset: i64,
    /// Leader epoch of the last batch (for the position's epoch).
    pub last_epoch: i32,
    pub frame: Arc<FrameBuf>,
    pub inflated: Vec<u8>,
    pub records: Vec<StoredRecord>,
    /// Bytes charged against the prefetch budget, given back on drop.
    pub charged: usize,
    pub budget: Arc<AtomicUsize>,
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.budget.fetch_sub(self.charged, Ordering::AcqRel);
    }
}

impl fmt::Debug for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("tp", &self.tp)
            .field("epoch", &self.epoch)
            .field("fetch_offset", &self.fetch_offset)
            .field("next_offset", &self.next_offset)
            .field("records", &self.records.len())
            .finish()
    }
}

impl Chunk {
    fn slice(&self, r: &StoredRecord, start: u32, len: u32) -> &[u8] {
        let buf: &[u8] = if r.inflated {
            &self.inflated
        } else {
            &self.frame
        };
        &buf[start as usize..start as usize + len as usize]
    }
}

/// One record, borrowed from the [`ConsumerRecords`] that `poll` returned.
#[derive(Clone, Copy)]
pub struct Record<'a> {
    chunk: &'a Chunk,
    rec: &'a StoredRecord,
}

impl<'a> Record<'a> {
    /// The topic.
    pub fn topic(&self) -> &'a str {
        self.chunk.tp.topic()
    }

    /// The partition.
    pub fn partition(&self) -> i32 {
        self.chunk.tp.partition()
    }

    /// The offset.
    pub fn offset(&self) -> i64 {
        self.rec.offset
    }

    /// The timestamp in milliseconds since the epoch (meaning depends on [`Record::timestamp_type`]).
    pub fn timestamp(&self) -> i64 {
        self.rec.timestamp
    }

    /// Whether the timestamp was set by the producer or by the broker.
    pub fn timestamp_type(&self) -> TimestampType {
        self.rec.timestamp_type
    }

    /// The key, or `None` for a null key.
    pub fn key(&self) -> Option<&'a [u8]> {
        (self.rec.key_len >= 0).then(|| {
            self.chunk
                .slice(self.rec, self.rec.key_start, self.rec.key_len as u32)
        })
    }

    /// The value, or `None` for a null value (a tombstone).
    pub fn value(&self) -> Option<&'a [u8]> {
        (self.rec.value_len >= 0).then(|| {
            self.chunk
                .slice(self.rec, self.rec.value_start, self.rec.value_len as u32)
        })
    }

    /// The headers in order. Duplicate keys are kept.
    pub fn headers(&self) -> Headers<'a> {
        let section = self
            .chunk
            .slice(self.rec, self.rec.headers_start, self.rec.headers_len);
        Headers {
            inner: HeaderIter::new(section, self.rec.header_count),
        }
    }

    /// The leader epoch of the batch this record came in, if the broker set one.
    pub fn leader_epoch(&self) -> Option<i32> {
        (self.rec.leader_epoch >= 0).then_some(self.rec.leader_epoch)
    }
}

impl fmt::Debug for Record<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("topic", &self.topic())
            .field("partition", &self.partition())
            .field("offset", &self.offset())
            .field("timestamp", &self.timestamp())
            .field("key", &self.key().map(String::from_utf8_lossy))
            .field("value_len", &self.value().map(<[u8]>::len))
            .finish()
    }
}

/// One record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    /// The header key.
    pub key: &'a str,
    /// The header value, `None` when null.
    pub value: Option<&'a [u8]>,
}

/// The headers of a record, decoded as you iterate.
#[derive(Clone)]
pub struct Headers<'a> {
    inner: HeaderIter<'a>,
}

impl<'a> Iterator for Headers<'a> {
    type Item = Header<'a>;

    fn next(&mut self) -> Option<Header<'a>> {
        self.inner.next().map(|(key, value)| Header { key, value })
    }
}

/// The records one `poll` returned, in order within each partition.
///
/// ```no_run
/// # use kafka_consumer::{Consumer, ConsumerConfig, TopicPartition};
/// # use std::time::Duration;
/// # let mut consumer = Consumer::new(ConsumerConfig::new("127.0.0.1:9092"))?;
/// let records = consumer.poll(Duration::from_millis(500))?;
/// for r in &records {
///     log::info!("{}-{}@{}: {:?}", r.topic(), r.partition(), r.offset(), r.value());
/// }
/// # Ok::<(), kafka_consumer::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct ConsumerRecords {
    parts: Vec<(Arc<Chunk>, usize, usize)>,
    len: usize,
}

impl ConsumerRecords {
    pub(crate) fn push(&mut self, chunk: Arc<Chunk>, start: usize, end: usize) {
        if end > start {
            self.len += end - start;
            self.parts.push((chunk, start, end));
        }
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// All records: partition by partition, in offset order within each.
    pub fn iter(&self) -> impl Iterator<Item = Record<'_>> + '_ {
        self.parts.iter().flat_map(|(c, s, e)| {
            c.records[*s..*e]
                .iter()
                .map(move |rec| Record { chunk: c, rec })
        })
    }

    /// The partitions that have records here.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        let mut v: Vec<TopicPartition> = self.parts.iter().map(|(c, _, _)| c.tp.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// The records of one partition, in offset order.
    pub fn records<'a>(&'a self, tp: &'a TopicPartition) -> impl Iterator<Item = Record<'a>> + 'a {
        self.iter().filter(move |r| r.chunk.tp == *tp)
    }
}

impl<'a> IntoIterator for &'a ConsumerRecords {
    type Item = Record<'a>;
    type IntoIter = Box<dyn Iterator<Item = Record<'a>> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}
