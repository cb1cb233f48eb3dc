//! Huffman-coded literals (RFC 8878, 4.2): the tree description and the 1- and 4-stream
//! decoders.
//!
//! The decoding table has `1 << log` entries indexed by the next `log` bits of a stream;
//! each gives the symbol and how many of those bits its code takes. The 4-stream decoder
//! runs the streams in lockstep, decoding [`FAST_SYMBOLS`] symbols per stream between
//! refills while every stream has 8 bytes left, then finishes each stream alone.
//!
//! Two things save work on large sections and on repeated trees, as libzstd does:
//! - a literal section of at least [`DOUBLE_MIN_LITERALS`] bytes with codes of at most
//!   [`DOUBLE_LOG`] bits also builds a double-symbol table, whose one lookup yields the
//!   one or two symbols whose codes fit in the next [`DOUBLE_LOG`] bits;
//! - a tree description whose weights repeat the last ones (batches of similar data often
//!   describe the same tree) keeps the tables already built.

use super::bits::{load, BackwardBits};
use super::fse::{self, FseEntry};
use super::Error;

/// The longest code libzstd accepts (RFC 8878 says 11; libzstd decodes 12).
pub(super) const MAX_LOG: u32 = 12;

/// A decoding table: entry = `symbol << 8 | code length`; and, for large literal sections
/// with codes of at most 11 bits, a double-symbol table (see [`DOUBLE_LOG`]).
pub(super) struct HufTable {
    pub(super) log: u32,
    entries: Box<[u16; 1 << MAX_LOG]>,
    /// Indexed by the next [`DOUBLE_LOG`] bits: `first | second << 8 | bits << 16 |
    /// symbols << 28`, the one or two symbols whose codes fit in those bits.
    double: Box<[u32; 1 << DOUBLE_LOG]>,
    /// Whether `double` matches `entries`.
    double_built: bool,
    /// The weights `entries` was built from (`weights[..count]`, the implied last one
    /// excluded; `count` 0 before any): batches of similar data often describe the same
    /// tree, which then needs no rebuilding.
    weights: [u8; 256],
    count: usize,
}

/// Why 4-stream literals are refused when a stream has bits left (or missing) after its
/// symbols. The 1-stream reason differs: `zstd_diff` (`src/fuzzing.rs`) allows this one,
/// which libzstd's fast 4-stream decoder does not check.
pub(crate) const FOUR_STREAMS_NOT_AT_END: &str =
    "one of 4 Huffman streams does not end with its symbols";

/// The double-symbol table's index width: two codes whose lengths add up to at most this
/// decode with one lookup.
const DOUBLE_LOG: u32 = 11;

/// Literal sections at least this long are worth building the double-symbol table for
/// (2,048 entries).
const DOUBLE_MIN_LITERALS: usize = 4096;

impl HufTable {
    pub(super) fn new() -> Self {
        Self {
            log: 0,
            entries: Box::new([0; 1 << MAX_LOG]),
            double: Box::new([0; 1 << DOUBLE_LOG]),
            double_built: false,
            weights: [0; 256],
            count: 0,
        }
    }

    /// Builds the double-symbol table from the single-symbol one.
    fn build_double(&mut self) {
        let log = self.log;
        let single = |i: u32| u32::from(self.entries[(i >> (DOUBLE_LOG - log)) as usize]);
        for i in 0..1u32 << DOUBLE_LOG {
            let e1 = single(i);
            let n1 = e1 & 0xFF;
            let e2 = single((i << n1) & ((1 << DOUBLE_LOG) - 1));
            let n2 = e2 & 0xFF;
            self.double[i as usize] = if n1 + n2 <= DOUBLE_LOG {
                (e1 >> 8) | (e2 >> 8) << 8 | (n1 + n2) << 16 | 2 << 28
            } else {
                (e1 >> 8) | n1 << 16 | 1 << 28
            };
        }
        self.double_built = true;
    }

