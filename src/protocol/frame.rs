//! Request and response headers and size-prefixed framing.
//!
//! Request header v1 is `apiKey, apiVersion, correlationId, clientId` (the client id keeps
//! its int16 length even in v2); v2 appends a tagged-field section and is used for flexible
//! request versions. Response header v0 is the correlation id; v1 appends tagged fields and
//! is used for flexible responses, except ApiVersions whose response header is always v0.

use byteorder::{BigEndian, ByteOrder};

use super::api::Api;
use super::message::{Version, Wire};
use super::wire::{DecodeError, DecodeErrorKind, Reader, Writer};

/// Largest response frame we accept (the broker's own `fetch.max.bytes` default is 55 MiB;
/// a frame claiming more than this is treated as corrupt rather than allocated).
pub const MAX_FRAME: usize = 256 * 1024 * 1024;

/// The negotiated [`Version`] of API `A` at version `v`.
pub fn version_of<A: Api>(v: i16) -> Version {
    Version {
        v,
        flexible: v >= A::FLEXIBLE_FROM,
    }
}

/// Encodes a whole request frame: size prefix, header, body.
pub fn encode_request<A: Api>(req: &A, v: i16, correlation_id: i32, client_id: &str) -> Vec<u8> {
    let ver = version_of::<A>(v);
    let mut w = Writer::with_capacity(64);
    req.write(&mut w, ver);
    encode_request_frame(
        A::KEY,
        v,
        ver.flexible,
        correlation_id,
        client_id,
        &w.into_inner(),
    )
}

/// Frames an already encoded request body: size prefix, header (v2 when `flexible`), body.
pub fn encode_request_frame(
    api_key: i16,
    version: i16,
    flexible: bool,
    correlation_id: i32,
    client_id: &str,
    body: &[u8],
) -> Vec<u8> {
    let mut w = Writer::with_capacity(16 + client_id.len() + body.len());
    let size_at = w.reserve_i32();
    w.i16(api_key);
    w.i16(version);
    w.i32(correlation_id);
    w.nullable_string(Some(client_id), false);
    if flexible {
        w.empty_tagged_fields();
    }
    w.raw(body);
    let size = (w.len() - 4) as i32;
    w.patch_i32(size_at, size);
    w.into_inner()
}

/// Reads the size prefix of a frame, if four bytes are there. `Ok(None)` until they are;
/// an error for a negative or oversized length.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let n = BigEndian::read_i32(&buf[..4]);
    if n < 0 || n as usize > MAX_FRAME {
        return Err(DecodeError::new(DecodeErrorKind::BadLength(n as i64)).context("frame size"));
    }
    Ok(Some(n as usize))
}

/// Reads the correlation id at the start of a response body (without the size prefix).
pub fn correlation_id(body: &[u8]) -> Result<i32, DecodeError> {
    Reader::new(body)
        .i32()
        .map_err(|e| e.context("response header"))
}

/// Decodes a response body (frame without its size prefix) for API `A` at version `v`.
/// Trailing bytes are an error.
pub fn decode_response<A: Api>(body: &[u8], v: i16) -> Result<A::Response, DecodeError> {
    let ver = version_of::<A>(v);
    let mut r = Reader::new(body);
    r.i32().map_err(|e| e.context("response header"))?;
    if ver.flexible && A::TAGGED_RESPONSE_HEADER {
        r.skip_tagged_fields()
            .map_err(|e| e.context("response header"))?;
    }
    let resp = A::Response::read(&mut r, ver)?;
    r.finish().map_err(|e| e.context(A::NAME))?;
    Ok(resp)
}

/// Encodes a response frame (header and body, with size prefix). Used by tests and by the
/// fake broker that provokes faults a real broker will not produce on demand.
pub fn encode_response<A: Api>(resp: &A::Response, v: i16, correlation_id: i32) -> Vec<u8> {
    let ver = version_of::<A>(v);
    let mut w = Writer::new();
    let size_at = w.reserve_i32();
    w.i32(correlation_id);
    if ver.flexible && A::TAGGED_RESPONSE_HEADER {
        w.empty_tagged_fields();
    }
    resp.write(&mut w, ver);
    let size = (w.len() - 4) as i32;
    w.patch_i32(size_at, size);
    w.into_inner()
}

/// Decodes a request frame body (without size prefix) for API `A`: returns the version,
/// correlation id and request. Used by tests and the fake broker.
pub fn decode_request<A: Api>(body: &[u8]) -> Result<(i16, i32, A), DecodeError> {
    let mut r = Reader::new(body);
    let key = r.i16()?;
    if key != A::KEY {
        return Err(DecodeError::invalid("unexpected api key"));
    }
    let v = r.i16()?;
    let corr = r.i32()?;
    r.nullable_string(false)?;
    let ver = version_of::<A>(v);
    if ver.flexible {
        r.skip_tagged_fields()?;
    }
    let req = A::read(&mut r, ver)?;
    r.finish().map_err(|e| e.context(A::NAME))?;
    Ok((v, corr, req))
}
