//! Records as the application sees them: views into the fetched buffers, no copy, and an
//! owned copy for when a record must outlive its batch.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::fetch::chunk::{Chunk, StoredRecord};
use crate::protocol::records::HeaderIter;
pub use crate::protocol::records::TimestampType;
use crate::types::TopicPartition;

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

    /// The topic and partition.
    pub fn topic_partition(&self) -> &'a TopicPartition {
        &self.chunk.tp
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

    /// An owned copy of the record, independent of the fetched buffers (so holding it does
    /// not hold the prefetch memory of its whole batch).
    pub fn to_owned_record(&self) -> OwnedRecord {
        OwnedRecord {
            topic_partition: self.chunk.tp.clone(),
            offset: self.offset(),
            timestamp: self.timestamp(),
            timestamp_type: self.timestamp_type(),
            leader_epoch: self.leader_epoch(),
            key: self.key().map(<[u8]>::to_vec),
            value: self.value().map(<[u8]>::to_vec),
            headers: self
                .headers()
                .map(|h| (h.key().to_vec(), h.value().map(<[u8]>::to_vec)))
                .collect(),
        }
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

/// A record copied out of the fetched buffers ([`Record::to_owned_record`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRecord {
    /// The topic and partition.
    pub topic_partition: TopicPartition,
    /// The offset.
    pub offset: i64,
    /// The timestamp in milliseconds since the epoch.
    pub timestamp: i64,
    /// Whether the timestamp was set by the producer or by the broker.
    pub timestamp_type: TimestampType,
    /// The leader epoch of the record's batch, if set.
    pub leader_epoch: Option<i32>,
    /// The key, `None` when null.
    pub key: Option<Vec<u8>>,
    /// The value, `None` when null.
    pub value: Option<Vec<u8>>,
    /// The headers in order: raw key bytes and value (`None` when null).
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
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
    /// The key's bytes. Kafka header keys are meant to be UTF-8, but the broker does not
    /// check, and some producers write other bytes.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The key as text: UTF-8, with each invalid sequence replaced by U+FFFD (`�`), as the
    /// Java consumer decodes it. Borrowed, without a copy, when the key is valid UTF-8.
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

    /// The value, `None` when null.
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

impl fmt::Debug for Headers<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.clone()).finish()
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
///
/// The records point into the fetched buffers, which count against `fetch.buffer.bytes`
/// until this value is dropped: an application that keeps many `ConsumerRecords` alive
/// stops the prefetch (`Metrics::fetch_blocked_by_memory` says so). Copy out what you
/// keep with [`Record::to_owned_record`].
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
    pub fn iter(&self) -> Records<'_> {
        Records {
            parts: self.parts.iter(),
            current: None,
            filter: None,
        }
    }

    /// The partitions that have records here.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        let mut v: Vec<TopicPartition> = self.parts.iter().map(|(c, _, _)| c.tp.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// The records of one partition, in offset order.
    pub fn records<'a>(&'a self, tp: &'a TopicPartition) -> Records<'a> {
        Records {
            parts: self.parts.iter(),
            current: None,
            filter: Some(tp),
        }
    }
}

/// Iterator over the records of a [`ConsumerRecords`].
#[derive(Clone)]
pub struct Records<'a> {
    parts: std::slice::Iter<'a, (Arc<Chunk>, usize, usize)>,
    current: Option<(&'a Chunk, std::slice::Iter<'a, StoredRecord>)>,
    filter: Option<&'a TopicPartition>,
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        loop {
            if let Some((chunk, recs)) = &mut self.current {
                if let Some(rec) = recs.next() {
                    return Some(Record { chunk, rec });
                }
            }
            let (c, s, e) = self.parts.next()?;
            if self.filter.is_some_and(|tp| *tp != c.tp) {
                continue;
            }
            self.current = Some((c, c.records[*s..*e].iter()));
        }
    }
}

impl fmt::Debug for Records<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Records")
    }
}

impl<'a> IntoIterator for &'a ConsumerRecords {
    type Item = Record<'a>;
    type IntoIter = Records<'a>;

    fn into_iter(self) -> Records<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{Budget, FrameBuf};
    use crate::fetch::chunk::{build_chunk, FetchedFrame, PartitionInput};
    use crate::protocol::records::testing::{encode_batch, encode_raw_record, BatchSpec};
    use crate::protocol::wire::Writer;
    use crate::types::PositionEpoch;

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
        let budget = Budget::new(1 << 20, Box::new(|| {}));
        let frame = Arc::new(FetchedFrame::new(FrameBuf::from_vec(set.clone()), &budget));
        let decoded = build_chunk(
            PartitionInput {
                tp: TopicPartition::new("t", 0),
                epoch: PositionEpoch(1),
                fetch_offset: 5,
                end_offset: 8,
                frame: &frame,
                records: (0, set.len()),
                aborted: None,
                check_crcs: true,
            },
            &budget,
            frame.charged(),
            None,
        );
        assert!(decoded.stop.is_none(), "{:?}", decoded.stop);
        let chunk = Arc::new(decoded.chunk.unwrap());
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
        // An owned copy keeps the raw key and every header.
        let owned = got[1].to_owned_record();
        assert_eq!(owned.offset, 6);
        assert_eq!(owned.headers[0].0, vec![0xff, 0xfe, b'k']);
        assert_eq!(owned.headers[1], (b"n".to_vec(), None));
        assert_eq!(owned.value.as_deref(), Some(&b"b"[..]));
        assert_eq!(recs.records(&TopicPartition::new("t", 0)).count(), 3);
        assert_eq!(recs.records(&TopicPartition::new("t", 1)).count(), 0);
    }
}
