//! Turns one partition of a fetch response into a [`Chunk`] for the application:
//! CRC checks, decompression into one buffer per chunk, read_committed filtering, trimming
//! of records before the fetch offset, and the position after the data. Every byte the
//! chunk holds is charged to the prefetch [`Budget`] before it is allocated.
//!
//! Invariants:
//! 1. `next_offset` only moves past batches that were fully decoded (delivered, or skipped
//!    as control/aborted); a corrupt batch stops the chunk before it, so the next fetch
//!    starts at it again and the error is raised again (as the Java client does).
//! 2. Records with an offset below the fetch offset are never delivered.
//! 3. A partial trailing batch is ignored; the next fetch asks for it again.
//! 4. Decompressed bytes and the record index are charged to the budget before they are
//!    allocated, and never beyond its cap: a batch that does not fit stops the chunk before
//!    it ([`Stop::NoRoom`]), to be fetched again once the application has freed memory (or,
//!    when nothing else is held, on its own in a response of just that batch). Only a batch
//!    larger than [`MAX_INFLATED`] decompressed is [`Stop::TooLarge`] here.
//! 5. Nothing is reserved from a count read off the wire: the record index grows with the
//!    records actually decoded, bounded by the bytes present.

use std::sync::Arc;

use crate::buffer::{Budget, Charge, FrameBuf, Pool};
use crate::fetch::aborted::AbortedFilter;
use crate::protocol::records::{
    control_type, decompress, decompress_into, BatchHeader, BatchIter, Compression, ControlType,
    RawBatch, RecordError, RecordIter, RecordRef, TimestampType, MIN_RECORD_SIZE,
};
use crate::types::{LeaderEpoch, NodeId, PositionEpoch, TopicPartition};

/// Largest decompressed size of one chunk: record positions are stored as `u32`.
pub const MAX_INFLATED: usize = 512 * 1024 * 1024;

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
    /// The record's size in its (uncompressed) batch, length prefix included: what
    /// `bytes-consumed` counts, as in Java.
    pub size: u32,
    pub timestamp_type: TimestampType,
    /// Whether the ranges point into `Chunk::inflated` (decompressed) or into the frame.
    pub inflated: bool,
}

const STORED_RECORD_BYTES: usize = std::mem::size_of::<StoredRecord>();

/// A fetch response frame, charged to the budget for as long as any chunk points into it.
pub(crate) struct FetchedFrame {
    // Released before the buffer goes back to the pool (which charges it again).
    _charge: Charge,
    buf: FrameBuf,
}

impl FetchedFrame {
    /// Charges `buf` (a response already received) to `budget`.
    pub fn new(buf: FrameBuf, budget: &Arc<Budget>) -> FetchedFrame {
        FetchedFrame {
            _charge: budget.charge(buf.capacity()),
            buf,
        }
    }
}

impl FetchedFrame {
    /// Bytes charged for the frame.
    pub fn charged(&self) -> usize {
        self._charge.bytes()
    }
}

impl std::ops::Deref for FetchedFrame {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

/// Records fetched for one partition from one fetch response, handed from the I/O thread
/// to the application. Dropping it returns its bytes to the prefetch budget.
pub(crate) struct Chunk {
    pub tp: TopicPartition,
    /// The position epoch this data was fetched under; a chunk from an older epoch is stale.
    pub epoch: PositionEpoch,
    /// The position the fetch was made from.
    pub fetch_offset: i64,
    /// The position after the whole chunk (past control records and aborted batches too).
    pub next_offset: i64,
    /// Leader epoch of the last batch read (for the position's epoch).
    pub last_epoch: LeaderEpoch,
    /// The partition's end (high watermark, or last stable offset under read_committed)
    /// as of this response; -1 when unknown.
    pub end_offset: i64,
    /// The broker the records came from (the leader, or a preferred read replica); `None`
    /// for a position move.
    pub source: Option<NodeId>,
    pub frame: Option<Arc<FetchedFrame>>,
    pub inflated: Vec<u8>,
    pub records: Vec<StoredRecord>,
    /// The decompressed bytes and the record index, charged to the budget.
    _charge: Option<Charge>,
    /// Where the decompression buffer goes back to when the chunk is dropped.
    recycle: Option<Pool>,
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk")
            .field("tp", &self.tp)
            .field("epoch", &self.epoch)
            .field("fetch_offset", &self.fetch_offset)
            .field("next_offset", &self.next_offset)
            .field("records", &self.records.len())
            .finish()
    }
}

