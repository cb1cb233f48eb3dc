//! Finite State Entropy tables (RFC 8878, 4.1): reading a table description and building
//! the decoding table from it.

use super::bits::ForwardBits;
use super::Error;

/// One state of a decoding table: the symbol it emits, and how to reach the next state
/// (`base + read(nb_bits)`).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(super) struct FseEntry {
    pub(super) symbol: u8,
    pub(super) nb_bits: u8,
    pub(super) base: u16,
}

/// A normalized distribution: per symbol, its share of the `1 << log` states, or -1 for
/// "less than one" (RFC 8878, 4.1.1).
pub(super) struct Distribution {
    pub(super) log: u32,
    pub(super) counts: [i16; 256],
    /// Symbols `0..symbols` are described.
    pub(super) symbols: usize,
}

impl Distribution {
    pub(super) fn new(log: u32, counts: &[i16]) -> Self {
        let mut d = Self {
            log,
            counts: [0; 256],
            symbols: counts.len(),
        };
        d.counts[..counts.len()].copy_from_slice(counts);
        d
    }
}

/// Reads a table description at the start of `src` for symbols `0..=max_symbol` with an
/// accuracy log at most `max_log`; returns it and the bytes it took.
pub(super) fn read_distribution(
    src: &[u8],
    max_symbol: usize,
    max_log: u32,
) -> Result<(Distribution, usize), Error> {
    let mut bits = ForwardBits::new(src);
    let log = bits.read(4) + 5;
    if log > max_log {
        return Err(Error::Corrupt("FSE accuracy log too large"));
    }
    let mut d = Distribution {
        log,
        counts: [0; 256],
        symbols: 0,
    };
    let mut remaining: i32 = (1 << log) + 1;
    let mut threshold: i32 = 1 << log;
    let mut nb_bits = log + 1;
    let mut symbol = 0usize;
    let mut previous_zero = false;
    loop {
        if previous_zero {
            // 2-bit repeat flags: 3 means "3 more zeros, and another flag".
            loop {
                let flag = bits.read(2) as usize;
                symbol += flag;
                if flag != 3 {
                    break;
                }
                if symbol > max_symbol + 1 {
                    break;
                }
            }
            if symbol > max_symbol {
                break;
            }
        }
        let max = (2 * threshold - 1) - remaining;
        let low = bits.peek(nb_bits - 1) as i32;
        let mut count = if low < max {
            bits.skip(nb_bits - 1);
            low
        } else {
            let mut c = bits.peek(nb_bits) as i32;
            bits.skip(nb_bits);
            if c >= threshold {
                c -= max;
            }
            c
        };
        count -= 1;
        remaining -= count.abs();
        d.counts[symbol] = count as i16;
        symbol += 1;
        previous_zero = count == 0;
        if remaining < threshold {
            if remaining <= 1 {
                break;
            }
            nb_bits = 32 - (remaining as u32).leading_zeros();
            threshold = 1 << (nb_bits - 1);
        }
        if symbol > max_symbol {
            break;
        }
    }
    if remaining != 1 {
        return Err(Error::Corrupt("FSE distribution does not add up"));
    }
    if symbol > max_symbol + 1 {
        return Err(Error::Corrupt("FSE distribution has too many symbols"));
    }
    let used = bits.bytes_used();
    if used > src.len() {
        return Err(Error::Corrupt("FSE distribution truncated"));
    }
    d.symbols = symbol;
    Ok((d, used))
}

