//! The iteration order of Java's `HashMap` and `HashSet`, where kafka-clients' assignors
//! let it decide: which member keeps its partitions first when not all can, which of two
//! equally old previous owners counts, which partition moves back. Reproducing it makes
//! the results equal to Java's for the same input, in the same order.
//!
//! A `java.util.HashMap` built by `put`s iterates its buckets in index order and each
//! bucket in insertion order (a resize splits a bucket keeping that order). The bucket of
//! a key is `(h ^ (h >>> 16)) & (capacity - 1)` with `h` its `hashCode()`; the capacity
//! starts at 16 and doubles when the size passes three quarters of it, or when a ninth key
//! lands in one bucket while the capacity is below 64. (From 64 on, such a bucket becomes a
//! tree, whose iteration order is not the insertion order: not reproduced, it takes nine
//! keys in one bucket of a table of 64 or more.)

use std::collections::{BTreeSet, HashMap};

/// Java's `String.hashCode`: over UTF-16 code units.
pub(super) fn string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// Java's `TopicPartition.hashCode`, given the topic's [`string_hash`].
pub(super) fn topic_partition_hash(topic_hash: i32, partition: i32) -> i32 {
    31i32
        .wrapping_add(partition)
        .wrapping_mul(31)
        .wrapping_add(topic_hash)
}

/// The order in which a Java `HashMap` (or `HashSet`) iterates its keys, kept up to date
/// through insertions and removals. Keys are named by a `u64` id chosen by the caller.
#[derive(Debug, Default)]
pub(super) struct HashOrder {
    capacity: usize,
    next_seq: u64,
    /// Each key's spread hash and insertion number.
    keys: HashMap<u64, (u32, u64)>,
    /// The keys in iteration order: (bucket, insertion number, id).
    order: BTreeSet<(usize, u64, u64)>,
    /// How many keys each non-empty bucket holds.
    bucket_len: HashMap<usize, usize>,
}

impl HashOrder {
    /// The keys `(id, hashCode)` put in this order into a new `HashMap`, in its iteration
    /// order.
    pub(super) fn of(keys: impl IntoIterator<Item = (u64, i32)>) -> Vec<u64> {
        let mut order = HashOrder::default();
        for (id, hash) in keys {
            order.insert(id, hash);
        }
        order.iter().collect()
    }

    fn bucket(&self, spread: u32) -> usize {
        spread as usize & (self.capacity - 1)
    }

    /// Java's `put` / `add` of key `id` whose `hashCode()` is `hash`; a key already present
    /// keeps its place.
    pub(super) fn insert(&mut self, id: u64, hash: i32) {
        if self.keys.contains_key(&id) {
            return;
        }
        if self.capacity == 0 {
            self.capacity = 16;
        }
        let h = hash as u32;
        let spread = h ^ (h >> 16);
        let bucket = self.bucket(spread);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.keys.insert(id, (spread, seq));
        self.order.insert((bucket, seq, id));
        let len = self.bucket_len.entry(bucket).or_default();
        *len += 1;
        // `treeifyBin` resizes a small table instead of making a tree.
        if *len > 8 && self.capacity < 64 {
            self.resize();
        }
        if self.keys.len() > self.capacity / 4 * 3 {
            self.resize();
        }
    }

    /// Java's `remove`.
    pub(super) fn remove(&mut self, id: u64) {
        if let Some((spread, seq)) = self.keys.remove(&id) {
            let bucket = self.bucket(spread);
            self.order.remove(&(bucket, seq, id));
            if let Some(len) = self.bucket_len.get_mut(&bucket) {
                *len -= 1;
                if *len == 0 {
                    self.bucket_len.remove(&bucket);
                }
            }
        }
    }

    fn resize(&mut self) {
        self.capacity *= 2;
        self.order.clear();
        self.bucket_len.clear();
        for (&id, &(spread, seq)) in &self.keys {
            let bucket = spread as usize & (self.capacity - 1);
            self.order.insert((bucket, seq, id));
            *self.bucket_len.entry(bucket).or_default() += 1;
        }
    }

    /// The first key Java's iterator returns.
    pub(super) fn first(&self) -> Option<u64> {
        self.order.first().map(|&(_, _, id)| id)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys in Java's iteration order.
    pub(super) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.order.iter().map(|&(_, _, id)| id)
    }
}

#[cfg(test)]
mod tests;