impl Drop for Chunk {
    /// Chunks are dropped by the application (or for it): its bytes go back to the budget
    /// first, then the budget hears that the application freed memory.
    fn drop(&mut self) {
        if let Some(charge) = self._charge.take() {
            let budget = Arc::clone(charge.budget());
            drop(charge);
            self.frame = None;
            if let Some(pool) = self.recycle.take() {
                pool.put(std::mem::take(&mut self.inflated));
            }
            budget.app_freed();
        }
    }
}

impl Chunk {
    /// The memory this chunk holds beyond its frame (decompressed bytes, record index).
    pub fn charged(&self) -> usize {
        self._charge.as_ref().map_or(0, Charge::bytes)
    }

    /// The bytes of `r` at `start..start+len`, in the frame or in the decompressed buffer.
    pub fn slice(&self, r: &StoredRecord, start: u32, len: u32) -> &[u8] {
        let buf: &[u8] = if r.inflated {
            &self.inflated
        } else {
            self.frame.as_deref().map_or(&[], |f| f)
        };
        &buf[start as usize..start as usize + len as usize]
    }

    /// A chunk without records that moves the position from `from` to `to` (after an offset
    /// reset, a seek resolved by ListOffsets, or a committed offset), whose leader epoch is
    /// `leader_epoch`.
    pub fn position(
        tp: TopicPartition,
        epoch: PositionEpoch,
        from: i64,
        to: i64,
        leader_epoch: LeaderEpoch,
    ) -> Chunk {
        Chunk {
            tp,
            epoch,
            fetch_offset: from,
            next_offset: to,
            last_epoch: leader_epoch,
            end_offset: -1,
            source: None,
            frame: None,
            inflated: Vec::new(),
            records: Vec::new(),
            _charge: None,
            recycle: None,
        }
    }
}

/// A chunk of `n` records from `base` of `tp` fetched under `epoch` (values `v<offset>`),
/// for tests above the fetch path.
#[cfg(test)]
pub(crate) fn test_chunk(tp: TopicPartition, epoch: PositionEpoch, base: i64, n: i32) -> Chunk {
    let budget = Budget::new(1 << 30, Box::new(|| {}));
    let set = crate::sim::broker::batch(base, n);
    let frame = Arc::new(FetchedFrame::new(FrameBuf::from_vec(set.clone()), &budget));
    let decoded = build_chunk(
        PartitionInput {
            tp,
            epoch,
            fetch_offset: base,
            end_offset: base + i64::from(n),
            frame: &frame,
            records: (0, set.len()),
            aborted: None,
            check_crcs: true,
        },
        &budget,
        frame.charged(),
        None,
    );
    match decoded.chunk {
        Some(chunk) => chunk,
        None => panic!("no chunk decoded: {:?}", decoded.stop),
    }
}

/// What the fetch path knows about one partition's answer.
pub(crate) struct PartitionInput<'a> {
    /// Which partition.
    pub tp: TopicPartition,
    /// Position epoch the fetch was made under.
    pub epoch: PositionEpoch,
    /// Offset the fetch was made from.
    pub fetch_offset: i64,
    /// The partition's end as the response gave it.
    pub end_offset: i64,
    /// The whole response body (records ranges point into it).
    pub frame: &'a Arc<FetchedFrame>,
    /// Start and length of this partition's record set in `frame`.
    pub records: (usize, usize),
    /// read_committed only: the aborted transactions listed for this partition.
    pub aborted: Option<Vec<(i64, i64)>>,
    /// Whether to verify CRCs.
    pub check_crcs: bool,
}

/// Why a chunk ended before the end of the partition's data.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The batch at `offset` is malformed (or its codec unavailable).
    Error {
        /// Where the bad batch starts (the position the next fetch starts from).
        offset: i64,
        /// The offset after the bad batch, when its header could be read.
        skip_to: Option<i64>,
        error: RecordError,
    },
    /// The batch at `offset` does not fit in the budget now. `alone`: nothing but this
    /// response's frame is held, so waiting for the application will not help.
    NoRoom {
        offset: i64,
        skip_to: i64,
        alone: bool,
    },
    /// The batch at `offset` decompresses to more than [`MAX_INFLATED`].
    TooLarge { offset: i64, skip_to: i64 },
}

/// The result of decoding one partition's data.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The chunk, or `None` when the position did not move and no record was read.
    pub chunk: Option<Chunk>,
    /// Why decoding stopped early, if it did.
    pub stop: Option<Stop>,
    /// Bytes of record set present (for telling an empty answer from a useless one).
    pub bytes: usize,
}

