//! read_committed filtering of aborted transactions (as the Java client's `CompletedFetch` does).
//!
//! A read_committed fetch response lists the aborted transactions that overlap its data as
//! `(producerId, firstOffset)` pairs. [`AbortedFilter`] walks the partition's batches in order
//! and says which ones must not be delivered.
//!
//! Invariants:
//!
//! 1. Batches are presented in offset order, once each; the filter is per partition response.
//! 2. An aborted entry becomes active once a batch reaches its first offset
//!    (`firstOffset <= batch.lastOffset`), and stays active for its producer until that
//!    producer's ABORT marker is seen.
//! 3. Control batches are never delivered, whatever their marker.
//! 4. Only transactional batches are ever dropped as aborted: a producer's non-transactional
//!    (idempotent-only) batches are always delivered.
//! 5. Skipping never stops the position: the caller moves it to `batch.next_offset()`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use crate::protocol::records::{BatchHeader, ControlType};

/// Decides, batch by batch, which records a read_committed consumer must not deliver.
///
/// Build one per partition response from its `AbortedTransactions` (an absent list is an
/// empty one), only for read_committed fetches. With read_uncommitted there is nothing to
/// filter but control batches, which the caller skips via [`BatchHeader::is_control`].
#[derive(Debug, Clone, Default)]
pub struct AbortedFilter {
    /// Aborted transactions not yet reached, as a min-heap by `(first_offset, producer_id)`.
    pending: BinaryHeap<Reverse<(i64, i64)>>,
    /// Producers whose aborted transaction has started and whose ABORT marker is not yet seen.
    aborted: HashSet<i64>,
}

impl AbortedFilter {
    /// A filter for the aborted transactions `(producer_id, first_offset)` of one partition.
    pub fn new(aborted: impl IntoIterator<Item = (i64, i64)>) -> Self {
        AbortedFilter {
            pending: aborted
                .into_iter()
                .map(|(producer_id, first_offset)| Reverse((first_offset, producer_id)))
                .collect(),
            aborted: HashSet::new(),
        }
    }

    /// Whether the records of the batch with header `h` must be skipped (not delivered).
    ///
    /// `control` is the marker of a control batch (from
    /// [`control_type`](crate::protocol::records::control_type) on its first record's key),
    /// `None` for a data batch or a control batch with no record. Control batches are always
    /// skipped, and an ABORT marker ends its producer's aborted transaction. Transactional
    /// batches of a producer with an aborted transaction in progress are skipped. Either way
    /// the caller's position moves to `h.next_offset()`.
    pub fn skip_batch(&mut self, h: &BatchHeader, control: Option<ControlType>) -> bool {
        let last = h.last_offset();
        while let Some(&Reverse((first_offset, producer_id))) = self.pending.peek() {
            if first_offset > last {
                break;
            }
            self.pending.pop();
            self.aborted.insert(producer_id);
        }
        if h.is_control() {
            if control == Some(ControlType::Abort) {
                self.aborted.remove(&h.producer_id);
            }
            return true;
        }
        h.is_transactional() && self.aborted.contains(&h.producer_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl AbortedFilter {
        /// Whether no aborted transaction is pending or in progress.
        fn is_idle(&self) -> bool {
            self.pending.is_empty() && self.aborted.is_empty()
        }
    }

    const TXN: i16 = 0x10;
    const CONTROL: i16 = 0x20;

    fn batch(producer_id: i64, base_offset: i64, len: i32, attributes: i16) -> BatchHeader {
        BatchHeader {
            base_offset,
            batch_length: 49,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes,
            last_offset_delta: len - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: 0,
            base_sequence: 0,
            record_count: len,
        }
    }

    fn data(producer_id: i64, base_offset: i64, len: i32) -> BatchHeader {
        batch(producer_id, base_offset, len, TXN)
    }

    fn marker(producer_id: i64, offset: i64) -> BatchHeader {
        batch(producer_id, offset, 1, TXN | CONTROL)
    }

    #[test]
    fn a_committed_transaction_is_delivered_and_its_marker_skipped() {
        let mut f = AbortedFilter::new([]);
        assert!(!f.skip_batch(&data(1, 0, 3), None));
        assert!(f.skip_batch(&marker(1, 3), Some(ControlType::Commit)));
        assert!(f.is_idle());
    }

    #[test]
    fn an_aborted_transaction_is_skipped_with_its_marker() {
        let mut f = AbortedFilter::new([(1, 0)]);
        assert!(f.skip_batch(&data(1, 0, 3), None));
        assert!(f.skip_batch(&data(1, 3, 2), None));
        assert!(f.skip_batch(&marker(1, 5), Some(ControlType::Abort)));
        assert!(f.is_idle());
    }

    #[test]
    fn interleaved_producers_are_filtered_independently() {
        // Producer 1 aborts (first offset 0), producer 2 commits, producer 3 aborts later.
        let mut f = AbortedFilter::new([(3, 4), (1, 0)]);
        assert!(f.skip_batch(&data(1, 0, 2), None));
        assert!(!f.skip_batch(&data(2, 2, 2), None));
        assert!(f.skip_batch(&data(3, 4, 1), None));
        assert!(f.skip_batch(&data(1, 5, 1), None));
        assert!(f.skip_batch(&marker(2, 6), Some(ControlType::Commit)));
        assert!(f.skip_batch(&marker(1, 7), Some(ControlType::Abort)));
        assert!(!f.skip_batch(&data(2, 8, 1), None));
        assert!(f.skip_batch(&data(3, 9, 1), None));
        assert!(f.skip_batch(&marker(3, 10), Some(ControlType::Abort)));
        assert!(f.is_idle());
    }

    #[test]
    fn a_new_transaction_after_an_abort_of_the_same_producer_is_delivered() {
        let mut f = AbortedFilter::new([(1, 10)]);
        assert!(f.skip_batch(&data(1, 10, 2), None));
        assert!(f.skip_batch(&marker(1, 12), Some(ControlType::Abort)));
        assert!(!f.skip_batch(&data(1, 13, 2), None));
        assert!(f.skip_batch(&marker(1, 15), Some(ControlType::Commit)));
    }

    #[test]
    fn an_aborted_entry_becomes_active_when_a_batch_reaches_its_first_offset() {
        // The aborted transaction starts at 12, inside a batch that starts at 10.
        let mut f = AbortedFilter::new([(1, 12)]);
        assert!(
            !f.skip_batch(&data(1, 0, 5), None),
            "an earlier committed transaction"
        );
        assert!(f.skip_batch(&marker(1, 5), Some(ControlType::Commit)));
        assert!(f.skip_batch(&data(1, 10, 5), None));
    }

    #[test]
    fn non_transactional_batches_of_an_aborted_producer_are_delivered() {
        let mut f = AbortedFilter::new([(1, 0)]);
        assert!(!f.skip_batch(&batch(1, 0, 2, 0), None));
        assert!(!f.skip_batch(&batch(-1, 2, 2, 0), None));
    }

    #[test]
    fn control_batches_are_skipped_whatever_their_marker() {
        let mut f = AbortedFilter::new([]);
        assert!(f.skip_batch(&marker(1, 0), None));
        assert!(f.skip_batch(&marker(1, 1), Some(ControlType::Other(7))));
    }
}
