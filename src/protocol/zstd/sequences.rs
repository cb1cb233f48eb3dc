//! The sequences section of a compressed block (RFC 8878, 3.1.1.3.2 and 3.1.1.4): its
//! header and tables, and the sequences, decoded and executed in one pass.
//!
//! A sequence copies `literal_length` literals to the output, then `match_length` bytes
//! from `offset` bytes back in the output. Output and history are one flat buffer (the
//! whole frame so far), so a match is a copy inside it: no window buffer, no second copy.

use super::bits::BackwardBits;
use super::fse::{self, Distribution, FseEntry};
use super::{Error, WILD};

/// One state of a sequence decoding table: the code's value (`base + read(extra)`) and the
/// next state (`next + read(nb_bits)`).
#[derive(Clone, Copy, Default, Debug)]
struct SeqEntry {
    base: u32,
    extra: u8,
    nb_bits: u8,
    next: u16,
}

/// What a table decodes.
#[derive(Clone, Copy, Debug)]
enum Kind {
    LiteralLength,
    Offset,
    MatchLength,
}

const LL_BASE: [u32; 36] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20, 22, 24, 28, 32, 40, 48, 64,
    128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
];
const LL_EXTRA: [u8; 36] = [
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11,
    12, 13, 14, 15, 16,
];
const ML_BASE: [u32; 53] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
    28, 29, 30, 31, 32, 33, 34, 35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027,
    2051, 4099, 8195, 16387, 32771, 65539,
];
const ML_EXTRA: [u8; 53] = [
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
];
const LL_DEFAULT: [i16; 36] = [
    4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1,
    -1, -1, -1, -1,
];
const ML_DEFAULT: [i16; 53] = [
    1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1,
];
const OF_DEFAULT: [i16; 29] = [
    1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1,
];

impl Kind {
    fn max_symbol(self) -> usize {
        match self {
            Kind::LiteralLength => 35,
            Kind::Offset => 31,
            Kind::MatchLength => 52,
        }
    }

    fn max_log(self) -> u32 {
        match self {
            Kind::LiteralLength | Kind::MatchLength => 9,
            Kind::Offset => 8,
        }
    }

    /// The code's base value and extra bits. Offset codes give the offset value
    /// (RFC 8878, 3.1.1.3.2.1.1), repeat codes included.
    fn value(self, symbol: u8) -> (u32, u8) {
        let s = usize::from(symbol);
        match self {
            Kind::LiteralLength => (LL_BASE[s], LL_EXTRA[s]),
            Kind::MatchLength => (ML_BASE[s], ML_EXTRA[s]),
            Kind::Offset => (1 << s, symbol),
        }
    }

    fn predefined(self) -> Distribution {
        match self {
            Kind::LiteralLength => Distribution::new(6, &LL_DEFAULT),
            Kind::MatchLength => Distribution::new(6, &ML_DEFAULT),
            Kind::Offset => Distribution::new(5, &OF_DEFAULT),
        }
    }
}

/// A sequence decoding table of `1 << log` states.
struct SeqTable {
    log: u32,
    entries: Box<[SeqEntry; 512]>,
}

impl SeqTable {
    fn new() -> Self {
        Self {
            log: 0,
            entries: Box::new([SeqEntry::default(); 512]),
        }
    }

    fn build(&mut self, kind: Kind, d: &Distribution) -> Result<(), Error> {
        let mut states = [FseEntry::default(); 512];
        fse::build(d, &mut states)?;
        for (e, s) in self.entries.iter_mut().zip(&states[..1 << d.log]) {
            let (base, extra) = kind.value(s.symbol);
            *e = SeqEntry {
                base,
                extra,
                nb_bits: s.nb_bits,
                next: s.base,
            };
        }
        self.log = d.log;
        Ok(())
    }

    fn rle(&mut self, kind: Kind, symbol: u8) {
        let (base, extra) = kind.value(symbol);
        self.entries[0] = SeqEntry {
            base,
            extra,
            nb_bits: 0,
            next: 0,
        };
        self.log = 0;
    }
}