/// Decodes one partition's records, charging `budget` for what the chunk holds.
/// `held_here` is what this response has already charged (its frame and earlier chunks):
/// it tells a batch that waits for the application from one that does not fit at all.
pub(crate) fn build_chunk(
    input: PartitionInput<'_>,
    budget: &Arc<Budget>,
    held_here: usize,
    spares: Option<&Pool>,
) -> Decoded {
    let (start, len) = input.records;
    let frame: &[u8] = input.frame;
    let set = &frame[start..start + len];
    let check_crcs = input.check_crcs;
    let mut chunk = ChunkBuilder::new(input, budget, spares);
    let mut stop = None;
    let mut batches = BatchIter::new(set, check_crcs);
    let mut bad_batch = None;
    for batch in batches.by_ref() {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                bad_batch = Some(e);
                break;
            }
        };
        if batch.header.next_offset() <= chunk.fetch_offset {
            continue;
        }
        if let Some(s) = chunk.add_batch(&batch, held_here) {
            stop = Some(s);
            break;
        }
    }
    if let Some(e) = bad_batch {
        // Where to seek to skip it, when its header could be read.
        stop = Some(Stop::Error {
            offset: e.offset().unwrap_or(chunk.next_offset),
            skip_to: batches.failed_batch_next_offset(),
            error: e,
        });
    }
    chunk.finish(stop)
}

/// Where decoding a record set fetched at `fetch_offset` ends when every batch decodes: the
/// offset after its last complete batch that ends past the fetch offset, with that batch's
/// leader epoch; `None` when it holds no such batch or a batch header is bad. Reads only
/// the batch headers (no CRC, no decompression), so a few microseconds for a megabyte;
/// [`build_chunk`] still decides what the data holds, and ends before this whenever it
/// stops early (a bad batch, one that does not fit): a bad header would stop it exactly
/// here, so it gives no prediction.
pub(crate) fn predicted_end(record_set: &[u8], fetch_offset: i64) -> Option<(i64, LeaderEpoch)> {
    let mut end = None;
    for batch in BatchIter::new(record_set, false) {
        let b = batch.ok()?;
        let next = b.header.next_offset();
        if next > fetch_offset {
            end = Some((next, LeaderEpoch(b.header.partition_leader_epoch)));
        }
    }
    end
}

/// One partition's chunk while its batches are decoded, one after another: the record
/// index, the decompression buffer, what both are charged to the budget, and the position
/// after the batches decoded so far.
struct ChunkBuilder<'a> {
    tp: TopicPartition,
    epoch: PositionEpoch,
    fetch_offset: i64,
    end_offset: i64,
    frame: &'a Arc<FetchedFrame>,
    /// Start of the record set in `frame`.
    set_start: usize,
    /// Length of the record set.
    set_len: usize,
    budget: &'a Arc<Budget>,
    /// Recycled decompression buffers.
    spares: Option<&'a Pool>,
    /// read_committed only: the aborted transactions still to skip.
    filter: Option<AbortedFilter>,
    records: Vec<StoredRecord>,
    inflated: Vec<u8>,
    /// The decompressed content is `inflated[..inflated_len]`; bytes past it are scratch.
    inflated_len: usize,
    charge: Charge,
    next_offset: i64,
    last_epoch: LeaderEpoch,
    /// Records expected in the whole set, from the first batch's density (bounded by bytes).
    hint: Option<usize>,
}