    /// Reads the tree description at the start of `src` into this table; returns the bytes
    /// it took.
    pub(super) fn read(&mut self, src: &[u8]) -> Result<usize, Error> {
        let mut weights = [0u8; 256];
        let header = *src.first().ok_or(Error::Corrupt("missing Huffman tree"))?;
        let (count, used) = if header >= 128 {
            let count = usize::from(header - 127);
            let bytes = count.div_ceil(2);
            let packed = src
                .get(1..1 + bytes)
                .ok_or(Error::Corrupt("truncated Huffman weights"))?;
            for (i, w) in weights[..count].iter_mut().enumerate() {
                let b = packed[i / 2];
                *w = if i % 2 == 0 { b >> 4 } else { b & 15 };
            }
            (count, 1 + bytes)
        } else {
            let size = usize::from(header);
            let body = src
                .get(1..1 + size)
                .ok_or(Error::Corrupt("truncated Huffman weights"))?;
            (fse_weights(body, &mut weights)?, 1 + size)
        };
        if count != self.count || weights != self.weights {
            let given = weights;
            self.count = 0;
            self.build(&mut weights, count)?;
            self.weights = given;
            self.count = count;
        }
        Ok(used)
    }

    /// Builds the table from `count` weights (the last symbol's weight is implied).
    fn build(&mut self, weights: &mut [u8; 256], count: usize) -> Result<(), Error> {
        let mut rank = [0u32; MAX_LOG as usize + 1];
        let mut total: u32 = 0;
        for &w in &weights[..count] {
            if u32::from(w) > MAX_LOG {
                return Err(Error::Corrupt("Huffman weight too large"));
            }
            rank[usize::from(w)] += 1;
            total += (1 << w) >> 1;
        }
        if total == 0 {
            return Err(Error::Corrupt("Huffman tree without weights"));
        }
        let log = 32 - total.leading_zeros();
        if log > MAX_LOG {
            return Err(Error::Corrupt("Huffman codes too long"));
        }
        let rest = (1u32 << log) - total;
        if !rest.is_power_of_two() {
            return Err(Error::Corrupt("Huffman weights do not complete a tree"));
        }
        let last = rest.trailing_zeros() + 1;
        weights[count] = last as u8;
        rank[last as usize] += 1;
        if rank[1] < 2 || rank[1] & 1 == 1 {
            return Err(Error::Corrupt(
                "Huffman tree with an odd count of longest codes",
            ));
        }
        // Codes by weight, lightest (longest) first, in symbol order within a weight.
        let mut start = [0u32; MAX_LOG as usize + 2];
        let mut next = 0u32;
        for w in 1..=log as usize {
            start[w] = next;
            next += rank[w] << (w - 1);
        }
        for (symbol, &w) in weights[..=count].iter().enumerate() {
            if w == 0 {
                continue;
            }
            let len = 1u32 << (w - 1);
            let entry = (symbol as u16) << 8 | (log + 1 - u32::from(w)) as u16;
            let at = start[usize::from(w)] as usize;
            self.entries[at..at + len as usize].fill(entry);
            start[usize::from(w)] += len;
        }
        self.log = log;
        self.double_built = false;
        Ok(())
    }

    /// Decodes one stream into all of `dst`.
    pub(super) fn decode_1(&self, src: &[u8], dst: &mut [u8]) -> Result<(), Error> {
        let mut b = BackwardBits::new(src)?;
        let shift = 64 - self.log;
        let mut i = 0;
        if self.log <= 11 {
            while b.pos >= 8 && i + FAST_SYMBOLS <= dst.len() {
                for slot in &mut dst[i..i + FAST_SYMBOLS] {
                    *slot = self.step(&mut b, shift);
                }
                i += FAST_SYMBOLS;
                b.refill();
            }
        }
        self.finish(&mut b, &mut dst[i..], shift);
        if b.is_end() {
            Ok(())
        } else {
            Err(Error::Corrupt(
                "the Huffman stream does not end with its symbols",
            ))
        }
    }