/// Which table a block's sequences use for one kind of code.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Active {
    /// None yet in this frame: a block repeating the previous table is corrupt.
    Nothing,
    Predefined,
    Own,
}

/// The tables for one kind of code: the predefined one, built once, and the one the frame's
/// blocks described last.
struct Slot {
    kind: Kind,
    predefined: SeqTable,
    own: SeqTable,
    active: Active,
}

impl Slot {
    fn new(kind: Kind) -> Self {
        let mut predefined = SeqTable::new();
        // The predefined distributions are valid: building them cannot fail.
        let built = predefined.build(kind, &kind.predefined());
        debug_assert!(built.is_ok());
        Self {
            kind,
            predefined,
            own: SeqTable::new(),
            active: Active::Nothing,
        }
    }

    /// Reads this kind's table for a block in `mode` from the start of `src`; returns the
    /// bytes it took.
    fn read(&mut self, mode: u8, src: &[u8]) -> Result<usize, Error> {
        match mode {
            0 => {
                self.active = Active::Predefined;
                Ok(0)
            }
            1 => {
                let &symbol = src
                    .first()
                    .ok_or(Error::Corrupt("truncated sequence table"))?;
                if usize::from(symbol) > self.kind.max_symbol() {
                    return Err(Error::Corrupt("sequence code out of range"));
                }
                self.own.rle(self.kind, symbol);
                self.active = Active::Own;
                Ok(1)
            }
            2 => {
                let (d, used) =
                    fse::read_distribution(src, self.kind.max_symbol(), self.kind.max_log())?;
                self.own.build(self.kind, &d)?;
                self.active = Active::Own;
                Ok(used)
            }
            _ => match self.active {
                Active::Nothing => Err(Error::Corrupt("sequence table repeated before any")),
                _ => Ok(0),
            },
        }
    }

    fn table(&self) -> &SeqTable {
        match self.active {
            Active::Own => &self.own,
            _ => &self.predefined,
        }
    }
}

/// The sequence tables a frame's blocks share.
pub(super) struct SeqTables {
    ll: Slot,
    of: Slot,
    ml: Slot,
}

impl SeqTables {
    pub(super) fn new() -> Self {
        Self {
            ll: Slot::new(Kind::LiteralLength),
            of: Slot::new(Kind::Offset),
            ml: Slot::new(Kind::MatchLength),
        }
    }

    /// Forgets the previous frame's tables.
    pub(super) fn reset(&mut self) {
        self.ll.active = Active::Nothing;
        self.of.active = Active::Nothing;
        self.ml.active = Active::Nothing;
    }

    /// Reads the sequences section header at the start of `src`: the number of sequences
    /// and the bytes it took (tables included).
    pub(super) fn read_header(&mut self, src: &[u8]) -> Result<(usize, usize), Error> {
        let truncated = Error::Corrupt("truncated sequences section");
        let b0 = *src.first().ok_or(truncated)?;
        let (count, mut at) = match b0 {
            0..=127 => (usize::from(b0), 1),
            128..=254 => {
                let b1 = *src.get(1).ok_or(truncated)?;
                ((usize::from(b0 - 128) << 8) + usize::from(b1), 2)
            }
            255 => {
                let b = src.get(1..3).ok_or(truncated)?;
                (usize::from(u16::from_le_bytes([b[0], b[1]])) + 0x7F00, 3)
            }
        };
        if count == 0 {
            if at != src.len() {
                return Err(Error::Corrupt("bytes after an empty sequences section"));
            }
            return Ok((0, at));
        }
        let modes = *src.get(at).ok_or(truncated)?;
        if modes & 3 != 0 {
            return Err(Error::Corrupt("reserved bits set in the sequences header"));
        }
        at += 1;
        at += self.ll.read(modes >> 6, &src[at..])?;
        at += self.of.read((modes >> 4) & 3, &src[at..])?;
        at += self.ml.read((modes >> 2) & 3, &src[at..])?;
        Ok((count, at))
    }
}