impl<'a> ChunkBuilder<'a> {
    /// An empty chunk at the fetch offset, with a charge of nothing yet.
    fn new(
        input: PartitionInput<'a>,
        budget: &'a Arc<Budget>,
        spares: Option<&'a Pool>,
    ) -> ChunkBuilder<'a> {
        let (set_start, set_len) = input.records;
        ChunkBuilder {
            tp: input.tp,
            epoch: input.epoch,
            fetch_offset: input.fetch_offset,
            end_offset: input.end_offset,
            frame: input.frame,
            set_start,
            set_len,
            budget,
            spares,
            filter: input.aborted.map(AbortedFilter::new),
            records: Vec::new(),
            inflated: Vec::new(),
            inflated_len: 0,
            charge: budget.charge(0),
            next_offset: input.fetch_offset,
            last_epoch: LeaderEpoch::UNKNOWN,
            hint: None,
        }
    }

    /// Adds `batch` (one that ends after the fetch offset) to the chunk, room in the record
    /// index first, and moves the position past it; `Some` when the chunk ends before the
    /// batch instead, saying why.
    fn add_batch(&mut self, batch: &RawBatch<'_>, held_here: usize) -> Option<Stop> {
        let h = &batch.header;
        let batch_start = h.base_offset.max(self.fetch_offset);
        // Before this batch charges anything: is the budget as empty as it can get (only
        // this response's frame held, no earlier record of it decoded)?
        let alone = self.budget.used().saturating_sub(held_here) == 0;
        let no_room = || Stop::NoRoom {
            offset: batch_start,
            skip_to: h.next_offset(),
            alone,
        };
        if !h.is_control() && !self.reserve_index(batch) {
            return Some(no_room());
        }
        match self.decode_batch(batch) {
            Ok(()) => {}
            Err(RecordError::DecompressedTooLarge { limit }) => {
                return Some(if limit + self.inflated_len >= MAX_INFLATED {
                    Stop::TooLarge {
                        offset: batch_start,
                        skip_to: h.next_offset(),
                    }
                } else {
                    no_room()
                });
            }
            Err(e) => {
                // Decompression and control-record errors do not know their batch: name it.
                return Some(Stop::Error {
                    offset: batch_start,
                    skip_to: Some(h.next_offset()),
                    error: e.in_batch(h.base_offset),
                });
            }
        }
        self.next_offset = h.next_offset();
        self.last_epoch = LeaderEpoch(h.partition_leader_epoch);
        None
    }

    /// Room in the record index for the records a data batch can hold, charged before
    /// anything else of the batch (room for the whole set as the first batch suggests, if
    /// the budget has it); `false` when the budget has no room even for this batch.
    fn reserve_index(&mut self, batch: &RawBatch<'_>) -> bool {
        let h = &batch.header;
        let at_most =
            (h.record_count.max(0) as usize).min(batch.records.len() / MIN_RECORD_SIZE + 1);
        if at_most <= self.records.capacity() - self.records.len() {
            return true;
        }
        let set_len = self.set_len;
        let hint = *self.hint.get_or_insert_with(|| {
            let per_record = (batch.records.len() / at_most.max(1)).max(MIN_RECORD_SIZE);
            set_len / per_record
        });
        let need = self.records.len() + at_most;
        let wanted = need.max(hint.min(need.saturating_mul(2)));
        let capacity = self.records.capacity();
        let grown = if self
            .charge
            .try_grow((wanted - capacity) * STORED_RECORD_BYTES)
        {
            Some(wanted)
        } else if self
            .charge
            .try_grow((need - capacity) * STORED_RECORD_BYTES)
        {
            Some(need)
        } else {
            None
        };
        match grown {
            Some(cap) => {
                self.records.reserve_exact(cap - self.records.len());
                true
            }
            None => false,
        }
    }

    /// Decodes `batch` into the chunk: a control batch is never delivered (an ABORT marker
    /// ends its producer's aborted transaction), an aborted batch is skipped, and a data
    /// batch's records go into the record index, decompressed first if need be.
    fn decode_batch(&mut self, batch: &RawBatch<'_>) -> Result<(), RecordError> {
        let h = &batch.header;
        if h.is_control() {
            let ctl = read_control(h, batch.records)?;
            if let Some(f) = self.filter.as_mut() {
                f.skip_batch(h, ctl);
            }
            return Ok(());
        }
        if self.filter.as_mut().is_some_and(|f| f.skip_batch(h, None)) {
            return Ok(());
        }
        if h.compression() == Compression::None {
            let base = self.set_start + batch.start + 61;
            self.index_records(h, batch.records, base, false)
        } else {
            let at = self.inflate_batch(batch)?;
            self.index_records(h, batch.records, at, true)
        }
    }

    /// Decompresses a compressed batch's records onto the end of the decompression buffer
    /// (a recycled one when there is none yet), charging what the buffer grows by;
    /// returns where they start in it.
    fn inflate_batch(&mut self, batch: &RawBatch<'_>) -> Result<usize, RecordError> {
        let h = &batch.header;
        if self.inflated.capacity() == 0 {
            // A recycled buffer: already allocated, and initialized (no
            // zeroing, no page faults). Its spare charge became ours.
            if let Some(pool) = self.spares {
                self.inflated = pool.take_any();
                self.charge.grow(self.inflated.capacity());
            }
        }
        let at = self.inflated_len;
        let cap_before = self.inflated.capacity();
        // What the budget can still hold, minus the decoder's slack.
        let limit = MAX_INFLATED
            .saturating_sub(at)
            .min(self.budget.room().saturating_sub(DECOMPRESS_SLACK));
        decompress_into(
            h.compression(),
            batch.records,
            &mut self.inflated,
            &mut self.inflated_len,
            limit,
        )?;
        self.charge
            .grow(self.inflated.capacity().saturating_sub(cap_before));
        if at == 0 {
            self.reserve_expected_inflation(batch);
        }
        Ok(at)
    }

    /// After the first compressed batch: expects the rest of the set to inflate as this
    /// batch did, and reserves that once (if the budget has it) rather than grow the buffer
    /// by copying it again and again.
    fn reserve_expected_inflation(&mut self, batch: &RawBatch<'_>) {
        let rest = self
            .set_len
            .saturating_sub(batch.start + 61 + batch.records.len());
        let expected = (rest as u128 * self.inflated_len as u128
            / batch.records.len().max(1) as u128)
            .min((MAX_INFLATED - self.inflated_len) as u128) as usize;
        let spare = self.inflated.capacity() - self.inflated_len;
        // While the buffer moves, its old allocation is held too.
        if expected > spare
            && self.budget.room() >= expected - spare + self.inflated.capacity()
            && self.charge.try_grow(expected - spare)
        {
            let cap0 = self.inflated.capacity();
            self.inflated.truncate(self.inflated_len);
            self.inflated.reserve_exact(expected);
            let got = self.inflated.capacity() - cap0;
            match got.cmp(&(expected - spare)) {
                std::cmp::Ordering::Greater => self.charge.grow(got - (expected - spare)),
                std::cmp::Ordering::Less => self.charge.shrink(expected - spare - got),
                std::cmp::Ordering::Equal => {}
            }
        }
    }

    /// Adds a data batch's records at or after the fetch offset to the record index. They
    /// lie in `raw` (the batch's records section, at `base` in the frame), or when
    /// `in_inflated`, in the decompression buffer from `base` to its end. On an error, none
    /// of the batch's records stay.
    fn index_records(
        &mut self,
        h: &BatchHeader,
        raw: &[u8],
        base: usize,
        in_inflated: bool,
    ) -> Result<(), RecordError> {
        let buf: &[u8] = if in_inflated {
            &self.inflated[base..self.inflated_len]
        } else {
            raw
        };
        let before = self.records.len();
        let mut it = RecordIter::new(h, buf);
        loop {
            let start = it.bytes_read();
            let r = match it.next_fast() {
                Some(r) => r,
                None => match it.next() {
                    None => break,
                    Some(Ok(r)) => r,
                    Some(Err(e)) => {
                        self.records.truncate(before);
                        return Err(e);
                    }
                },
            };
            if r.offset < self.fetch_offset {
                continue;
            }
            if self.records.len() == self.records.capacity() {
                // More records than the batch's count allowed for: RecordIter stops
                // at the count, so this cannot happen; keep the charge exact anyway.
                self.charge.grow(STORED_RECORD_BYTES);
                self.records.reserve_exact(1);
            }
            let size = (it.bytes_read() - start) as u32;
            self.records
                .push(stored_record(h, &r, base, in_inflated, size));
        }
        Ok(())
    }

    /// The chunk, if the position moved or a record was read (index room reserved and not
    /// used given back), and why decoding stopped early, if it did.
    fn finish(self, stop: Option<Stop>) -> Decoded {
        let ChunkBuilder {
            tp,
            epoch,
            fetch_offset,
            end_offset,
            frame,
            set_len,
            spares,
            mut records,
            mut inflated,
            inflated_len,
            mut charge,
            next_offset,
            last_epoch,
            ..
        } = self;
        inflated.truncate(inflated_len);
        let recycle = if inflated.capacity() > 0 {
            spares.cloned()
        } else {
            None
        };
        let chunk = (next_offset != fetch_offset || !records.is_empty()).then(|| {
            // Give back index room that was reserved and not used.
            let unused = records.capacity() - records.len();
            if unused > records.len() {
                records.shrink_to_fit();
                charge.shrink(unused * STORED_RECORD_BYTES);
            }
            Chunk {
                tp,
                epoch,
                fetch_offset,
                next_offset,
                last_epoch,
                end_offset,
                source: None,
                frame: Some(Arc::clone(frame)),
                inflated,
                records,
                _charge: Some(charge),
                recycle,
            }
        });
        Decoded {
            chunk,
            stop,
            bytes: set_len,
        }
    }
}

