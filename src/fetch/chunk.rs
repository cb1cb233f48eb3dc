//! Turns one partition of a fetch response into a [`Chunk`] for the application:
//! CRC checks, decompression into one reused buffer, read_committed filtering, trimming
//! of records before the fetch offset, and the position after the data.
//!
//! Invariants:
//! 1. `next_offset` only moves past batches that were fully decoded (delivered, or skipped
//!    as control/aborted); a corrupt batch stops the chunk before it, so the next fetch
//!    starts at it again and the error is raised again (as the Java client does).
//! 2. Records with an offset below the fetch offset are never delivered.
//! 3. A partial trailing batch is ignored; the next fetch asks for it again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::buffer::FrameBuf;
use crate::fetch::aborted::AbortedFilter;
use crate::protocol::records::{
    control_type, decompress, BatchIter, Compression, ControlType, RecordError, RecordIter,
    MIN_RECORD_SIZE,
};
use crate::record::{Chunk, StoredRecord, TopicPartition};

/// Largest decompressed size of one partition's data in one fetch: record positions are
/// stored as `u32`, and a decompression bomb must not exhaust memory.
pub const MAX_INFLATED: usize = 512 * 1024 * 1024;

/// What the fetch path knows about one partition's answer.
pub struct PartitionInput<'a> {
    /// Which partition.
    pub tp: TopicPartition,
    /// Position epoch the fetch was made under.
    pub epoch: u64,
    /// Offset the fetch was made from.
    pub fetch_offset: i64,
    /// High watermark from the response.
    /// The whole response body (records ranges point into it).
    pub frame: &'a Arc<FrameBuf>,
    /// Start and length of this partition's record set in `frame`.
    pub records: (usize, usize),
    /// read_committed: the aborted transactions listed for this partition.
    pub aborted: Option<Vec<(i64, i64)>>,
    /// Whether to verify CRCs.
    pub check_crcs: bool,
}

/// Decodes one partition's records. Returns the chunk (possibly without records when only
/// control or aborted batches were read, or `None` when nothing advanced) and the error
/// that stopped decoding, if any.
pub fn build_chunk(
    input: PartitionInput<'_>,
    budget: &Arc<AtomicUsize>,
) -> (Option<Chunk>, Option<RecordError>) {
    let (start, len) = input.records;
    let set = &input.frame[start..start + len];
    let mut filter = input.aborted.map(AbortedFilter::new);
    let mut records: Vec<StoredRecord> = Vec::new();
    let mut inflated: Vec<u8> = Vec::new();
    let mut next_offset = input.fetch_offset;
    let mut last_epoch = -1;
    let mut error = None;

    for batch in BatchIter::new(set, input.check_crcs) {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        let h = &batch.header;
        if h.next_offset() <= input.fetch_offset {
            continue;
        }
        if records.capacity() == 0 && h.record_count > 0 {
            // Size the record index once from the first batch's density, never past what the
            // bytes present can hold: `recordCount` is not trusted (with `check.crcs=false` a
            // flipped bit can claim 2^31-1 records). Compressed batches may hold more; the
            // index then grows as records are actually decoded.
            let per_record = (h.batch_length.max(1) as usize / h.record_count as usize).max(1);
            let guess = (len / per_record).saturating_add(h.record_count as usize);
            records.reserve(guess.min(len / MIN_RECORD_SIZE));
        }
        let result = (|| -> Result<(), RecordError> {
            if h.is_control() {
                // Never delivered; an ABORT marker ends its producer's aborted transaction.
                let ctl = read_control(h, batch.records)?;
                if let Some(f) = filter.as_mut() {
                    f.skip_batch(h, ctl);
                }
                return Ok(());
            }
            if filter.as_mut().is_some_and(|f| f.skip_batch(h, None)) {
                return Ok(());
            }
            let (buf, base, in_inflated): (&[u8], usize, bool) =
                if h.compression() == Compression::None {
                    (batch.records, start + batch.start + 61, false)
                } else {
                    let at = inflated.len();
                    decompress(
                        h.compression(),
                        batch.records,
                        &mut inflated,
                        MAX_INFLATED.saturating_sub(at),
                    )?;
                    (&inflated[at..], at, true)
                };
            let before = records.len();
            let mut it = RecordIter::new(h, buf);
            loop {
                let r = match it.next_fast() {
                    Some(r) => r,
                    None => match it.next() {
                        None => break,
                        Some(Ok(r)) => r,
                        Some(Err(e)) => {
                            records.truncate(before);
                            return Err(e);
                        }
                    },
                };
                if r.offset < input.fetch_offset {
                    continue;
                }
                let (key_start, key_len) = r.key.map_or((0, -1), |(s, l)| (s, l as i32));
                let (value_start, value_len) = r.value.map_or((0, -1), |(s, l)| (s, l as i32));
                records.push(StoredRecord {
                    offset: r.offset,
                    timestamp: r.timestamp,
                    leader_epoch: h.partition_leader_epoch,
                    key_start: key_start + base as u32,
                    key_len,
                    value_start: value_start + base as u32,
                    value_len,
                    headers_start: r.headers.0 + base as u32,
                    headers_len: r.headers.1,
                    header_count: r.header_count,
                    timestamp_type: h.timestamp_type(),
                    inflated: in_inflated,
                });
            }
            Ok(())
        })();
        if let Err(e) = result {
            // Decompression and control-record errors do not know their batch: name it.
            error = Some(e.in_batch(h.base_offset));
            break;
        }
        next_offset = h.next_offset();
        last_epoch = h.partition_leader_epoch;
    }

    if next_offset == input.fetch_offset && records.is_empty() {
        return (None, error);
    }
    let charged = len + inflated.len();
    budget.fetch_add(charged, Ordering::AcqRel);
    let chunk = Chunk {
        tp: input.tp,
        epoch: input.epoch,
        fetch_offset: input.fetch_offset,
        next_offset,
        last_epoch,
        frame: Arc::clone(input.frame),
        inflated,
        records,
        charged,
        budget: Arc::clone(budget),
    };
    (Some(chunk), error)
}