/// Where a block's sequences write.
pub(super) struct Target<'a> {
    /// The output buffer; `out[frame_start..pos]` is the frame so far, the bytes past `pos`
    /// are scratch the copies may overwrite.
    pub(super) out: &'a mut [u8],
    pub(super) pos: usize,
    pub(super) frame_start: usize,
    /// Matches reach at most this far back.
    pub(super) window: u64,
    /// The block's output must end at or before `cap`...
    pub(super) cap: usize,
    /// ...and past `corrupt_past` that is the input's fault rather than the output limit's.
    pub(super) corrupt_past: usize,
}

impl Target<'_> {
    /// Why the output cannot go past `cap`: the block's own maximum, or the caller's limit.
    pub(super) fn past_cap(&self) -> Error {
        if self.cap == self.corrupt_past {
            Error::Corrupt("block larger than its maximum size")
        } else {
            Error::TooLarge
        }
    }
}

/// Decodes `count` sequences from `bitstream` with `tables` and executes them against
/// `literals[..literal_count]` (which may extend past that: the copies read up to
/// [`WILD`] bytes ahead when it does), then appends the literals left.
pub(super) fn execute(
    tables: &SeqTables,
    bitstream: &[u8],
    count: usize,
    literals: &[u8],
    literal_count: usize,
    t: &mut Target,
    reps: &mut [u32; 3],
) -> Result<(), Error> {
    let (ll_t, of_t, ml_t) = (tables.ll.table(), tables.of.table(), tables.ml.table());
    let mut b = BackwardBits::new(bitstream)?;
    let mut ll_s = b.read(ll_t.log) as usize;
    let mut of_s = b.read(of_t.log) as usize;
    let mut ml_s = b.read(ml_t.log) as usize;
    let out = &mut *t.out;
    let mut op = t.pos;
    let mut lp = 0usize;
    for i in 0..count {
        b.refill();
        let of_e = of_t.entries[of_s & 511];
        let ml_e = ml_t.entries[ml_s & 511];
        let ll_e = ll_t.entries[ll_s & 511];
        let of_value = of_e.base.wrapping_add(b.read(u32::from(of_e.extra)) as u32);
        let ml = ml_e.base as usize + b.read(u32::from(ml_e.extra)) as usize;
        b.refill();
        let ll = ll_e.base as usize + b.read(u32::from(ll_e.extra)) as usize;
        if i + 1 < count {
            ll_s = usize::from(ll_e.next) + b.read(u32::from(ll_e.nb_bits)) as usize;
            ml_s = usize::from(ml_e.next) + b.read(u32::from(ml_e.nb_bits)) as usize;
            of_s = usize::from(of_e.next) + b.read(u32::from(of_e.nb_bits)) as usize;
        }
        let offset = if of_value > 3 {
            reps[2] = reps[1];
            reps[1] = reps[0];
            reps[0] = of_value - 3;
            reps[0]
        } else {
            let index = (of_value - 1) as usize + usize::from(ll == 0);
            if index == 0 {
                reps[0]
            } else {
                let o = if index == 3 {
                    reps[0].wrapping_sub(1)
                } else {
                    reps[index]
                };
                if o == 0 {
                    return Err(Error::Corrupt("repeated offset of zero"));
                }
                if index != 1 {
                    reps[2] = reps[1];
                }
                reps[1] = reps[0];
                reps[0] = o;
                o
            }
        } as usize;

        let literal_end = lp + ll;
        if literal_end > literal_count {
            return Err(Error::Corrupt(
                "sequence takes more literals than the block has",
            ));
        }
        let match_start = op + ll;
        let end = match_start + ml;
        if end > t.cap {
            return Err(t.past_cap());
        }
        if offset > match_start - t.frame_start || offset as u64 > t.window {
            return Err(Error::Corrupt("match offset before the frame or window"));
        }
        // Literals: one 16-byte copy when both buffers have room past the run.
        if ll <= 16 && lp + 16 <= literals.len() && op + 16 <= out.len() {
            let mut chunk = [0u8; 16];
            chunk.copy_from_slice(&literals[lp..lp + 16]);
            out[op..op + 16].copy_from_slice(&chunk);
        } else {
            out[op..match_start].copy_from_slice(&literals[lp..literal_end]);
        }
        lp = literal_end;
        copy_match(out, match_start - offset, match_start, ml);
        op = end;
    }
    if !b.is_end() {
        return Err(Error::Corrupt("sequences do not end with their bitstream"));
    }
    let rest = literal_count - lp;
    if op + rest > t.cap {
        return Err(t.past_cap());
    }
    out[op..op + rest].copy_from_slice(&literals[lp..literal_count]);
    t.pos = op + rest;
    Ok(())
}