    /// Decodes the four streams described by the jump table at the start of `src` into the
    /// four quarters of `dst`.
    pub(super) fn decode_4(&mut self, src: &[u8], dst: &mut [u8]) -> Result<(), Error> {
        if src.len() < 10 || dst.len() < 6 {
            return Err(Error::Corrupt("literals too short for 4 Huffman streams"));
        }
        let size = |i: usize| usize::from(u16::from_le_bytes([src[i], src[i + 1]]));
        let (s1, s2, s3) = (size(0), size(2), size(4));
        let s4 = (src.len() - 6)
            .checked_sub(s1 + s2 + s3)
            .ok_or(Error::Corrupt("Huffman jump table past the literals"))?;
        let body = &src[6..];
        let (a, rest) = body.split_at(s1);
        let (b, rest) = rest.split_at(s2);
        let (c, d) = rest.split_at(s3);
        debug_assert_eq!(d.len(), s4);
        let total = dst.len();
        let quarter = total.div_ceil(4);
        let (o1, rest) = dst.split_at_mut(quarter);
        let (o2, rest) = rest.split_at_mut(quarter);
        let (o3, o4) = rest.split_at_mut(quarter);
        let mut r = [
            BackwardBits::new(a)?,
            BackwardBits::new(b)?,
            BackwardBits::new(c)?,
            BackwardBits::new(d)?,
        ];
        let shift = 64 - self.log;
        if self.log <= DOUBLE_LOG && total >= DOUBLE_MIN_LITERALS {
            if !self.double_built {
                self.build_double();
            }
            let mut outs = [o1, o2, o3, o4];
            let at = self.double_4(&mut r, &mut outs);
            for ((r, out), at) in r.iter_mut().zip(outs).zip(at) {
                self.finish(r, &mut out[at..], shift);
            }
            return if r.iter().all(BackwardBits::is_end) {
                Ok(())
            } else {
                Err(Error::Corrupt(FOUR_STREAMS_NOT_AT_END))
            };
        }
        let mut i = 0;
        // o4 is the shortest quarter.
        if self.log <= 11 {
            while i + FAST_SYMBOLS <= o4.len() && r.iter().all(|r| r.pos >= 8) {
                let (x1, x2, x3, x4) = (
                    &mut o1[i..i + FAST_SYMBOLS],
                    &mut o2[i..i + FAST_SYMBOLS],
                    &mut o3[i..i + FAST_SYMBOLS],
                    &mut o4[i..i + FAST_SYMBOLS],
                );
                let [r1, r2, r3, r4] = &mut r;
                for k in 0..FAST_SYMBOLS {
                    x1[k] = self.step(r1, shift);
                    x2[k] = self.step(r2, shift);
                    x3[k] = self.step(r3, shift);
                    x4[k] = self.step(r4, shift);
                }
                i += FAST_SYMBOLS;
                for r in &mut r {
                    r.refill();
                }
            }
        }
        let [r1, r2, r3, r4] = &mut r;
        self.finish(r1, &mut o1[i..], shift);
        self.finish(r2, &mut o2[i..], shift);
        self.finish(r3, &mut o3[i..], shift);
        self.finish(r4, &mut o4[i..], shift);
        if r.iter().all(BackwardBits::is_end) {
            Ok(())
        } else {
            Err(Error::Corrupt(FOUR_STREAMS_NOT_AT_END))
        }
    }

    /// The four streams with the double-symbol table, [`FAST_SYMBOLS`] lookups per stream
    /// in turn, while every stream has 8 bytes left to refill from and room for that many
    /// lookups of two symbols; returns how far each output got. Each refill leaves at least
    /// 57 real bits, and [`FAST_SYMBOLS`] lookups take at most 55, so no lookup sees bits
    /// past a stream's start.
    ///
    /// As in libzstd's fast loop, a stream's state is one word: its container shifted so
    /// that the next bit is the top one, with a sentinel bit set below the container's
    /// lowest bit; the bits read since the last refill are the word's trailing zeros.
    /// Consecutive streams' lookups are independent, so the processor overlaps them.
    fn double_4(&self, r: &mut [BackwardBits; 4], outs: &mut [&mut [u8]; 4]) -> [usize; 4] {
        let table = &*self.double;
        let mut at = [0usize; 4];
        let mut bits = [0u64; 4];
        for k in 0..4 {
            bits[k] = (r[k].container | 1) << r[k].consumed;
        }
        'outer: loop {
            for k in 0..4 {
                if r[k].pos < 8 || at[k] + 2 * FAST_SYMBOLS > outs[k].len() {
                    break 'outer;
                }
            }
            for _ in 0..FAST_SYMBOLS {
                for k in 0..4 {
                    let e = table[(bits[k] >> (64 - DOUBLE_LOG)) as usize];
                    let out = &mut outs[k][at[k]..at[k] + 2];
                    out[0] = e as u8;
                    out[1] = (e >> 8) as u8;
                    bits[k] <<= (e >> 16) & 0xF;
                    at[k] += (e >> 28) as usize;
                }
            }
            for k in 0..4 {
                let consumed = bits[k].trailing_zeros();
                let s = &mut r[k];
                s.pos -= (consumed >> 3) as usize;
                s.container = load(s.src, s.pos);
                bits[k] = (s.container | 1) << (consumed & 7);
            }
        }
        for k in 0..4 {
            r[k].consumed = bits[k].trailing_zeros();
        }
        at
    }

    /// Decodes one symbol.
    #[inline(always)]
    fn step(&self, b: &mut BackwardBits, shift: u32) -> u8 {
        let index = (b.container.wrapping_shl(b.consumed) >> shift) as usize;
        let e = self.entries[index & ((1 << MAX_LOG) - 1)];
        b.consumed += u32::from(e & 0xFF);
        (e >> 8) as u8
    }

    /// Decodes the rest of a stream symbol by symbol.
    fn finish(&self, b: &mut BackwardBits, dst: &mut [u8], shift: u32) {
        for slot in dst {
            b.refill();
            *slot = self.step(b, shift);
        }
    }
}