/// Reads the marker type of a control batch (decompressing it first in the rare case it
/// is compressed).
fn read_control(
    h: &crate::protocol::records::BatchHeader,
    records: &[u8],
) -> Result<Option<ControlType>, RecordError> {
    let mut owned = Vec::new();
    let buf = if h.compression() == Compression::None {
        records
    } else {
        decompress(h.compression(), records, &mut owned, 1024 * 1024)?;
        &owned
    };
    match RecordIter::new(h, buf).next() {
        Some(r) => {
            let r = r?;
            match r.key {
                Some((ks, kl)) => Ok(Some(control_type(&buf[ks as usize..(ks + kl) as usize])?)),
                None => Ok(None),
            }
        }
        None => Ok(None),
    }
}

/// A chunk without records that moves the position from `from` to `to` (after an offset
/// reset or a seek resolved by ListOffsets).
pub fn position_chunk(
    tp: TopicPartition,
    epoch: u64,
    from: i64,
    to: i64,
    budget: &Arc<AtomicUsize>,
) -> Chunk {
    Chunk {
        tp,
        epoch,
        fetch_offset: from,
        next_offset: to,
        last_epoch: -1,
        frame: Arc::new(FrameBuf::from_vec(Vec::new())),
        inflated: Vec::new(),
        records: Vec::new(),
        charged: 0,
        budget: Arc::clone(budget),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::records::testing::{control_batch, encode_batch, BatchSpec, RecordSpec};
    use crate::{Error, ErrorKind};

    fn batch(base: i64, n: i32, producer_id: i64, transactional: bool) -> Vec<u8> {
        let values: Vec<String> = (0..n).map(|i| format!("v{}", base + i as i64)).collect();
        let recs: Vec<RecordSpec<'_>> = values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as i32, i as i64, None, Some(v.as_bytes()), &[][..]))
            .collect();
        encode_batch(&BatchSpec {
            base_offset: base,
            producer_id,
            attributes: if transactional { 1 << 4 } else { 0 },
            records: &recs,
            ..BatchSpec::default()
        })
    }

    /// A fake response body: some header bytes, then the record set.
    fn frame(set: &[u8]) -> (Arc<FrameBuf>, (usize, usize)) {
        let mut body = vec![0xAB; 10];
        body.extend_from_slice(set);
        (Arc::new(FrameBuf::from_vec(body)), (10, set.len()))
    }

    fn run(
        set: &[u8],
        fetch_offset: i64,
        aborted: Option<Vec<(i64, i64)>>,
    ) -> (Option<Chunk>, Option<RecordError>) {
        run_checking(set, fetch_offset, aborted, true)
    }

    fn run_checking(
        set: &[u8],
        fetch_offset: i64,
        aborted: Option<Vec<(i64, i64)>>,
        check_crcs: bool,
    ) -> (Option<Chunk>, Option<RecordError>) {
        let (f, range) = frame(set);
        let budget = Arc::new(AtomicUsize::new(0));
        build_chunk(
            PartitionInput {
                tp: TopicPartition::new("t", 4),
                epoch: 1,
                fetch_offset,
                frame: &f,
                records: range,
                aborted,
                check_crcs,
            },
            &budget,
        )
    }

    fn values(c: &Chunk) -> Vec<(i64, String)> {
        c.records
            .iter()
            .map(|r| {
                let buf: &[u8] = if r.inflated { &c.inflated } else { &c.frame };
                let v = &buf[r.value_start as usize..r.value_start as usize + r.value_len as usize];
                (r.offset, String::from_utf8(v.to_vec()).unwrap())
            })
            .collect()
    }

    #[test]
    fn records_before_the_fetch_offset_are_trimmed() {
        let mut set = batch(0, 5, -1, false);
        set.extend(batch(5, 5, -1, false));
        let (c, e) = run(&set, 3, None);
        assert!(e.is_none());
        let c = c.unwrap();
        assert_eq!(values(&c).first(), Some(&(3, "v3".to_owned())));
        assert_eq!(c.records.len(), 7);
        assert_eq!((c.fetch_offset, c.next_offset), (3, 10));
    }

    #[test]
    fn a_partial_trailing_batch_is_left_for_the_next_fetch() {
        let mut set = batch(0, 5, -1, false);
        let second = batch(5, 5, -1, false);
        set.extend_from_slice(&second[..second.len() - 3]);
        let (c, e) = run(&set, 0, None);
        assert!(e.is_none());
        let c = c.unwrap();
        assert_eq!(c.records.len(), 5);
        assert_eq!(c.next_offset, 5);
    }

    #[test]
    fn a_bad_crc_stops_before_the_batch_and_the_error_names_the_partition() {
        let mut set = batch(0, 3, -1, false);
        let mut bad = batch(3, 3, -1, false);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        set.extend(bad);
        let (c, e) = run(&set, 0, None);
        let c = c.unwrap();
        assert_eq!(
            c.records.len(),
            3,
            "records before the corrupt batch are delivered"
        );
        assert_eq!(c.next_offset, 3, "the position stays at the corrupt batch");
        let err = Error::records(e.unwrap(), &c.tp);
        assert_eq!(err.kind(), &ErrorKind::Corrupt);
        assert!(err.to_string().contains("t-4"), "{err}");
        assert_eq!(err.partition(), Some(&TopicPartition::new("t", 4)));
    }

    #[test]
    fn a_bad_crc_in_the_first_batch_yields_no_chunk() {
        let mut set = batch(0, 3, -1, false);
        set[30] ^= 1;
        let (c, e) = run(&set, 0, None);
        assert!(c.is_none());
        assert!(matches!(e, Some(RecordError::CrcMismatch { .. })));
    }

    #[test]
    fn read_committed_skips_aborted_batches_and_control_records_but_advances() {
        // pid 7 aborted at 0..3 (marker at 3); pid 8 committed at 4..6 (marker at 6);
        // plain records at 7..8.
        let mut set = batch(0, 3, 7, true);
        set.extend(control_batch(3, 7, 0));
        set.extend(batch(4, 2, 8, true));
        set.extend(control_batch(6, 8, 1));
        set.extend(batch(7, 2, -1, false));
        let (c, e) = run(&set, 0, Some(vec![(7, 0)]));
        assert!(e.is_none());
        let c = c.unwrap();
        let offsets: Vec<i64> = c.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![4, 5, 7, 8]);
        assert_eq!(c.next_offset, 9);
        // read_uncommitted: everything but the markers.
        let (c, _) = run(&set, 0, None);
        let offsets: Vec<i64> = c.unwrap().records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![0, 1, 2, 4, 5, 7, 8]);
    }

    #[test]
    fn only_control_records_still_move_the_position() {
        let set = control_batch(10, 7, 1);
        let (c, e) = run(&set, 10, None);
        assert!(e.is_none());
        let c = c.unwrap();
        assert!(c.records.is_empty());
        assert_eq!(c.next_offset, 11);
    }

    #[test]
    fn the_budget_is_charged_and_given_back() {
        let set = batch(0, 3, -1, false);
        let (f, range) = frame(&set);
        let budget = Arc::new(AtomicUsize::new(0));
        let (c, _) = build_chunk(
            PartitionInput {
                tp: TopicPartition::new("t", 0),
                epoch: 1,
                fetch_offset: 0,
                frame: &f,
                records: range,
                aborted: None,
                check_crcs: true,
            },
            &budget,
        );
        assert_eq!(budget.load(Ordering::Acquire), set.len());
        drop(c);
        assert_eq!(budget.load(Ordering::Acquire), 0);
    }

    /// `batch(base, n, ..)` with its `recordCount` overwritten by `count` (CRC left stale, as
    /// a flipped bit would leave it).
    fn batch_claiming(base: i64, n: i32, count: i32) -> Vec<u8> {
        let mut b = batch(base, n, -1, false);
        b[57..61].copy_from_slice(&count.to_be_bytes());
        b
    }

    #[test]
    fn a_batch_claiming_2_pow_31_records_is_an_error_naming_it_not_an_abort() {
        // First batch: the record index is sized from it; it must not be sized by the count.
        let (c, e) = run_checking(&batch_claiming(0, 3, i32::MAX), 0, None, false);
        assert!(c.is_none(), "no chunk with garbage");
        let e = e.expect("an error");
        assert_eq!(e.offset(), Some(0), "{e}");
        assert_eq!(
            e.without_offset(),
            &RecordError::Invalid("record count larger than the records section can hold")
        );
        // After a good batch: the good records are delivered, the position stops at the bad
        // batch, and the error names it.
        let mut set = batch(0, 3, -1, false);
        set.extend(batch_claiming(3, 3, i32::MAX));
        let (c, e) = run_checking(&set, 0, None, false);
        let c = c.unwrap();
        assert_eq!(values(&c).len(), 3);
        assert_eq!(c.next_offset, 3);
        assert_eq!(e.unwrap().offset(), Some(3));
        // With CRC checks on, the flipped bit is a CRC mismatch at the batch.
        let (_, e) = run(&set, 0, None);
        assert!(matches!(
            e,
            Some(RecordError::CrcMismatch { base_offset: 3, .. })
        ));
        // A claimed count the bytes could hold (but the batch lacks) is an error too.
        let (c, e) = run_checking(&batch_claiming(0, 3, 4), 0, None, false);
        assert!(c.is_none());
        assert_eq!(e.unwrap().offset(), Some(0));
    }

    #[cfg(feature = "gzip")]
    #[test]
    fn a_decompression_error_names_its_batch() {
        use std::io::Write;
        let section =
            crate::protocol::records::testing::encode_records(&[(0, 0, None, Some(b"v"), &[])]);
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&section).unwrap();
        let mut z = e.finish().unwrap();
        z.truncate(z.len() - 4);
        let mut set = batch(0, 2, -1, false);
        set.extend(encode_batch(&BatchSpec {
            base_offset: 2,
            attributes: Compression::Gzip.code(),
            records_section: Some(&z),
            record_count: Some(1),
            ..BatchSpec::default()
        }));
        let (c, e) = run(&set, 0, None);
        assert_eq!(c.unwrap().next_offset, 2);
        let e = e.unwrap();
        assert!(
            matches!(
                e.without_offset(),
                RecordError::Decompress { codec: "gzip", .. }
            ),
            "{e:?}"
        );
        assert_eq!(e.offset(), Some(2));
        assert!(e.to_string().contains("record batch at offset 2"), "{e}");
    }

    #[test]
    fn located_errors_keep_their_kind_and_name_the_offset() {
        let tp = TopicPartition::new("t", 4);
        let mut legacy = batch(7, 1, -1, false);
        legacy[16] = 1; // magic 1
        let (_, e) = run_checking(&legacy, 0, None, false);
        let err = Error::records(e.unwrap(), &tp);
        assert_eq!(err.kind(), &ErrorKind::Unsupported);
        assert!(err.to_string().contains("offset 7"), "{err}");
        let (_, e) = run_checking(&batch_claiming(9, 1, 2), 0, None, false);
        let err = Error::records(e.unwrap(), &tp);
        assert_eq!(err.kind(), &ErrorKind::Protocol);
        assert!(err.to_string().contains("offset 9"), "{err}");
    }
}