/// Builds the decoding table of `d` into `table[..1 << d.log]` (RFC 8878, 4.1.1: symbols
/// spread by the fixed step, "less than one" symbols in the last states).
pub(super) fn build(d: &Distribution, table: &mut [FseEntry]) -> Result<(), Error> {
    let size = 1usize << d.log;
    let table = &mut table[..size];
    let mut next = [0u16; 256];
    let mut high = size - 1;
    let counts = &d.counts[..d.symbols];
    for (s, (&count, next)) in counts.iter().zip(next.iter_mut()).enumerate() {
        if count == -1 {
            table[high].symbol = s as u8;
            high = high.wrapping_sub(1);
            *next = 1;
        } else {
            *next = count as u16;
        }
    }
    let step = (size >> 1) + (size >> 3) + 3;
    let mask = size - 1;
    let mut position = 0usize;
    for (s, &count) in counts.iter().enumerate() {
        for _ in 0..count.max(0) {
            table[position].symbol = s as u8;
            position = (position + step) & mask;
            while position > high {
                position = (position + step) & mask;
            }
        }
    }
    if position != 0 {
        return Err(Error::Corrupt("FSE distribution does not fill its table"));
    }
    for e in table.iter_mut() {
        let n = &mut next[usize::from(e.symbol)];
        let state = u32::from(*n);
        *n += 1;
        let nb = d.log - (31 - state.leading_zeros());
        e.nb_bits = nb as u8;
        e.base = ((state << nb) - size as u32) as u16;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_spreads_its_symbols_and_every_state_leads_inside_it() {
        // zstd's predefined literal-length distribution.
        let counts = [
            4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1,
            1, 1, 1, -1, -1, -1, -1,
        ];
        let d = Distribution::new(6, &counts);
        let mut table = [FseEntry::default(); 64];
        build(&d, &mut table).unwrap();
        for e in &table {
            assert!(usize::from(e.base) + (1 << e.nb_bits) <= 64);
        }
        // The "less than one" symbols take the last states, one each, with a full reload.
        assert_eq!(table[63].symbol, 32);
        assert_eq!(table[63].nb_bits, 6);
        assert_eq!(table[60].symbol, 35);
        // Known spread start (libzstd's LL default table): states 0, 1 emit symbol 0.
        assert_eq!(
            (table[0].symbol, table[0].nb_bits, table[0].base),
            (0, 4, 0)
        );
        assert_eq!(
            (table[1].symbol, table[1].nb_bits, table[1].base),
            (0, 4, 16)
        );
    }

    #[test]
    fn a_description_reads_back_to_its_counts() {
        // Accuracy log 5 (0 + 5), then counts for two symbols 16+16 written as values + 1:
        // remaining 33, threshold 32, 6 bits: 17 -> needs the long form.
        // Build by hand with the forward writer below.
        let mut w = Writer::default();
        w.put(0, 4);
        // symbol 0: count 16 -> value 17; max = 63 - 33 = 30; low 5 bits of 17 = 17 < 30,
        // so 5 bits.
        w.put(17, 5);
        // remaining 17, threshold 16, nb_bits 5; max = 31 - 17 = 14; value 17 >= 14 ->
        // 5 bits of (17 + 14 = 31)? Value v with v & 15 >= 14 goes long: 17 + 14 = 31.
        w.put(31, 5);
        let (d, used) = read_distribution(&w.bytes(), 255, 6).unwrap();
        assert_eq!(d.log, 5);
        assert_eq!(&d.counts[..d.symbols], &[16, 16]);
        assert_eq!(used, 2);
    }

    #[test]
    fn a_description_over_the_accuracy_limit_or_not_adding_up_is_corrupt() {
        assert!(read_distribution(&[0x0F, 0, 0, 0], 255, 9).is_err());
        assert!(read_distribution(&[0x00], 255, 6).is_err());
    }

    #[derive(Default)]
    struct Writer {
        bits: Vec<bool>,
    }
    impl Writer {
        fn put(&mut self, v: u32, n: u32) {
            for i in 0..n {
                self.bits.push(v >> i & 1 == 1);
            }
        }
        fn bytes(&self) -> Vec<u8> {
            let mut out = vec![0u8; self.bits.len().div_ceil(8)];
            for (i, &b) in self.bits.iter().enumerate() {
                out[i / 8] |= u8::from(b) << (i % 8);
            }
            out
        }
    }
}