/// How `r`, a record of the batch `h` whose records section (or decompressed content)
/// starts at `base`, is stored in the record index.
fn stored_record(
    h: &BatchHeader,
    r: &RecordRef,
    base: usize,
    in_inflated: bool,
    size: u32,
) -> StoredRecord {
    let (key_start, key_len) = r.key.map_or((0, -1), |(s, l)| (s, l as i32));
    let (value_start, value_len) = r.value.map_or((0, -1), |(s, l)| (s, l as i32));
    StoredRecord {
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
        size,
        timestamp_type: h.timestamp_type(),
        inflated: in_inflated,
    }
}

/// Bytes a decompressor may allocate beyond what it produced (its growth step).
const DECOMPRESS_SLACK: usize = 64 * 1024;

/// Reads the marker type of a control batch (decompressing it first in the rare case it
/// is compressed).
fn read_control(h: &BatchHeader, records: &[u8]) -> Result<Option<ControlType>, RecordError> {
    let mut owned = Vec::new();
    let buf = if h.compression() == Compression::None {
        records
    } else {
        decompress(h.compression(), records, &mut owned, 64 * 1024)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::records::testing::{control_batch, encode_batch, BatchSpec, RecordSpec};

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

    fn budget(cap: usize) -> Arc<Budget> {
        Budget::new(cap, Box::new(|| {}))
    }

    /// A fake response body: some header bytes, then the record set.
    fn frame(set: &[u8], budget: &Arc<Budget>) -> (Arc<FetchedFrame>, (usize, usize)) {
        let mut body = vec![0xAB; 10];
        body.extend_from_slice(set);
        (
            Arc::new(FetchedFrame::new(FrameBuf::from_vec(body), budget)),
            (10, set.len()),
        )
    }

    fn run_with(
        set: &[u8],
        fetch_offset: i64,
        aborted: Option<Vec<(i64, i64)>>,
        b: &Arc<Budget>,
    ) -> Decoded {
        let before = b.used();
        let (f, range) = frame(set, b);
        let held = b.used() - before;
        build_chunk(
            PartitionInput {
                tp: TopicPartition::new("t", 4),
                epoch: PositionEpoch(1),
                fetch_offset,
                end_offset: 100,
                frame: &f,
                records: range,
                aborted,
                check_crcs: true,
            },
            b,
            held,
            None,
        )
    }

    fn run(set: &[u8], fetch_offset: i64, aborted: Option<Vec<(i64, i64)>>) -> Decoded {
        run_with(set, fetch_offset, aborted, &budget(1 << 30))
    }

    fn values(c: &Chunk) -> Vec<(i64, String)> {
        c.records
            .iter()
            .map(|r| {
                let v = c.slice(r, r.value_start, r.value_len as u32);
                (r.offset, String::from_utf8(v.to_vec()).unwrap())
            })
            .collect()
    }

    #[test]
    fn records_before_the_fetch_offset_are_trimmed() {
        let mut set = batch(0, 5, -1, false);
        set.extend(batch(5, 5, -1, false));
        let d = run(&set, 3, None);
        assert!(d.stop.is_none());
        let c = d.chunk.unwrap();
        assert_eq!(values(&c).first(), Some(&(3, "v3".to_owned())));
        assert_eq!(c.records.len(), 7);
        assert_eq!((c.fetch_offset, c.next_offset), (3, 10));
    }

    #[test]
    fn each_record_counts_its_bytes_in_its_batch_as_java_counts_them() {
        use crate::protocol::records::testing::encode_records;
        use crate::protocol::records::BATCH_HEADER_SIZE;
        // Length prefix (1) + attributes, timestamp and offset deltas, a null key, "vN",
        // no headers (8).
        let set = batch(0, 5, -1, false);
        let c = run(&set, 0, None).chunk.unwrap();
        let sizes: Vec<u32> = c.records.iter().map(|r| r.size).collect();
        assert_eq!(sizes, vec![9; 5]);
        assert_eq!(
            sizes.iter().sum::<u32>() as usize,
            set.len() - BATCH_HEADER_SIZE,
            "a whole batch counts its records section"
        );
        // Trimmed records count for nothing.
        let c = run(&set, 3, None).chunk.unwrap();
        assert_eq!(c.records.iter().map(|r| r.size).sum::<u32>(), 18);
        // A compressed batch counts its records uncompressed.
        #[cfg(feature = "snappy")]
        {
            let values: Vec<String> = (0..50).map(|i| format!("value-{i:04}")).collect();
            let recs: Vec<RecordSpec<'_>> = values
                .iter()
                .enumerate()
                .map(|(i, v)| (i as i32, 0, Some(&b"k"[..]), Some(v.as_bytes()), &[][..]))
                .collect();
            let section = encode_records(&recs);
            let compressed = snap::raw::Encoder::new().compress_vec(&section).unwrap();
            let set = encode_batch(&BatchSpec {
                attributes: 2,
                records: &recs,
                records_section: Some(&compressed),
                ..BatchSpec::default()
            });
            let c = run(&set, 0, None).chunk.unwrap();
            assert_eq!(c.records.len(), 50);
            let total: u32 = c.records.iter().map(|r| r.size).sum();
            assert_eq!(total as usize, section.len());
            assert!(
                set.len() - BATCH_HEADER_SIZE < section.len(),
                "it did compress"
            );
        }
    }

    #[test]
    fn a_partial_trailing_batch_is_left_for_the_next_fetch() {
        let mut set = batch(0, 5, -1, false);
        let second = batch(5, 5, -1, false);
        set.extend_from_slice(&second[..second.len() - 3]);
        let d = run(&set, 0, None);
        assert!(d.stop.is_none());
        let c = d.chunk.unwrap();
        assert_eq!(c.records.len(), 5);
        assert_eq!(c.next_offset, 5);
    }

    #[test]
    fn a_bad_crc_stops_before_the_batch_and_says_where() {
        let mut set = batch(0, 3, -1, false);
        let mut bad = batch(3, 3, -1, false);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        set.extend(bad);
        let d = run(&set, 0, None);
        let c = d.chunk.unwrap();
        assert_eq!(
            c.records.len(),
            3,
            "records before the corrupt batch are delivered"
        );
        assert_eq!(c.next_offset, 3, "the position stays at the corrupt batch");
        match d.stop {
            Some(Stop::Error { offset, error, .. }) => {
                assert_eq!(offset, 3);
                assert!(matches!(error, RecordError::CrcMismatch { .. }));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bad_crc_in_the_first_batch_yields_no_chunk() {
        let mut set = batch(0, 3, -1, false);
        set[30] ^= 1;
        let d = run(&set, 0, None);
        assert!(d.chunk.is_none());
        assert!(matches!(d.stop, Some(Stop::Error { offset: 0, .. })));
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
        let c = run(&set, 0, Some(vec![(7, 0)])).chunk.unwrap();
        let offsets: Vec<i64> = c.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![4, 5, 7, 8]);
        assert_eq!(c.next_offset, 9);
        // read_uncommitted: everything but the markers.
        let c = run(&set, 0, None).chunk.unwrap();
        let offsets: Vec<i64> = c.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![0, 1, 2, 4, 5, 7, 8]);
    }

    #[test]
    fn only_control_records_still_move_the_position() {
        let set = control_batch(10, 7, 1);
        let d = run(&set, 10, None);
        assert!(d.stop.is_none());
        let c = d.chunk.unwrap();
        assert!(c.records.is_empty());
        assert_eq!(c.next_offset, 11);
    }

    #[test]
    fn everything_held_is_charged_and_given_back() {
        let b = budget(1 << 30);
        let set = batch(0, 3, -1, false);
        let d = run_with(&set, 0, None, &b);
        let c = d.chunk.unwrap();
        assert!(
            b.used() >= set.len() + 3 * STORED_RECORD_BYTES,
            "{}",
            b.used()
        );
        drop(c);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn a_batch_that_does_not_fit_stops_the_chunk_and_says_whether_anything_else_is_held() {
        let mut set = batch(0, 3, -1, false);
        set.extend(batch(3, 300, -1, false));
        // Room for the frame and the first batch's index only.
        let b = budget(set.len() + 10 + 3 * STORED_RECORD_BYTES + 16);
        let d = run_with(&set, 0, None, &b);
        let c = d.chunk.expect("the first batch fits");
        assert_eq!(c.next_offset, 3);
        assert!(
            matches!(
                d.stop,
                Some(Stop::NoRoom {
                    offset: 3,
                    skip_to: 303,
                    alone: false
                })
            ),
            "the first chunk is held: {:?}",
            d.stop
        );
        assert!(b.used() <= b.cap());
        drop(c);
        // Nothing but the frame held: waiting for the application will not help.
        let d = run_with(&set, 3, None, &b);
        assert!(
            matches!(
                d.stop,
                Some(Stop::NoRoom {
                    offset: 3,
                    alone: true,
                    ..
                })
            ),
            "{:?}",
            d.stop
        );
        assert!(d.chunk.is_none());
    }

    /// `batch(base, n, ..)` with its `recordCount` overwritten by `count` (CRC left stale, as
    /// a flipped bit would leave it).
    fn batch_claiming(base: i64, n: i32, count: i32) -> Vec<u8> {
        let mut b = batch(base, n, -1, false);
        b[57..61].copy_from_slice(&count.to_be_bytes());
        b
    }

    fn run_unchecked(set: &[u8], fetch_offset: i64) -> Decoded {
        let b = budget(1 << 30);
        let (f, range) = frame(set, &b);
        build_chunk(
            PartitionInput {
                tp: TopicPartition::new("t", 4),
                epoch: PositionEpoch(1),
                fetch_offset,
                end_offset: 100,
                frame: &f,
                records: range,
                aborted: None,
                check_crcs: false,
            },
            &b,
            f.charged(),
            None,
        )
    }

    fn stop_error(d: &Decoded) -> (i64, &RecordError) {
        match &d.stop {
            Some(Stop::Error { offset, error, .. }) => (*offset, error),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn a_batch_claiming_2_pow_31_records_is_an_error_naming_it_not_an_abort() {
        let d = run_unchecked(&batch_claiming(0, 3, i32::MAX), 0);
        assert!(d.chunk.is_none(), "no chunk with garbage");
        let (offset, e) = stop_error(&d);
        assert_eq!(offset, 0);
        assert_eq!(
            e.without_offset(),
            &RecordError::Invalid("record count larger than the records section can hold")
        );
        // After a good batch: the good records are delivered, the position stops at the bad
        // batch, and the error names it.
        let mut set = batch(0, 3, -1, false);
        set.extend(batch_claiming(3, 3, i32::MAX));
        let d = run_unchecked(&set, 0);
        assert_eq!(stop_error(&d).0, 3);
        let c = d.chunk.unwrap();
        assert_eq!(values(&c).len(), 3);
        assert_eq!(c.next_offset, 3);
        // With CRC checks on, the flipped bit is a CRC mismatch at the batch.
        let d = run(&set, 0, None);
        assert!(matches!(
            stop_error(&d).1,
            RecordError::CrcMismatch { base_offset: 3, .. }
        ));
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
        let d = run(&set, 0, None);
        let (offset, e) = stop_error(&d);
        assert_eq!(offset, 2);
        assert!(
            matches!(
                e.without_offset(),
                RecordError::Decompress { codec: "gzip", .. }
            ),
            "{e:?}"
        );
        assert_eq!(e.offset(), Some(2));
        assert_eq!(d.chunk.unwrap().next_offset, 2);
    }

    #[test]
    fn a_batch_error_says_where_to_skip_when_the_batch_header_is_readable() {
        let mut set = batch(0, 2, -1, false);
        let mut bad = batch(2, 3, -1, false);
        let n = bad.len();
        bad[n - 1] ^= 1;
        set.extend(&bad);
        let d = run(&set, 0, None);
        assert!(
            matches!(
                d.stop,
                Some(Stop::Error {
                    offset: 2,
                    skip_to: Some(5),
                    error: RecordError::CrcMismatch { .. }
                })
            ),
            "{:?}",
            d.stop
        );
        // A legacy message set has no batch header to read the end from.
        let mut legacy = batch(2, 3, -1, false);
        legacy[16] = 1;
        let d = run_unchecked(&legacy, 0);
        assert!(
            matches!(
                d.stop,
                Some(Stop::Error {
                    offset: 2,
                    skip_to: None,
                    ..
                })
            ),
            "{:?}",
            d.stop
        );
    }

    #[test]
    fn located_errors_keep_their_kind_and_name_the_partition_and_offset() {
        use crate::error::{Error, ErrorKind};
        let tp = TopicPartition::new("t", 4);
        let mut legacy = batch(7, 1, -1, false);
        legacy[16] = 1; // magic 1
        let d = run_unchecked(&legacy, 0);
        let (offset, e) = stop_error(&d);
        let err = Error::records(e.clone(), &tp, offset, None);
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert_eq!(err.partition(), Some(&tp));
        assert_eq!(err.offset(), Some(7));
        assert!(err.to_string().contains("t-4 at offset 7"), "{err}");
        let d = run_unchecked(&batch_claiming(9, 1, 2), 0);
        let (offset, e) = stop_error(&d);
        let err = Error::records(e.clone(), &tp, offset, Some(10));
        assert_eq!(err.kind(), ErrorKind::Protocol);
        assert_eq!((err.offset(), err.skip_to()), (Some(9), Some(10)));
        assert!(err.to_string().contains("seek to 10"), "{err}");
    }
}
