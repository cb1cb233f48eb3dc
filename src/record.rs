//! Records as the application sees them: views into the fetched buffers, no copy.

use std::borrow::Cow;
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
///
/// Its key is bytes: Kafka header keys are meant to be UTF-8 strings, but the broker does not
/// check them and some clients write other bytes, so a key is delivered as it was sent
/// ([`Header::key`]) and can be read as text the way the Java consumer reads it
/// ([`Header::key_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    key: &'a [u8],
    value: Option<&'a [u8]>,
}

impl<'a> Header<'a> {
    /// The header key as sent: its raw bytes, usually (but not necessarily) UTF-8.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The header key as text: UTF-8, with each invalid sequence replaced by U+FFFD (`�`),
    /// as the Java consumer decodes it. Borrowed, without a copy, when the key is valid
    /// UTF-8.
    ///
    /// ```
    /// # fn show(h: kafka_consumer::Header<'_>) {
    /// if h.key_str() == "trace-id" {
    ///     // ...
    /// }
    /// # }
    /// ```
    pub fn key_str(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.key)
    }

    /// The header value, `None` when null.
    pub fn value(&self) -> Option<&'a [u8]> {
        self.value
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetch::chunk::{build_chunk, PartitionInput};
    use crate::protocol::records::testing::{encode_batch, encode_raw_record, BatchSpec};
    use crate::protocol::wire::Writer;

    #[test]
    fn a_header_key_that_is_not_utf8_is_delivered_as_bytes() {
        let mut w = Writer::new();
        let plain: &[(&[u8], Option<&[u8]>)] = &[(b"seq", Some(b"0"))];
        let odd: &[(&[u8], Option<&[u8]>)] = &[(&[0xff, 0xfe, b'k'], Some(b"1")), (b"n", None)];
        encode_raw_record(&mut w, &(0, 0, None, Some(b"a"), plain));
        encode_raw_record(&mut w, &(1, 0, None, Some(b"b"), odd));
        encode_raw_record(&mut w, &(2, 0, None, Some(b"c"), plain));
        let section = w.into_inner();
        let set = encode_batch(&BatchSpec {
            base_offset: 5,
            records_section: Some(&section),
            record_count: Some(3),
            last_offset_delta: Some(2),
            ..BatchSpec::default()
        });
        let frame = Arc::new(FrameBuf::from_vec(set.clone()));
        let budget = Arc::new(AtomicUsize::new(0));
        let (chunk, err) = build_chunk(
            PartitionInput {
                tp: TopicPartition::new("t", 0),
                epoch: 1,
                fetch_offset: 5,
                frame: &frame,
                records: (0, set.len()),
                aborted: None,
                check_crcs: true,
            },
            &budget,
        );
        assert!(err.is_none(), "{err:?}");
        let chunk = Arc::new(chunk.unwrap());
        let mut recs = ConsumerRecords::default();
        recs.push(Arc::clone(&chunk), 0, chunk.records.len());
        let got: Vec<Record<'_>> = recs.iter().collect();
        assert_eq!(got.len(), 3, "the records after it are delivered too");
        assert_eq!(
            got.iter().map(Record::offset).collect::<Vec<_>>(),
            [5, 6, 7]
        );
        let h: Vec<Header<'_>> = got[1].headers().collect();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].key(), &[0xff, 0xfe, b'k'][..]);
        assert_eq!(h[0].key_str(), "\u{FFFD}\u{FFFD}k");
        assert_eq!(h[0].value(), Some(&b"1"[..]));
        assert_eq!((h[1].key(), h[1].value()), (&b"n"[..], None));
        assert!(
            matches!(h[1].key_str(), Cow::Borrowed("n")),
            "no copy for UTF-8"
        );
        let h = got[2].headers().next().unwrap();
        assert_eq!((h.key_str(), h.value()), ("seq".into(), Some(&b"0"[..])));
        assert_eq!(got[2].value(), Some(&b"c"[..]));
    }
}