/// Symbols decoded per stream between refills: 5 codes of at most 11 bits fit in the 57
/// bits a refill guarantees.
const FAST_SYMBOLS: usize = 5;

/// Decodes FSE-compressed Huffman weights (RFC 8878, 4.2.1.2): two interleaved states over
/// one bitstream, until a state update reads past the stream's start; then the other state
/// gives the last weight. Returns how many weights.
fn fse_weights(src: &[u8], weights: &mut [u8; 256]) -> Result<usize, Error> {
    let (dist, used) = fse::read_distribution(src, 255, 6)?;
    let mut table = [FseEntry::default(); 64];
    fse::build(&dist, &mut table)?;
    let mut b = BackwardBits::new(&src[used..])?;
    let mut states = [b.read(dist.log) as usize, 0];
    b.refill();
    states[1] = b.read(dist.log) as usize;
    b.refill();
    let mut n = 0;
    let mut which = 0;
    loop {
        if n > 253 {
            return Err(Error::Corrupt("too many Huffman weights"));
        }
        let e = table[states[which] & 63];
        weights[n] = e.symbol;
        n += 1;
        states[which] = usize::from(e.base) + b.read(u32::from(e.nb_bits)) as usize;
        b.refill();
        if b.is_overflowed() {
            weights[n] = table[states[1 - which] & 63].symbol;
            n += 1;
            break;
        }
        which = 1 - which;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_weights_build_a_canonical_table() {
        // Weights for symbols 0..3: 1, 1, 2 and the implied last one. Total 1+1+2 = 4 ->
        // log 3, rest 4 -> the last symbol's weight is 3.
        let mut t = HufTable::new();
        // header 130 = 3 weights, packed 0x11, 0x20.
        let used = t.read(&[130, 0x11, 0x20]).unwrap();
        assert_eq!(used, 3);
        assert_eq!(t.log, 3);
        // Symbol 0 and 1 (weight 1): 3-bit codes at 0 and 1; symbol 2 (weight 2): 2 bits at
        // 2..4; symbol 3 (weight 3): 1 bit at 4..8.
        let e = |i: usize| (t.entries[i] >> 8, t.entries[i] & 0xFF);
        assert_eq!(e(0), (0, 3));
        assert_eq!(e(1), (1, 3));
        assert_eq!(e(2), (2, 2));
        assert_eq!(e(3), (2, 2));
        assert_eq!(e(4), (3, 1));
        assert_eq!(e(7), (3, 1));
    }

    #[test]
    fn weights_that_do_not_complete_a_tree_are_corrupt() {
        let mut t = HufTable::new();
        // Weights 1 and 0, the implied last 1: two 1-bit codes. Weights 1, 3, 0: total 5,
        // rest 3, not a power of two.
        assert!(t.read(&[129, 0x10]).is_ok());
        assert!(t.read(&[130, 0x13, 0x00]).is_err());
    }

    #[test]
    fn one_stream_decodes_to_the_exact_end() {
        // Table from the first test: symbol 3 = code "1", symbol 2 = "01", 1 = "001",
        // 0 = "000". Bits are read from the top of the stream: to decode [3, 2, 1] the
        // stream holds, from its end mark down, 1 01 001. Written forwards that is the bit
        // sequence reversed: 100 10 1, then the mark.
        let mut t = HufTable::new();
        t.read(&[130, 0x11, 0x20]).unwrap();
        // forward bits (LSB first): 1,0,0,1,0,1 then mark 1 -> byte 0b1_101001 = 0x69.
        let mut out = [0u8; 3];
        t.decode_1(&[0b0110_1001], &mut out).unwrap();
        assert_eq!(out, [3, 2, 1]);
        let mut longer = [0u8; 4];
        assert!(t.decode_1(&[0b0110_1001], &mut longer).is_err());
    }
}