/// Copies `len` bytes from `src` to `dst` (`src < dst`) in `out`, as a byte-by-byte copy
/// would (so an overlapping match repeats its pattern). May write up to [`WILD`] bytes past
/// `dst + len` when `out` has them.
#[inline(always)]
fn copy_match(out: &mut [u8], src: usize, dst: usize, len: usize) {
    let offset = dst - src;
    let end = dst + len;
    if end + WILD <= out.len() && offset >= 8 {
        let (mut s, mut d) = (src, dst);
        if offset >= 16 {
            while d < end {
                let mut chunk = [0u8; 16];
                chunk.copy_from_slice(&out[s..s + 16]);
                out[d..d + 16].copy_from_slice(&chunk);
                s += 16;
                d += 16;
            }
        } else {
            while d < end {
                let mut chunk = [0u8; 8];
                chunk.copy_from_slice(&out[s..s + 8]);
                out[d..d + 8].copy_from_slice(&chunk);
                s += 8;
                d += 8;
            }
        }
    } else if offset >= len {
        out.copy_within(src..src + len, dst);
    } else {
        // The pattern `out[src..dst]` repeats: copy it, then twice as much, and so on.
        let mut done = 0;
        while done < len {
            let n = (len - done).min(dst + done - src);
            out.copy_within(src..src + n, dst + done);
            done += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_matches_repeat_their_pattern() {
        for offset in 1..20 {
            for len in 0..70 {
                let mut out: Vec<u8> = (0..offset as u8).collect();
                out.resize(offset + len + WILD + 40, 0xEE);
                let mut expected = out[..offset].to_vec();
                for i in 0..len {
                    expected.push(expected[i]);
                }
                copy_match(&mut out, 0, offset, len);
                assert_eq!(
                    &out[..offset + len],
                    &expected[..],
                    "offset {offset} len {len}"
                );
            }
        }
    }

    #[test]
    fn predefined_tables_decode_the_rfc_values() {
        let t = SeqTables::new();
        let ll = t.ll.predefined.entries[0];
        assert_eq!((ll.base, ll.extra, ll.nb_bits, ll.next), (0, 0, 4, 0));
        assert_eq!(t.of.predefined.log, 5);
        assert_eq!(t.ml.predefined.log, 6);
    }

    #[test]
    fn a_header_with_reserved_bits_or_a_repeat_before_any_table_is_corrupt() {
        let mut t = SeqTables::new();
        assert!(t.read_header(&[1, 0b0000_0001]).is_err());
        assert!(t.read_header(&[1, 0b1100_0000]).is_err());
        assert_eq!(t.read_header(&[1, 0]).unwrap(), (1, 2));
        assert_eq!(t.read_header(&[0]).unwrap(), (0, 1));
        assert!(t.read_header(&[0, 0]).is_err());
        // Repeat after a predefined table is fine.
        assert_eq!(
            t.read_header(&[0xFF, 0, 0, 0b1111_1100]).unwrap(),
            (0x7F00, 4)
        );
    }
}
