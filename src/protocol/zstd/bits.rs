//! The two bit readers zstd needs (RFC 8878, 4.1 and 4.2.2).

use super::Error;

/// A backward bitstream: the encoder writes it forwards, the decoder reads it from the last
/// byte towards the first. The last byte's highest set bit marks where the bits begin.
///
/// The reader keeps the 8 bytes `src[pos..pos + 8]` in `container` (little-endian; a stream
/// shorter than 8 bytes is held zero-extended at the top, those top bits counted as already
/// consumed) and reads from its top. Invariants:
/// 1. `consumed` counts the bits of `container` already read, from its top; it can pass 64
///    only by reading past the stream's first bit, which [`Self::is_end`] then reports as
///    not the exact end (the reads return garbage, never a panic).
/// 2. After [`Self::refill`] with `pos >= 8` beforehand, at least 57 unread real bits are in
///    the container (`consumed <= 7`).
/// 3. The stream was read exactly to its end when `pos == 0 && consumed == 64`.
pub(super) struct BackwardBits<'a> {
    pub(super) src: &'a [u8],
    pub(super) container: u64,
    pub(super) consumed: u32,
    pub(super) pos: usize,
}

impl<'a> BackwardBits<'a> {
    /// Starts reading `src`. An empty stream or one whose last byte has no end mark is
    /// corrupt.
    pub(super) fn new(src: &'a [u8]) -> Result<Self, Error> {
        let last = *src.last().ok_or(Error::Corrupt("empty bitstream"))?;
        if last == 0 {
            return Err(Error::Corrupt("bitstream without its end mark"));
        }
        let padding = last.leading_zeros() + 1;
        if src.len() >= 8 {
            let pos = src.len() - 8;
            Ok(Self {
                src,
                container: load(src, pos),
                consumed: padding,
                pos,
            })
        } else {
            let container = src
                .iter()
                .rev()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            Ok(Self {
                src,
                container,
                consumed: (8 - src.len() as u32) * 8 + padding,
                pos: 0,
            })
        }
    }

    /// The next `n` bits (`n <= 56`) without consuming them; zeros past the stream's start.
    #[inline(always)]
    pub(super) fn peek(&self, n: u32) -> u64 {
        (self.container.wrapping_shl(self.consumed) >> 1) >> (63 - n)
    }

    /// Reads `n` bits (`n <= 56`).
    #[inline(always)]
    pub(super) fn read(&mut self, n: u32) -> u64 {
        let v = self.peek(n);
        self.consumed += n;
        v
    }

    /// Moves the container down by the whole bytes read (never below the stream's first
    /// byte).
    #[inline(always)]
    pub(super) fn refill(&mut self) {
        if self.pos >= 8 {
            self.pos -= (self.consumed >> 3) as usize;
            self.consumed &= 7;
            self.container = load(self.src, self.pos);
        } else if self.pos > 0 {
            let step = ((self.consumed >> 3) as usize).min(self.pos);
            self.pos -= step;
            self.consumed -= step as u32 * 8;
            self.container = load(self.src, self.pos);
        }
    }

    /// Whether the stream was read exactly to its first bit.
    pub(super) fn is_end(&self) -> bool {
        self.pos == 0 && self.consumed == 64
    }

    /// Whether more bits were read than the stream holds.
    pub(super) fn is_overflowed(&self) -> bool {
        self.pos == 0 && self.consumed > 64
    }
}

#[inline(always)]
pub(super) fn load(src: &[u8], pos: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&src[pos..pos + 8]);
    u64::from_le_bytes(b)
}

/// A forward bitstream read least-significant bit first (FSE table descriptions); bits past
/// the end read as zeros, and [`Self::bytes_used`] tells whether any were needed.
pub(super) struct ForwardBits<'a> {
    src: &'a [u8],
    bit: usize,
}

impl<'a> ForwardBits<'a> {
    pub(super) fn new(src: &'a [u8]) -> Self {
        Self { src, bit: 0 }
    }

    /// The next `n` bits (`n <= 32`) without consuming them.
    pub(super) fn peek(&self, n: u32) -> u32 {
        let byte = self.bit / 8;
        let mut b = [0u8; 8];
        let avail = self.src.len().saturating_sub(byte).min(8);
        if avail > 0 {
            b[..avail].copy_from_slice(&self.src[byte..byte + avail]);
        }
        let v = u64::from_le_bytes(b) >> (self.bit % 8);
        (v & ((1u64 << n) - 1)) as u32
    }

    pub(super) fn skip(&mut self, n: u32) {
        self.bit += n as usize;
    }

    pub(super) fn read(&mut self, n: u32) -> u32 {
        let v = self.peek(n);
        self.skip(n);
        v
    }

    /// The bytes the bits read so far span (rounded up).
    pub(super) fn bytes_used(&self) -> usize {
        self.bit.div_ceil(8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backward_stream_reads_from_its_end_mark_down_to_its_first_bit() {
        // Bits written forwards: 0b101 then 0b11, then the end mark: byte 0b0011_1101.
        let src = [0b0011_1101u8];
        let mut b = BackwardBits::new(&src).unwrap();
        assert_eq!(b.read(2), 0b11);
        assert_eq!(b.read(3), 0b101);
        assert!(b.is_end());
        b.read(1);
        assert!(b.is_overflowed());
    }

    #[test]
    fn a_long_backward_stream_refills_across_bytes() {
        // 20 bytes of 0xAA with an end mark byte 0x01 last: 160 bits of 1010...
        let mut src = vec![0xAAu8; 20];
        src.push(1);
        let mut b = BackwardBits::new(&src).unwrap();
        for _ in 0..80 {
            b.refill();
            assert_eq!(b.read(2), 0b10);
        }
        b.refill();
        assert!(b.is_end());
    }

    #[test]
    fn a_stream_without_end_mark_is_corrupt() {
        assert!(BackwardBits::new(&[]).is_err());
        assert!(BackwardBits::new(&[1, 0]).is_err());
    }

    #[test]
    fn forward_bits_read_lsb_first_and_zeros_past_the_end() {
        let mut f = ForwardBits::new(&[0b1010_0110, 0xFF]);
        assert_eq!(f.read(4), 0b0110);
        assert_eq!(f.read(8), 0b1111_1010);
        assert_eq!(f.read(8), 0b1111);
        assert_eq!(f.bytes_used(), 3);
    }
}
