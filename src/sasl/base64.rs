//! Base64 (RFC 4648): the standard alphabet with padding (SCRAM's nonces, salts, proofs and
//! signatures, RFC 5802) and the URL-safe alphabet without padding (JWS compact tokens for
//! OAUTHBEARER, RFC 7515).
//!
//! Decoding is strict, as SCRAM wants it: only the standard alphabet, the length a multiple
//! of four, padding only at the end and only as much as the last group needs; no
//! whitespace. Non-zero bits after the last full byte (`QQ==` vs `QR==`) are accepted and
//! ignored, as most decoders do. The standard codec exists only where SCRAM (or a test)
//! uses it.

/// The standard alphabet.
#[cfg(any(feature = "scram", test))]
const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The URL-safe alphabet.
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Encodes `data` with `alphabet`, padded with `=` to a multiple of four when `pad`.
fn encode_with(data: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 63) as usize]));
        }
        if pad {
            for _ in chars..4 {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 with padding.
#[cfg(any(feature = "scram", test))]
pub(crate) fn encode(data: &[u8]) -> String {
    encode_with(data, STANDARD, true)
}

/// URL-safe base64 without padding.
pub(crate) fn encode_url(data: &[u8]) -> String {
    encode_with(data, URL_SAFE, false)
}

/// Why a text is not standard base64.
#[cfg(any(feature = "scram", test))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// The length is not a multiple of four.
    Length,
    /// A byte outside the alphabet (at this offset), or `=` before the padding.
    Char(usize),
    /// More than two `=`, or padding that does not end the text.
    Padding,
}

#[cfg(any(feature = "scram", test))]
impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Length => f.write_str("length is not a multiple of 4"),
            DecodeError::Char(at) => write!(f, "invalid character at offset {at}"),
            DecodeError::Padding => f.write_str("invalid padding"),
        }
    }
}

/// The value of standard-alphabet character `c`.
#[cfg(any(feature = "scram", test))]
fn value(c: u8) -> Option<u32> {
    Some(u32::from(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    }))
}

/// Decodes standard base64 with padding, strictly (see the module docs). The output is
/// three quarters of the input's length at most, so its size is bounded by what was read.
#[cfg(any(feature = "scram", test))]
pub(crate) fn decode(text: &[u8]) -> Result<Vec<u8>, DecodeError> {
    if text.len() % 4 != 0 {
        return Err(DecodeError::Length);
    }
    let padding = text.iter().rev().take_while(|&&c| c == b'=').count();
    if padding > 2 {
        return Err(DecodeError::Padding);
    }
    let body = &text[..text.len() - padding];
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut acc = 0u32;
    for (i, &c) in body.iter().enumerate() {
        let v = match value(c) {
            Some(v) => v,
            None if c == b'=' => return Err(DecodeError::Padding),
            None => return Err(DecodeError::Char(i)),
        };
        acc = (acc << 6) | v;
        if i % 4 == 3 {
            out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]);
            acc = 0;
        }
    }
    // The last group: 2 characters carry one byte, 3 carry two (padding 2 and 1).
    match padding {
        2 => out.push((acc >> 4) as u8),
        1 => out.extend_from_slice(&[(acc >> 10) as u8, (acc >> 2) as u8]),
        _ => {}
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4648 section 10.
    const VECTORS: [(&str, &str); 7] = [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ];

    #[test]
    fn standard_encoding_matches_the_rfc_4648_vectors() {
        for (plain, b64) in VECTORS {
            assert_eq!(encode(plain.as_bytes()), b64);
            assert_eq!(decode(b64.as_bytes()).unwrap(), plain.as_bytes(), "{b64}");
        }
    }

    #[test]
    fn every_byte_value_and_length_round_trips() {
        let data: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for n in 0..data.len() {
            let text = encode(&data[..n]);
            assert_eq!(text.len(), n.div_ceil(3) * 4);
            assert_eq!(decode(text.as_bytes()).unwrap(), &data[..n]);
        }
        assert_eq!(encode(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn url_safe_encoding_has_no_padding_and_the_url_alphabet() {
        assert_eq!(encode_url(b""), "");
        assert_eq!(encode_url(b"f"), "Zg");
        assert_eq!(encode_url(b"fo"), "Zm8");
        assert_eq!(encode_url(b"foo"), "Zm9v");
        assert_eq!(encode_url(&[0xfb, 0xff]), "-_8");
        assert_eq!(encode_url(br#"{"alg":"none"}"#), "eyJhbGciOiJub25lIn0");
    }

    #[test]
    fn decoding_rejects_bad_lengths_characters_and_padding() {
        assert_eq!(decode(b"Zg="), Err(DecodeError::Length));
        assert_eq!(decode(b"Zm9vY"), Err(DecodeError::Length));
        assert_eq!(decode(b"Zm9v\nYg=="), Err(DecodeError::Length));
        assert_eq!(decode(b"Zm-v"), Err(DecodeError::Char(2)));
        assert_eq!(decode(b"Zm_v"), Err(DecodeError::Char(2)));
        assert_eq!(decode(b"Zm v"), Err(DecodeError::Char(2)));
        assert_eq!(decode("Zé=".as_bytes()), Err(DecodeError::Char(1)));
        assert_eq!(decode(b"Z==="), Err(DecodeError::Padding));
        assert_eq!(decode(b"===="), Err(DecodeError::Padding));
        assert_eq!(decode(b"Zg==Zm9v"), Err(DecodeError::Padding));
        assert_eq!(decode(b"Z=g="), Err(DecodeError::Padding));
        for e in [
            DecodeError::Length,
            DecodeError::Char(3),
            DecodeError::Padding,
        ] {
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn non_zero_trailing_bits_are_ignored() {
        assert_eq!(decode(b"Zh==").unwrap(), b"f");
        assert_eq!(decode(b"Zm9=").unwrap(), b"fo");
    }
}
