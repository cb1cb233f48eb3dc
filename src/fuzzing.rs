//! Fuzzing entry points: the cargo-fuzz targets in `fuzz/` call these, and the unit tests
//! below replay the committed corpora and mutate the recorded real Fetch responses in
//! `fuzz/recorded/` on stable.
//!
//! Each entry point takes arbitrary bytes and must never panic, abort or allocate without
//! bound. They only glue the library's own decoding paths together (framing, the response
//! decoders, [`BatchIter`], [`decompress`], [`RecordIter`], [`HeaderIter`], the consumer
//! protocol payloads, the SASL authenticator and its mechanisms); a panic in
//! one is a bug in those paths, or a broken invariant they promise (checked with
//! `assert!` here, so the fuzzer reports it).
//!
//! Compiled for tests, and public (hidden) with the `fuzzing` feature only; the release
//! library never contains it.
//!
//! [`HeaderIter`]: crate::protocol::records::HeaderIter

use std::hint::black_box;

use crate::protocol::api::api_versions::{self, ApiVersionsRequest};
use crate::protocol::api::consumer_group_heartbeat::ConsumerGroupHeartbeatRequest;
use crate::protocol::api::fetch::{FetchRequest, FetchResponse};
use crate::protocol::api::find_coordinator::FindCoordinatorRequest;
use crate::protocol::api::heartbeat::HeartbeatRequest;
use crate::protocol::api::join_group::JoinGroupRequest;
use crate::protocol::api::leave_group::LeaveGroupRequest;
use crate::protocol::api::list_offsets::ListOffsetsRequest;
use crate::protocol::api::metadata::MetadataRequest;
use crate::protocol::api::offset_commit::OffsetCommitRequest;
use crate::protocol::api::offset_fetch::OffsetFetchRequest;
use crate::protocol::api::offset_for_leader_epoch::OffsetForLeaderEpochRequest;
use crate::protocol::api::sasl_authenticate::{SaslAuthenticateRequest, SaslAuthenticateResponse};
use crate::protocol::api::sasl_handshake::{SaslHandshakeRequest, SaslHandshakeResponse};
use crate::protocol::api::sync_group::SyncGroupRequest;
use crate::protocol::api::Api;
use crate::protocol::consumer_protocol::{
    is_empty_payload, ConsumerProtocolAssignment, ConsumerProtocolSubscription,
};
use crate::protocol::frame;
use crate::protocol::message::Bytes;
use crate::protocol::records::testing::{encode_batch, BatchSpec};
use crate::protocol::records::{
    control_type, decompress, BatchHeader, BatchIter, Compression, RecordIter,
};
use crate::protocol::wire::DecodeError;
use crate::sasl::{AuthError, AuthErrorKind, Authenticator, Credentials, Step};
use crate::security::{OAuthBearerToken, SaslMechanism, Secret};

/// Decompression limit for one batch (the fuzzer's memory stays bounded).
pub const DECOMPRESS_LIMIT: usize = 1 << 20;

/// Attribute bits a codec target may set besides the codec: timestamp type, transactional,
/// control.
const ATTR_FLAGS: u8 = 0x38;

/// One API whose responses the targets decode.
#[derive(Debug, Clone, Copy)]
pub struct ApiEntry {
    /// The API key.
    pub key: i16,
    /// Its name.
    pub name: &'static str,
    /// Lowest version we speak.
    pub min: i16,
    /// Highest version we speak.
    pub max: i16,
    /// Decodes a response body (without size prefix) at a version in `min..=max`; `true`
    /// when it decoded.
    pub decode: fn(&[u8], i16) -> bool,
}

/// The table entry of request type `A`.
const fn entry<A: Api>() -> ApiEntry {
    ApiEntry {
        key: A::KEY,
        name: A::NAME,
        min: A::MIN_VERSION,
        max: A::MAX_VERSION,
        decode: decode_as::<A>,
    }
}

fn decode_as<A: Api>(body: &[u8], v: i16) -> bool {
    match frame::decode_response::<A>(body, v) {
        Ok(resp) => {
            black_box(&resp);
            true
        }
        Err(e) => {
            touch_decode_error(&e);
            false
        }
    }
}

/// Every API in `protocol::api`, one line each, at every version its `Api` consts claim.
pub static APIS: &[ApiEntry] = &[
    entry::<ApiVersionsRequest>(),
    entry::<MetadataRequest>(),
    entry::<ListOffsetsRequest>(),
    entry::<FetchRequest>(),
    entry::<FindCoordinatorRequest>(),
    entry::<OffsetCommitRequest>(),
    entry::<OffsetFetchRequest>(),
    entry::<OffsetForLeaderEpochRequest>(),
    entry::<JoinGroupRequest>(),
    entry::<HeartbeatRequest>(),
    entry::<LeaveGroupRequest>(),
    entry::<SyncGroupRequest>(),
    entry::<ConsumerGroupHeartbeatRequest>(),
    entry::<SaslHandshakeRequest>(),
    entry::<SaslAuthenticateRequest>(),
];

/// Picks an API and one of its versions: the API whose key is `key` (else one by `key`
/// modulo the table), the version `version` if that API speaks it (else one of its versions
/// by `version` modulo its range). Real keys and versions select themselves, so corpus
/// files keep their meaning when APIs are added.
pub fn pick(key: i16, version: i16) -> (&'static ApiEntry, i16) {
    let e = APIS
        .iter()
        .find(|e| e.key == key)
        .unwrap_or(&APIS[key as u16 as usize % APIS.len()]);
    let v = if (e.min..=e.max).contains(&version) {
        version
    } else {
        let span = (e.max - e.min + 1) as u16;
        e.min + (version as u16 % span) as i16
    };
    (e, v)
}

/// The correlation id the `frame` target (and `fuzz/record`) gives a response of API `key`
/// at version `v`: the key in the high 16 bits, the version in the low 16.
pub fn correlation_for(key: i16, v: i16) -> i32 {
    ((key as u16 as u32) << 16 | v as u16 as u32) as i32
}

/// Target `frame`: a byte stream as a connection receives it, one or more frames. Each
/// complete frame's size prefix goes through `frame_len`, its correlation id through
/// `correlation_id`, and its body to the decoder of the API and version the correlation id
/// names ([`correlation_for`], [`pick`]); Fetch bodies have their record sets decoded, and
/// ApiVersions bodies also go through `fallback_version`.
pub fn frame(data: &[u8]) {
    let mut rest = data;
    loop {
        let n = match frame::frame_len(rest) {
            Ok(Some(n)) => n,
            Ok(None) => return,
            Err(e) => return touch_decode_error(&e),
        };
        let Some(body) = rest.get(4..4 + n) else {
            return; // an incomplete frame: the connection would wait for more bytes
        };
        rest = &rest[4 + n..];
        let corr = match frame::correlation_id(body) {
            Ok(c) => c,
            Err(e) => {
                touch_decode_error(&e);
                continue;
            }
        };
        let (api, v) = pick((corr >> 16) as i16, corr as i16);
        if api.key == FetchRequest::KEY {
            let _ = black_box(fetch_body(body, v, true));
        } else {
            black_box((api.decode)(body, v));
        }
        if api.key == ApiVersionsRequest::KEY {
            black_box(api_versions::fallback_version(body));
        }
    }
}

/// Target `response`: `data[0]` names the API and `data[1]` the version ([`pick`]); the rest
/// is a response body (correlation id, header, fields) for `decode_response`, and also
/// goes through ApiVersions' `fallback_version`.
pub fn response(data: &[u8]) {
    let [key, version, body @ ..] = data else {
        return;
    };
    let (api, v) = pick(*key as i16, *version as i16);
    black_box((api.decode)(body, v));
    black_box(api_versions::fallback_version(body));
}

/// Target `consumer_protocol`: `data` is a consumer protocol payload (JoinGroup metadata
/// or SyncGroup assignment), decoded both as a [`ConsumerProtocolSubscription`] and as a
/// [`ConsumerProtocolAssignment`]. Checks that only empty input fails as empty, and that
/// whatever decodes comes back unchanged from our encoding of it (v3 carries every field).
pub fn consumer_protocol(data: &[u8]) {
    match ConsumerProtocolSubscription::decode(data) {
        Ok(s) => {
            let again = ConsumerProtocolSubscription::decode(&s.encode());
            assert_eq!(again.as_ref(), Ok(&s), "subscription round trip");
        }
        Err(e) => {
            assert_eq!(is_empty_payload(&e), data.is_empty(), "{e}");
            touch_decode_error(&e);
        }
    }
    match ConsumerProtocolAssignment::decode(data) {
        Ok(a) => {
            let again = ConsumerProtocolAssignment::decode(&a.encode());
            assert_eq!(again.as_ref(), Ok(&a), "assignment round trip");
        }
        Err(e) => {
            assert_eq!(is_empty_payload(&e), data.is_empty(), "{e}");
            touch_decode_error(&e);
        }
    }
}

/// Target `record_set`: bit 0 of `data[0]` turns CRC checks on; the rest is a record set
/// (a Fetch partition's `Records`), decoded batch by batch, each decompressed (at most
/// [`DECOMPRESS_LIMIT`]) and every record, key, value and header read.
pub fn record_set(data: &[u8]) {
    let Some((&flags, set)) = data.split_first() else {
        return;
    };
    black_box(decode_record_set(set, flags & 1 != 0));
}

/// Target `batch_gzip`: see [`batch_with_codec`].
pub fn batch_gzip(data: &[u8]) {
    batch_with_codec(Compression::Gzip, data);
}

/// Target `batch_snappy`: see [`batch_with_codec`].
pub fn batch_snappy(data: &[u8]) {
    batch_with_codec(Compression::Snappy, data);
}

/// Target `batch_lz4`: see [`batch_with_codec`].
pub fn batch_lz4(data: &[u8]) {
    batch_with_codec(Compression::Lz4, data);
}

/// Target `batch_zstd`: see [`batch_with_codec`].
pub fn batch_zstd(data: &[u8]) {
    batch_with_codec(Compression::Zstd, data);
}

/// The codec targets: `data[0..2]` is the record count (big-endian `u16`), `data[2] & 0x38`
/// the other attribute bits (timestamp type, transactional, control), and the rest the
/// compressed records section. It is wrapped in a valid batch (codec attribute, correct CRC-32C) so every input
/// reaches the decompressor and the records behind it, then decoded with CRC checks on.
pub fn batch_with_codec(c: Compression, data: &[u8]) {
    let [c0, c1, attrs, section @ ..] = data else {
        return;
    };
    let batch = codec_batch(c, u16::from_be_bytes([*c0, *c1]), *attrs, section);
    black_box(decode_record_set(&batch, true));
}

/// The batch [`batch_with_codec`] decodes.
pub fn codec_batch(c: Compression, count: u16, attrs: u8, section: &[u8]) -> Vec<u8> {
    encode_batch(&BatchSpec {
        base_offset: 1000,
        partition_leader_epoch: 3,
        attributes: c.code() | (attrs & ATTR_FLAGS) as i16,
        last_offset_delta: Some(count.saturating_sub(1) as i32),
        base_timestamp: 1_700_000_000_000,
        max_timestamp: Some(1_700_000_000_999),
        producer_id: 7,
        producer_epoch: 0,
        base_sequence: 0,
        records_section: Some(section),
        record_count: Some(count as i32),
        ..BatchSpec::default()
    })
}

/// Target `fetch_response`: `data[0]` names the Fetch version ([`pick`]), bit 0 of `data[1]`
/// turns CRC checks on, the rest is a Fetch response body; it is decoded, then every
/// partition's record set as in [`record_set`].
pub fn fetch_response(data: &[u8]) {
    let [version, flags, body @ ..] = data else {
        return;
    };
    let (_, v) = pick(FetchRequest::KEY, *version as i16);
    let _ = black_box(fetch_body(body, v, flags & 1 != 0));
}

/// What decoding some record sets found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Batches yielded by [`BatchIter`].
    pub batches: usize,
    /// Records yielded by [`RecordIter`].
    pub records: usize,
    /// Control records among them.
    pub control_records: usize,
    /// Errors met (each ends its record set or batch).
    pub errors: usize,
    /// Bytes of keys, values, header keys and header values read.
    pub bytes: usize,
}

impl Decoded {
    fn add(&mut self, o: Decoded) {
        self.batches += o.batches;
        self.records += o.records;
        self.control_records += o.control_records;
        self.errors += o.errors;
        self.bytes += o.bytes;
    }
}

/// A decoded Fetch response and what its record sets held.
#[derive(Debug)]
pub struct FetchDecoded {
    /// The response.
    pub response: FetchResponse,
    /// All partitions' record sets together.
    pub records: Decoded,
}

/// Decodes a Fetch response body at version `v`, then every partition's record set.
pub fn fetch_body(body: &[u8], v: i16, check_crc: bool) -> Result<FetchDecoded, DecodeError> {
    let response = match frame::decode_response::<FetchRequest>(body, v) {
        Ok(r) => r,
        Err(e) => {
            touch_decode_error(&e);
            return Err(e);
        }
    };
    let mut records = Decoded::default();
    for t in &response.responses {
        black_box((&t.topic, t.topic_id.to_string()));
        for p in &t.partitions {
            black_box((p.partition_index, p.error_code, p.high_watermark));
            for a in p.aborted_transactions.iter().flatten() {
                black_box((a.producer_id, a.first_offset));
            }
            // The decoder promises the range lies in the body: index it, so a broken
            // promise is a crash the fuzzer reports.
            let set = &body[p.records.start..p.records.start + p.records.len];
            records.add(decode_record_set(set, check_crc));
            consumer_path(body, (p.records.start, p.records.len), check_crc);
        }
    }
    Ok(FetchDecoded { response, records })
}

/// The consumer's own path for one partition's records: [`build_chunk`] within a small
/// byte budget, from offset 0 and from the first batch's offset. Checks what the fetcher
/// relies on: the budget is never charged beyond its cap (besides the frame itself), the
/// position never goes back, no record below the fetch offset is kept, and everything is
/// given back when the chunk is dropped.
fn consumer_path(body: &[u8], records: (usize, usize), check_crcs: bool) {
    use crate::buffer::{Budget, FrameBuf};
    use crate::fetch::chunk::{build_chunk, FetchedFrame, PartitionInput};
    use crate::types::{PositionEpoch, TopicPartition};
    use std::sync::Arc;

    const CAP: usize = 1 << 20;
    let first = BatchIter::new(&body[records.0..records.0 + records.1], false)
        .next()
        .and_then(Result::ok)
        .map_or(0, |b| b.header.base_offset);
    for fetch_offset in [0, first.max(0)] {
        let budget = Budget::new(CAP, Box::new(|| {}));
        let frame = Arc::new(FetchedFrame::new(
            FrameBuf::from_vec(body.to_vec()),
            &budget,
        ));
        let held = frame.charged();
        let d = build_chunk(
            PartitionInput {
                tp: TopicPartition::new("t", 0),
                epoch: PositionEpoch(1),
                fetch_offset,
                end_offset: -1,
                frame: &frame,
                records,
                aborted: check_crcs.then(Vec::new),
                check_crcs,
            },
            &budget,
            held,
            None,
        );
        assert!(
            budget.used() <= CAP.max(held) + held,
            "charged {} with a cap of {CAP} and a frame of {held}",
            budget.used()
        );
        if let Some(c) = &d.chunk {
            assert!(c.next_offset >= fetch_offset, "the position went back");
            assert!(c.records.iter().all(|r| r.offset >= fetch_offset));
            black_box(c.records.len());
        }
        black_box(format!("{:?}", d.stop));
        drop(d);
        drop(frame);
        assert_eq!(budget.used(), 0, "everything is given back");
    }
}

/// Decodes a record set as [`record_set`] does.
pub fn decode_record_set(set: &[u8], check_crc: bool) -> Decoded {
    let mut d = Decoded::default();
    let mut inflated = Vec::new();
    let mut batches = BatchIter::new(set, check_crc);
    for batch in batches.by_ref() {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                d.errors += 1;
                black_box(e.to_string());
                break;
            }
        };
        d.batches += 1;
        let h = &batch.header;
        black_box((
            h.compression().name(),
            h.timestamp_type(),
            h.is_transactional(),
            h.last_offset(),
            h.next_offset(),
        ));
        let buf: &[u8] = if h.compression() == Compression::None {
            batch.records
        } else {
            inflated.clear();
            if let Err(e) = decompress(
                h.compression(),
                batch.records,
                &mut inflated,
                DECOMPRESS_LIMIT,
            ) {
                assert!(inflated.is_empty(), "decompress left output after an error");
                d.errors += 1;
                black_box(e.to_string());
                continue;
            }
            assert!(
                inflated.len() <= DECOMPRESS_LIMIT,
                "decompress passed its limit"
            );
            &inflated
        };
        touch_records(h, buf, &mut d);
    }
    assert!(batches.position() <= set.len());
    d
}

/// Reads every record of one batch, as the consumer does: the fast path, then the careful
/// one for whatever the fast path declines.
fn touch_records(h: &BatchHeader, buf: &[u8], d: &mut Decoded) {
    let mut it = RecordIter::new(h, buf);
    black_box(it.remaining());
    loop {
        let r = match it.next_fast() {
            Some(r) => r,
            None => match it.next() {
                None => break,
                Some(Ok(r)) => r,
                Some(Err(e)) => {
                    d.errors += 1;
                    black_box(e.to_string());
                    break;
                }
            },
        };
        d.records += 1;
        black_box((r.offset, r.timestamp));
        let key = r.key(buf);
        let value = r.value(buf);
        d.bytes += key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
        if h.is_control() {
            d.control_records += 1;
            if let Some(k) = key {
                black_box(control_type(k).ok());
            }
        }
        let mut headers = 0;
        for (k, v) in r.headers(buf) {
            headers += 1;
            d.bytes += k.len() + v.map_or(0, <[u8]>::len);
        }
        // RecordIter validated the record, so HeaderIter must see every header.
        assert_eq!(headers, r.header_count, "HeaderIter stopped early");
    }
}

// ---- zstd: our decoder against libzstd ---------------------------------------------------

/// Output limit of both decoders in [`zstd_diff`]: 4 MiB.
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
pub const ZSTD_DIFF_LIMIT: usize = 4 << 20;

/// Target `zstd_diff`: our zstd decoder (`records::codec::own_zstd`, which is
/// `protocol::zstd::decode`) against libzstd (1.5.7, the `zstd` crate's streaming
/// decoder), on the same bytes. `data[0] % 2` picks where the bytes come from:
///
/// - `0`: `data[1..]` is the zstd input itself;
/// - `1`: `data[1..]` is `[level][flags][n][n × (position: u16 LE, xor)][payload]`, which
///   [`zstd_diff_frames`] compresses with libzstd and then corrupts by the xors.
///
/// `(data[0] >> 1) & 7` picks how many bytes our decoder's buffer already holds (the
/// batches decoded before this one, [`ZSTD_DIFF_PREFIXES`]): a match must never reach
/// them. Both decoders get [`ZSTD_DIFF_LIMIT`] bytes of output. They must agree: both
/// decode the same bytes, or both refuse. What is not a disagreement:
///
/// - either one over the limit (ours says `TooLarge`, libzstd fills what it was given)
///   while the other refuses the input or is over the limit too: the output is not all
///   there to compare, and which check comes first is the decoders' own business;
/// - libzstd refusing a frame whose window is over its `windowLogMax` (its default, 2^27,
///   which the `zstd-native` codec also uses), which ours accepts: ours keeps no window
///   besides its output, so a declared window costs it nothing, while libzstd allocates
///   it (a limit of 2^31 would let one input make it allocate 2 GiB, over the fuzzer's
///   RSS limit). Such inputs are not compared;
/// - an empty input, which ours decodes to nothing and libzstd's streaming decoder
///   refuses as an incomplete frame (a batch's records section is never empty);
/// - ours refusing a Huffman stream that does not end where its literals do, which
///   libzstd's fast 4-stream decoder accepts (see [`zstd_disagreement`]): the stricter
///   answer is RFC 8878's, and no encoder writes such streams;
/// - libzstd's streaming decoder disagreeing with ours while its one-shot decoder
///   (`ZSTD_decompressDCtx`) agrees: libzstd is split, ours has one of its answers. (Its
///   streaming decoder, when its output buffer is smaller than the frame's content size,
///   ends a frame at an empty last block without checking the content size.)
///
/// Panics, naming who accepted what, when they disagree; also checks our decoder's own
/// promises: the buffer's earlier bytes untouched, `end` unchanged on error, the output
/// and the buffer within the limit.
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
pub fn zstd_diff(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let prefix = ZSTD_DIFF_PREFIXES[usize::from(mode >> 1) & 7];
    if mode % 2 == 0 {
        zstd_compare(rest, prefix);
    } else if let Some(z) = zstd_diff_frames(rest) {
        zstd_compare(&z, prefix);
    }
}

/// How many bytes our decoder's buffer holds before the frames, by `(data[0] >> 1) & 7`.
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
pub const ZSTD_DIFF_PREFIXES: [usize; 8] = [0, 0, 1, 3, 8, 31, 1000, 70_000];

/// libzstd's answer in [`zstd_diff`].
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
#[derive(Debug)]
enum Libzstd {
    Decoded(Vec<u8>),
    /// More than the limit came out.
    TooLarge,
    /// A frame's window is over libzstd's `windowLogMax`.
    WindowTooLarge,
    Refused(String),
}

#[cfg(all(feature = "zstd", feature = "zstd-native"))]
impl Libzstd {
    fn summary(&self) -> String {
        match self {
            Libzstd::Decoded(v) => format!("decoded {} bytes", v.len()),
            Libzstd::TooLarge => "passed the limit".into(),
            Libzstd::WindowTooLarge => "window over 2^27".into(),
            Libzstd::Refused(e) => format!("refused: {e}"),
        }
    }
}

/// Decodes `z` with libzstd's streaming decoder, at most `limit + 1` bytes of it.
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
fn libzstd_decode(z: &[u8], limit: usize) -> Libzstd {
    use std::io::Read;
    let mut d = match ::zstd::stream::read::Decoder::with_buffer(z) {
        Ok(d) => d,
        Err(e) => return Libzstd::Refused(e.to_string()),
    };
    // libzstd's default, stated: what the `zstd-native` codec runs with.
    if let Err(e) = d.window_log_max(27) {
        return Libzstd::Refused(e.to_string());
    }
    let mut out = Vec::new();
    match d.take(limit as u64 + 1).read_to_end(&mut out) {
        Ok(_) if out.len() > limit => Libzstd::TooLarge,
        Ok(_) => Libzstd::Decoded(out),
        Err(e) => {
            let msg = e.to_string();
            // ZSTD_error_frameParameter_windowTooLarge
            if msg.contains("requires too much memory") {
                Libzstd::WindowTooLarge
            } else {
                Libzstd::Refused(msg)
            }
        }
    }
}

/// Decodes `z` with both decoders and panics if they disagree (see [`zstd_diff`]).
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
fn zstd_compare(z: &[u8], prefix: usize) {
    use crate::protocol::records::codec::own_zstd;
    if z.is_empty() {
        return;
    }
    let mut out = vec![0x5a; prefix];
    let mut end = prefix;
    let ours = own_zstd(z, &mut out, &mut end, ZSTD_DIFF_LIMIT);
    assert!(
        out.capacity() <= prefix + ZSTD_DIFF_LIMIT + 1 + 64 * 1024,
        "our buffer grew to {} with {prefix} bytes before a limit of {ZSTD_DIFF_LIMIT}",
        out.capacity()
    );
    assert!(
        out[..prefix].iter().all(|&b| b == 0x5a),
        "ours overwrote the bytes before its output"
    );
    if ours.is_err() {
        assert_eq!(end, prefix, "ours moved the end on error");
    } else {
        assert!(end - prefix <= ZSTD_DIFF_LIMIT, "ours passed its limit");
    }
    let ours = ours.map(|()| &out[prefix..end]);
    let streamed = libzstd_decode(z, ZSTD_DIFF_LIMIT);
    if let Some(why) = zstd_disagreement(&ours, &streamed) {
        // libzstd's one-shot decoder (ZSTD_decompressDCtx) checks some things its
        // streaming one does not (see `zstd_diff`): if it sides with ours, libzstd
        // disagrees with itself and ours has one of its answers.
        let one_shot = libzstd_one_shot(z, ZSTD_DIFF_LIMIT);
        if zstd_disagreement(&ours, &one_shot).is_some() {
            panic!(
                "{why} (libzstd one-shot: {}; input {} bytes: {})",
                one_shot.summary(),
                z.len(),
                hex_head(z)
            );
        }
    }
}

/// Why our answer and libzstd's disagree, if they do (see [`zstd_diff`]).
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
fn zstd_disagreement(
    ours: &Result<&[u8], crate::protocol::records::RecordError>,
    theirs: &Libzstd,
) -> Option<String> {
    use crate::protocol::records::RecordError;
    match (ours, theirs) {
        (Ok(a), Libzstd::Decoded(b)) => {
            if *a == &b[..] {
                return None;
            }
            let at = a.iter().zip(b).position(|(x, y)| x != y);
            Some(format!(
                "both decoded but differ: ours {} bytes, libzstd {} bytes, first difference \
                 at {at:?}",
                a.len(),
                b.len()
            ))
        }
        (Ok(_), Libzstd::WindowTooLarge) => None,
        (Ok(a), Libzstd::TooLarge) => Some(format!(
            "ours decoded {} bytes, libzstd passed the limit",
            a.len()
        )),
        (Ok(a), Libzstd::Refused(e)) => Some(format!(
            "ours decoded {} bytes, libzstd refused: {e}",
            a.len()
        )),
        // libzstd 1.5.7's fast 4-stream Huffman decoder (the default build's) checks that
        // each stream made its quarter of the literals, not that it ended there, and lets a
        // stream's last bits come from the stream before it; its reference decoder (built
        // with HUF_DISABLE_FAST_DECODE) refuses such streams, as RFC 8878 (4.2.2) and ours do.
        (Err(RecordError::Decompress { reason, .. }), Libzstd::Decoded(_))
            if reason == crate::protocol::zstd::FOUR_STREAMS_NOT_AT_END =>
        {
            None
        }
        (Err(e), Libzstd::Decoded(b)) => Some(format!(
            "libzstd decoded {} bytes, ours refused: {e}",
            b.len()
        )),
        (Err(_), _) => None,
    }
}

/// libzstd's one-shot decoder on `z`, into `limit` bytes.
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
fn libzstd_one_shot(z: &[u8], limit: usize) -> Libzstd {
    let mut d = match ::zstd::bulk::Decompressor::new() {
        Ok(d) => d,
        Err(e) => return Libzstd::Refused(e.to_string()),
    };
    if let Err(e) = d.set_parameter(::zstd::zstd_safe::DParameter::WindowLogMax(27)) {
        return Libzstd::Refused(e.to_string());
    }
    match d.decompress(z, limit) {
        Ok(v) => Libzstd::Decoded(v),
        Err(e) => {
            let msg = e.to_string();
            if msg.contains("requires too much memory") {
                Libzstd::WindowTooLarge
            } else if msg.contains("buffer is too small") {
                Libzstd::TooLarge
            } else {
                Libzstd::Refused(msg)
            }
        }
    }
}

/// The first 64 bytes of `z` in hex, for the panic messages.
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
fn hex_head(z: &[u8]) -> String {
    let mut s: String = z.iter().take(64).map(|b| format!("{b:02x}")).collect();
    if z.len() > 64 {
        s.push_str("...");
    }
    s
}

/// Builds [`zstd_diff`]'s mode-1 input: `[level][flags][n][n × (position: u16 LE, xor)]
/// [payload]`, compressed by libzstd, then each xor applied at its position (modulo the
/// compressed length). `None` when `data` is shorter than its three header bytes.
///
/// - `level % 27 - 7`: libzstd's level, -7..=19; `level / 27` repeats the payload
///   (1, 1, 1, 2, 4, 16, 64, 256, 1024 or 1024 times, each copy's bytes shifted by its
///   number so they do not all match the first), up to 1 MiB in all; over 64 KiB, the
///   level is at most 9 (level 19 on a megabyte is a second per input).
/// - `flags`: bit 0 a content checksum; bit 1 streamed (no content size in the header,
///   as the Java producer writes) instead of one-shot; bits 2-3 the window log (libzstd's
///   default for the level, 10, 11, 17); bit 4 two frames (the payload cut in half); bit
///   5 a skippable frame before the last frame; bit 6 long distance matching; bit 7 no
///   content size in a one-shot frame either.
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
pub fn zstd_diff_frames(data: &[u8]) -> Option<Vec<u8>> {
    let [level, flags, n, rest @ ..] = data else {
        return None;
    };
    let xors_len = (usize::from(*n) * 3).min(rest.len() / 3 * 3);
    let (xors, payload) = rest.split_at(xors_len);
    let copies = [1, 1, 1, 2, 4, 16, 64, 256, 1024, 1024][usize::from(level / 27)];
    let mut level = i32::from(level % 27) - 7;
    let payload = if copies == 1 || payload.is_empty() {
        payload.to_vec()
    } else {
        let copies = copies.min((1 << 20) / payload.len()).max(1);
        let mut v = Vec::with_capacity(payload.len() * copies);
        for i in 0..copies {
            v.extend(payload.iter().map(|&b| b.wrapping_add(i as u8)));
        }
        v
    };
    if payload.len() > 64 * 1024 {
        level = level.min(9);
    }
    let mut z = Vec::new();
    let (first, second) = if flags & 0x10 != 0 {
        payload.split_at(payload.len() / 2)
    } else {
        (&payload[..0], &payload[..])
    };
    if flags & 0x10 != 0 {
        z.extend(zstd_diff_compress(first, level, *flags));
    }
    if flags & 0x20 != 0 {
        // Magic 0x184D2A53, 5 bytes of content.
        z.extend_from_slice(&[
            0x53, 0x2a, 0x4d, 0x18, 5, 0, 0, 0, b'k', b'a', b'f', b'k', b'a',
        ]);
    }
    z.extend(zstd_diff_compress(second, level, *flags));
    if !z.is_empty() {
        for x in xors.chunks_exact(3) {
            let at = usize::from(u16::from_le_bytes([x[0], x[1]])) % z.len();
            z[at] ^= x[2];
        }
    }
    Some(z)
}

/// One frame of [`zstd_diff_frames`], from a compression context kept per thread (libzstd
/// then reuses its tables instead of allocating them for every input).
#[cfg(all(feature = "zstd", feature = "zstd-native"))]
fn zstd_diff_compress(data: &[u8], level: i32, flags: u8) -> Vec<u8> {
    use ::zstd::zstd_safe::zstd_sys::ZSTD_EndDirective;
    use ::zstd::zstd_safe::{CCtx, CParameter, InBuffer, OutBuffer, ResetDirective};
    use std::cell::RefCell;
    thread_local! {
        static CCTX: RefCell<CCtx<'static>> = RefCell::new(CCtx::create());
    }
    CCTX.with(|cell| {
        let mut c = cell.borrow_mut();
        c.reset(ResetDirective::SessionAndParameters).unwrap();
        let mut params = vec![
            CParameter::CompressionLevel(level),
            CParameter::ChecksumFlag(flags & 0x01 != 0),
            CParameter::EnableLongDistanceMatching(flags & 0x40 != 0),
        ];
        match (flags >> 2) & 3 {
            1 => params.push(CParameter::WindowLog(10)),
            2 => params.push(CParameter::WindowLog(11)),
            3 => params.push(CParameter::WindowLog(17)),
            _ => {}
        }
        if flags & 0x80 != 0 {
            params.push(CParameter::ContentSizeFlag(false));
        }
        for p in params {
            c.set_parameter(p).unwrap();
        }
        let mut out: Vec<u8> =
            Vec::with_capacity(::zstd::zstd_safe::compress_bound(data.len()) + 64);
        if flags & 0x02 == 0 {
            c.compress2(&mut out, data).unwrap();
            return out;
        }
        // Streamed: all input with "continue", then "end", so libzstd never learns the size
        // (zstd-jni's ZstdOutputStream, which the Java producer uses, writes the same).
        let mut input = InBuffer::around(data);
        let mut mode = ZSTD_EndDirective::ZSTD_e_continue;
        loop {
            if out.capacity() - out.len() < 1024 {
                out.reserve(64 * 1024);
            }
            let pos = out.len();
            let left = c
                .compress_stream2(&mut OutBuffer::around_pos(&mut out, pos), &mut input, mode)
                .unwrap();
            if mode == ZSTD_EndDirective::ZSTD_e_continue {
                if input.pos() == data.len() {
                    mode = ZSTD_EndDirective::ZSTD_e_end;
                }
            } else if left == 0 {
                break;
            }
        }
        out
    })
}

// ---- SASL ------------------------------------------------------------------------------

/// The user name the SASL targets log in as.
const SASL_USER: &str = "alice";
/// The password the SASL targets log in with (an error message may show it only if the
/// input itself holds it).
const SASL_PASSWORD: &str = "fuzz-pencil-7";
/// The OAUTHBEARER token the SASL targets send.
const SASL_TOKEN: &str = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.";
/// The random bytes the SASL targets' SCRAM client nonce is made of.
const SASL_NONCE: [u8; 24] = [7; 24];

/// How a driven SASL exchange ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SaslOutcome {
    /// Authenticated.
    Done,
    /// Failed with this kind of error.
    Failed(AuthErrorKind),
    /// The input ended before the exchange did.
    Pending,
}

/// The credentials the SASL targets use with `mechanism`.
fn sasl_credentials(mechanism: SaslMechanism) -> Credentials {
    match mechanism {
        SaslMechanism::OAuthBearer => Credentials::Token(OAuthBearerToken {
            value: Secret::from(SASL_TOKEN),
            expires_at: std::time::UNIX_EPOCH,
            principal: SASL_USER.into(),
            extensions: vec![("traceId".into(), "fuzz".into())],
        }),
        _ => Credentials::Password {
            username: SASL_USER.into(),
            password: Secret::from(SASL_PASSWORD),
        },
    }
}

/// A broker's ApiVersions as the SASL targets see it: SaslHandshake v0-v1, SaslAuthenticate
/// v0-`max`.
fn sasl_versions(max: i16) -> crate::link::Versions {
    crate::link::Versions::new([
        (SaslHandshakeRequest::KEY, 0, 1),
        (SaslAuthenticateRequest::KEY, 0, max),
    ])
}

/// A SaslHandshake answer body (without size prefix) accepting the mechanism.
fn sasl_handshake_ok() -> Vec<u8> {
    let resp = SaslHandshakeResponse {
        error_code: 0,
        mechanisms: vec!["PLAIN".into()],
    };
    frame::encode_response::<SaslHandshakeRequest>(&resp, 1, 1)[4..].to_vec()
}

/// A SaslAuthenticate answer body (without size prefix) at version `v`.
fn sasl_answer(
    v: i16,
    error_code: i16,
    error_message: Option<String>,
    auth_bytes: &[u8],
) -> Vec<u8> {
    let resp = SaslAuthenticateResponse {
        error_code,
        error_message,
        auth_bytes: Bytes(auth_bytes.to_vec()),
        session_lifetime_ms: 60_000,
    };
    frame::encode_response::<SaslAuthenticateRequest>(&resp, v, 1)[4..].to_vec()
}

/// Checks what every authentication error promises: a message that is not empty, is
/// bounded (broker texts are cut), and shows no secret the input did not hold itself.
fn check_auth_error(e: &AuthError, input: &[u8]) {
    assert!(!e.message.is_empty(), "empty error message");
    assert!(
        e.message.len() < 4096,
        "unbounded error message: {}",
        e.message.len()
    );
    assert_eq!(e.to_string(), e.message);
    for secret in [SASL_PASSWORD, SASL_TOKEN] {
        let echoed = input.windows(secret.len()).any(|w| w == secret.as_bytes());
        assert!(echoed || !e.message.contains(secret), "secret in {e:?}");
    }
}

/// Splits `data` at its first 0xff byte (a byte valid UTF-8 never holds).
fn split_at_ff(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    match data.iter().position(|&b| b == 0xff) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    }
}

/// Target `sasl_scram`: a SCRAM-SHA-256 client (fixed user, password and nonce) takes
/// `data` up to its first 0xff byte as the server-first message and, if there is one, the
/// rest as the server-final message. Without the `scram` feature, does nothing.
pub fn sasl_scram(data: &[u8]) {
    #[cfg(feature = "scram")]
    black_box(scram_exchange(data));
    #[cfg(not(feature = "scram"))]
    black_box(data);
}

/// The `sasl_scram` exchange.
#[cfg(feature = "scram")]
fn scram_exchange(data: &[u8]) -> SaslOutcome {
    use crate::sasl::scram::{nonce_from, ScramClient, ScramHash};
    let (server_first, server_final) = split_at_ff(data);
    let password = Secret::from(SASL_PASSWORD);
    let client = ScramClient::new(
        ScramHash::Sha256,
        SASL_USER,
        &password,
        nonce_from(&SASL_NONCE),
    );
    black_box(client.client_first());
    let last = match client.server_first(server_first) {
        Ok(last) => last,
        Err(e) => {
            check_auth_error(&e, data);
            assert_eq!(e.kind, AuthErrorKind::Protocol, "server-first: {e}");
            return SaslOutcome::Failed(e.kind);
        }
    };
    let client_final = last.client_final();
    assert!(client_final.starts_with(b"c=biws,r="), "client-final");
    // The client-final message echoes the server's nonce, so it holds the password's text
    // only if the input did.
    let holds = |hay: &[u8]| {
        hay.windows(SASL_PASSWORD.len())
            .any(|w| w == SASL_PASSWORD.as_bytes())
    };
    assert!(
        holds(data) || !holds(client_final),
        "password in the client-final message"
    );
    let Some(server_final) = server_final else {
        return SaslOutcome::Pending;
    };
    match last.server_final(server_final) {
        Ok(()) => SaslOutcome::Done,
        Err(e) => {
            check_auth_error(&e, data);
            SaslOutcome::Failed(e.kind)
        }
    }
}

/// Target `sasl_oauthbearer`: `data` up to its first 0xff byte is the broker's auth bytes
/// in its (error code 0) answer to the OAUTHBEARER initial response; the rest, if any, is
/// the error message of its SASL_AUTHENTICATION_FAILED answer to the client's `\x01`.
/// Also scans `data` for a JSON error status directly. Checks RFC 7628's flow: empty
/// auth bytes authenticate, any others get one `\x01` and end in `Failed`.
pub fn sasl_oauthbearer(data: &[u8]) {
    black_box(oauthbearer_exchange(data));
}

/// The `sasl_oauthbearer` exchange.
fn oauthbearer_exchange(data: &[u8]) -> SaslOutcome {
    if let Some(status) = crate::sasl::oauthbearer::error_status(data) {
        assert!(
            status.chars().count() <= crate::sasl::oauthbearer::MAX_STATUS,
            "status not cut"
        );
    }
    let (auth_bytes, message) = split_at_ff(data);
    let mechanism = SaslMechanism::OAuthBearer;
    let mut a = Authenticator::new(mechanism, sasl_credentials(mechanism), SASL_NONCE);
    assert!(a.start(&sasl_versions(2)).is_ok(), "start");
    assert!(matches!(
        a.handle_response(&sasl_handshake_ok()),
        Ok(Step::Send(_))
    ));
    match a.handle_response(&sasl_answer(2, 0, None, auth_bytes)) {
        Ok(Step::Done { .. }) => {
            assert!(auth_bytes.is_empty(), "Done on an error answer");
            SaslOutcome::Done
        }
        Ok(Step::Send(req)) => {
            assert!(!auth_bytes.is_empty(), "a second round after success");
            // Compact bytes of length 1 holding 0x01, then no tagged fields.
            assert_eq!(
                req.body,
                [2, 1, 0],
                "the acknowledgement is not a single \\x01"
            );
            let Some(message) = message else {
                return SaslOutcome::Pending;
            };
            let message = String::from_utf8_lossy(message).into_owned();
            match a.handle_response(&sasl_answer(2, 58, Some(message), b"")) {
                Err(e) => {
                    check_auth_error(&e, data);
                    assert_eq!(e.kind, AuthErrorKind::Failed, "{e}");
                    SaslOutcome::Failed(e.kind)
                }
                Ok(step) => panic!("authenticated after a refusal: {step:?}"),
            }
        }
        Err(e) => panic!("a well-formed answer failed: {e}"),
    }
}

/// The mechanisms `sasl_authenticate` picks from, by `data[0] % 4`.
const SASL_MECHANISMS: [SaslMechanism; 4] = [
    SaslMechanism::Plain,
    SaslMechanism::ScramSha256,
    SaslMechanism::ScramSha512,
    SaslMechanism::OAuthBearer,
];

/// Target `sasl_authenticate`: `[mechanism][SaslAuthenticate max version]` then answers,
/// each `[length: u16 BE][body]` (a short last one takes what is left). `data[0] % 4`
/// picks PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (fixed credentials and
/// nonce), `data[1] % 3` the broker's highest SaslAuthenticate version. The authenticator
/// starts, and each answer body (without size prefix) goes to `handle_response`, the first
/// as the SaslHandshake answer, until it is done or fails. Checks invariants 1 and 2 of
/// `sasl`: each request is a SaslAuthenticate at the negotiated version, `Done` and
/// errors are terminal, an error repeats.
pub fn sasl_authenticate(data: &[u8]) {
    black_box(authenticate_exchange(data));
}

/// The `sasl_authenticate` exchange.
fn authenticate_exchange(data: &[u8]) -> SaslOutcome {
    let [m, max, tail @ ..] = data else {
        return SaslOutcome::Pending;
    };
    let mut rest: &[u8] = tail;
    let mechanism = SASL_MECHANISMS[usize::from(*m) % SASL_MECHANISMS.len()];
    let max = i16::from(*max % 3);
    let mut a = Authenticator::new(mechanism, sasl_credentials(mechanism), SASL_NONCE);
    assert_eq!(a.mechanism(), mechanism);
    match a.start(&sasl_versions(max)) {
        Ok(req) => assert_eq!(
            (req.api_key, req.version.get()),
            (SaslHandshakeRequest::KEY, 1)
        ),
        Err(e) => {
            // Only SCRAM without the `scram` feature cannot start.
            let scram = matches!(
                mechanism,
                SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512
            );
            assert!(scram && !cfg!(feature = "scram"), "start: {e}");
            assert_eq!(e.kind, AuthErrorKind::Unsupported);
            return SaslOutcome::Failed(e.kind);
        }
    }
    loop {
        let &[hi, lo, ref tail @ ..] = rest else {
            return SaslOutcome::Pending;
        };
        let len = usize::from(u16::from_be_bytes([hi, lo])).min(tail.len());
        let (body, tail) = tail.split_at(len);
        rest = tail;
        match a.handle_response(body) {
            Ok(Step::Send(req)) => {
                assert_eq!(
                    (req.api_key, req.version.get()),
                    (SaslAuthenticateRequest::KEY, max)
                );
                assert_eq!(req.flexible, max >= SaslAuthenticateRequest::FLEXIBLE_FROM);
            }
            Ok(Step::Done { session_lifetime }) => {
                assert!(session_lifetime.is_none_or(|d| d.as_millis() > 0));
                match a.handle_response(body) {
                    Err(e) => assert_eq!(e.kind, AuthErrorKind::Protocol, "{e}"),
                    Ok(step) => panic!("a step after Done: {step:?}"),
                }
                return SaslOutcome::Done;
            }
            Err(e) => {
                check_auth_error(&e, data);
                assert_eq!(
                    a.handle_response(body).err().as_ref(),
                    Some(&e),
                    "error repeats"
                );
                return SaslOutcome::Failed(e.kind);
            }
        }
    }
}

fn touch_decode_error(e: &DecodeError) {
    black_box((e.kind(), e.to_string()));
}

#[cfg(test)]
mod tests {
    //! CI's replay of the fuzzing work on stable: (a) every committed corpus and regression
    //! input through its entry point, (b) a fixed-seed mutation loop over the recorded real
    //! Fetch responses, (c) the recordings decode cleanly unmutated. Also the seed corpora
    //! (`write_seed_corpora`, ignored: it writes files) and their own check.

    use super::*;
    use crate::protocol::api::api_versions::{ApiVersion, ApiVersionsResponse};
    use crate::protocol::api::fetch::{AbortedTransaction, FetchableTopicResponse, PartitionData};
    use crate::protocol::api::list_offsets::{
        ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
    };
    use crate::protocol::api::metadata::{
        MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use crate::protocol::api::offset_for_leader_epoch::{
        EpochEndOffset, OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult,
    };
    use crate::protocol::consumer_protocol::java_payloads;
    use crate::protocol::frame::encode_response;
    use crate::protocol::message::{Bytes, Uuid};
    use crate::protocol::records::testing::{control_batch, encode_records, RecordSpec};
    use crate::protocol::wire::Writer;
    use byteorder::{BigEndian, ByteOrder};
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};
    use std::time::Instant;

    /// A fuzz entry point.
    type Target = fn(&[u8]);

    /// Every cargo-fuzz target, by its name in `fuzz/fuzz_targets/`.
    const TARGETS: &[(&str, Target)] = &[
        ("frame", frame),
        ("response", response),
        ("record_set", record_set),
        ("batch_gzip", batch_gzip),
        ("batch_snappy", batch_snappy),
        ("batch_lz4", batch_lz4),
        ("batch_zstd", batch_zstd),
        ("fetch_response", fetch_response),
        ("consumer_protocol", consumer_protocol),
        ("sasl_scram", sasl_scram),
        ("sasl_oauthbearer", sasl_oauthbearer),
        ("sasl_authenticate", sasl_authenticate),
        #[cfg(all(feature = "zstd", feature = "zstd-native"))]
        ("zstd_diff", zstd_diff),
    ];

    fn fuzz_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
    }

    /// The files of `dir`, sorted; `None` if it does not exist.
    fn files(dir: &Path) -> Option<Vec<PathBuf>> {
        let rd = std::fs::read_dir(dir).ok()?;
        let mut v: Vec<PathBuf> = rd
            .map(|e| e.expect("read_dir entry").path())
            .filter(|p| p.is_file())
            .collect();
        v.sort();
        Some(v)
    }

    /// Runs `f` on `input`; the panic message if it panicked.
    fn run_caught(f: Target, input: &[u8]) -> Result<(), String> {
        std::panic::catch_unwind(|| f(input)).map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into())
        })
    }

    // ---- (a) corpora and regressions -------------------------------------------------

    #[test]
    fn every_corpus_and_regression_input_runs_clean() {
        let mut failures = Vec::new();
        for &(name, f) in TARGETS {
            let corpus = fuzz_dir().join("corpus").join(name);
            let inputs = files(&corpus)
                .unwrap_or_else(|| panic!("corpus directory {} is missing", corpus.display()));
            assert!(!inputs.is_empty(), "corpus {} is empty", corpus.display());
            let regressions = files(&fuzz_dir().join("regressions").join(name)).unwrap_or_default();
            for path in inputs.iter().chain(&regressions) {
                let data = std::fs::read(path).unwrap();
                if let Err(msg) = run_caught(f, &data) {
                    failures.push(format!("{}: {msg}", path.display()));
                }
            }
        }
        assert!(
            failures.is_empty(),
            "inputs that panic:\n{}",
            failures.join("\n")
        );
    }

    #[test]
    fn every_target_has_a_fuzz_target_file() {
        for &(name, _) in TARGETS {
            let path = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
            let src = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                src.contains(&format!("kafka_consumer::fuzzing::{name}(")),
                "{} does not call fuzzing::{name}",
                path.display()
            );
        }
    }

    // ---- recordings --------------------------------------------------------------------

    /// A recorded Fetch response body: `fuzz/recorded/fetch-v<N>-<what>.bin`.
    struct Recording {
        path: PathBuf,
        version: i16,
        what: String,
        body: Vec<u8>,
    }

    fn recordings() -> Vec<Recording> {
        let dir = fuzz_dir().join("recorded");
        let paths = files(&dir)
            .unwrap_or_else(|| panic!("recordings directory {} is missing", dir.display()));
        let mut out = Vec::new();
        for path in paths {
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            let Some(stem) = name.strip_suffix(".bin") else {
                continue; // README and the like
            };
            let rest = stem
                .strip_prefix("fetch-v")
                .unwrap_or_else(|| panic!("{name}: not fetch-v<N>-<what>.bin"));
            let (v, what) = rest
                .split_once('-')
                .unwrap_or_else(|| panic!("{name}: not fetch-v<N>-<what>.bin"));
            out.push(Recording {
                version: v.parse().unwrap_or_else(|_| panic!("{name}: bad version")),
                what: what.to_owned(),
                body: std::fs::read(&path).unwrap(),
                path,
            });
        }
        assert!(!out.is_empty(), "no recordings in {}", dir.display());
        out
    }

    const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
    const ALL_CODECS: bool = cfg!(all(
        feature = "gzip",
        feature = "snappy",
        feature = "lz4",
        any(feature = "zstd", feature = "zstd-native")
    ));

    // ---- (c) the recordings decode cleanly ---------------------------------------------

    #[test]
    fn recordings_are_real_fetch_responses_that_decode_cleanly() {
        let recs = recordings();
        let mut versions = BTreeSet::new();
        let mut codecs = BTreeSet::new();
        let (mut aborted_seen, mut incremental_seen) = (false, false);
        for rec in &recs {
            let name = rec.path.display();
            assert!(
                (FetchRequest::MIN_VERSION..=FetchRequest::MAX_VERSION).contains(&rec.version),
                "{name}: version we do not speak"
            );
            // The recorder numbers requests so the `frame` target picks Fetch at this version.
            assert_eq!(
                frame::correlation_id(&rec.body).unwrap(),
                correlation_for(FetchRequest::KEY, rec.version),
                "{name}: correlation id"
            );
            let d = fetch_body(&rec.body, rec.version, true)
                .unwrap_or_else(|e| panic!("{name}: does not decode: {e}"));
            assert_eq!(d.response.error_code, 0, "{name}: top-level error");
            let partitions: Vec<&PartitionData> = d
                .response
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .collect();
            assert!(!partitions.is_empty(), "{name}: no partitions");
            for p in &partitions {
                assert_eq!(p.error_code, 0, "{name}: partition {}", p.partition_index);
            }
            if ALL_CODECS {
                assert_eq!(
                    d.records.errors, 0,
                    "{name}: record errors: {:?}",
                    d.records
                );
                assert!(d.records.records > 0, "{name}: no records");
            }
            for t in &d.response.responses {
                if rec.version >= 13 {
                    assert!(!t.topic_id.is_zero(), "{name}: v13+ names topics by id");
                } else {
                    assert!(t.topic.starts_with("fuzzrec-"), "{name}: topic {}", t.topic);
                }
            }
            versions.insert(rec.version);
            if let Some(c) = CODECS.iter().find(|c| rec.what == **c) {
                codecs.insert(*c);
            }
            if rec.what.starts_with("txn") {
                let aborted = partitions
                    .iter()
                    .filter_map(|p| p.aborted_transactions.as_ref())
                    .map(Vec::len)
                    .sum::<usize>();
                assert!(aborted > 0, "{name}: no aborted transactions listed");
                assert!(
                    d.records.control_records > 0,
                    "{name}: no transaction markers"
                );
                aborted_seen = true;
            }
            if rec.what.starts_with("incremental") {
                assert!(rec.version >= 7, "{name}: sessions start at v7");
                assert_ne!(d.response.session_id, 0, "{name}: no fetch session");
                incremental_seen = true;
            }
        }
        for v in [4, 7, 11, 12, 13, 16] {
            assert!(versions.contains(&v), "no recording at v{v}");
        }
        assert_eq!(codecs.len(), CODECS.len(), "codecs recorded: {codecs:?}");
        assert!(
            aborted_seen,
            "no read_committed recording with aborted transactions"
        );
        assert!(incremental_seen, "no incremental fetch session recording");
    }

    // ---- (b) fixed-seed mutations of the recordings ------------------------------------

    /// xorshift64*: a tiny deterministic generator.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            self.0 = x;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
        fn byte(&mut self) -> u8 {
            self.next() as u8
        }
    }

    const INTERESTING_I32: [i32; 10] = [0, 1, -1, -2, 0x7f, 0x80, 0xffff, i32::MAX, i32::MIN, 61];
    const INTERESTING_BYTES: [u8; 8] = [0, 1, 0x7f, 0x80, 0xff, 0x01, 0x02, 0x3d];

    /// Applies one to four mutations: bit flips, byte sets, truncations, duplicated and
    /// removed ranges, tweaks of int32 and int16 big-endian fields and of varints.
    fn mutate(rng: &mut Rng, buf: &mut Vec<u8>) {
        for _ in 0..1 + rng.below(4) {
            if buf.len() < 8 {
                buf.push(rng.byte());
                continue;
            }
            let len = buf.len();
            let at = rng.below(len);
            match rng.below(10) {
                0 => buf[at] ^= 1 << rng.below(8),
                1 => buf[at] = INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())],
                2 => buf[at] = rng.byte(),
                3 => buf.truncate(rng.below(len)),
                4 => {
                    // Duplicate a range somewhere else.
                    let n = 1 + rng.below(64.min(len - at));
                    let chunk = buf[at..at + n].to_vec();
                    let to = rng.below(len);
                    buf.splice(to..to, chunk);
                }
                5 => {
                    let n = 1 + rng.below(64.min(len - at));
                    buf.drain(at..at + n);
                }
                6 => {
                    // An int32 length or count field.
                    let at = at.min(len - 4);
                    let old = BigEndian::read_i32(&buf[at..at + 4]);
                    let new = match rng.below(4) {
                        0 => old.wrapping_add(1 + rng.below(16) as i32),
                        1 => old.wrapping_sub(1 + rng.below(16) as i32),
                        2 => INTERESTING_I32[rng.below(INTERESTING_I32.len())],
                        _ => len as i32 - at as i32 + rng.below(9) as i32 - 4,
                    };
                    BigEndian::write_i32(&mut buf[at..at + 4], new);
                }
                7 => {
                    let at = at.min(len - 2);
                    let old = BigEndian::read_i16(&buf[at..at + 2]);
                    let new = match rng.below(3) {
                        0 => old.wrapping_add(1),
                        1 => old.wrapping_sub(1),
                        _ => [0, -1, i16::MAX, i16::MIN][rng.below(4)],
                    };
                    BigEndian::write_i16(&mut buf[at..at + 2], new);
                }
                8 => {
                    // A varint: lengthen, shorten or grow it.
                    match rng.below(3) {
                        0 => buf[at] |= 0x80,
                        1 => buf[at] &= 0x7f,
                        _ => {
                            buf[at] = buf[at].wrapping_add(if rng.below(2) == 0 { 2 } else { 254 })
                        }
                    }
                }
                _ => {
                    let n = 1 + rng.below(8.min(len - at));
                    for b in &mut buf[at..at + n] {
                        *b = rng.byte();
                    }
                }
            }
        }
    }

    /// Mutations of each recording per target: well under 30 s in release on 2 cores for
    /// the whole set; fewer in debug builds.
    const MUTATIONS_PER_RECORDING: usize = if cfg!(debug_assertions) { 150 } else { 2000 };

    #[test]
    fn fixed_seed_mutations_of_the_recordings_never_panic() {
        let started = Instant::now();
        let recs = recordings();
        // Two threads (the machine's two cores), each over every other recording; each
        // recording has its own seed, so the inputs do not depend on the split.
        let (failures, runs) = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2)
                .map(|w| {
                    let recs = &recs;
                    s.spawn(move || {
                        let mut failures = Vec::new();
                        let mut runs = 0usize;
                        for (i, rec) in recs.iter().enumerate().skip(w).step_by(2) {
                            runs += mutate_recording(i, rec, &mut failures);
                        }
                        (failures, runs)
                    })
                })
                .collect();
            workers.into_iter().map(|h| h.join().unwrap()).fold(
                (Vec::new(), 0),
                |(mut f, n), (f2, n2)| {
                    f.extend(f2);
                    (f, n + n2)
                },
            )
        });
        assert!(
            failures.is_empty(),
            "mutated recordings that panic:\n{}",
            failures.join("\n")
        );
        log::info!("{runs} mutated inputs in {:?}", started.elapsed());
    }

    /// Feeds [`MUTATIONS_PER_RECORDING`] mutations of recording number `i` to
    /// `fetch_response` and `frame`; returns the number of inputs run.
    fn mutate_recording(i: usize, rec: &Recording, failures: &mut Vec<String>) -> usize {
        let mut rng =
            Rng(0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9));
        let mut body = Vec::new();
        let mut input = Vec::new();
        for n in 0..MUTATIONS_PER_RECORDING {
            body.clear();
            body.extend_from_slice(&rec.body);
            mutate(&mut rng, &mut body);
            // fetch_response: the recording's version (or, rarely, another), CRCs on for
            // half the inputs.
            let v = if n % 16 == 0 {
                rng.byte()
            } else {
                rec.version as u8
            };
            input.clear();
            input.extend_from_slice(&[v, (n & 1) as u8]);
            input.extend_from_slice(&body);
            if let Err(msg) = run_caught(fetch_response, &input) {
                failures.push(format!("{} fetch_response #{n}: {msg}", rec.path.display()));
            }
            // frame: a size prefix that is mostly right.
            input.clear();
            let size = match rng.below(8) {
                0 => rng.next() as i32,
                1 => body.len() as i32 + rng.below(5) as i32 - 2,
                _ => body.len() as i32,
            };
            input.extend_from_slice(&size.to_be_bytes());
            input.extend_from_slice(&body);
            if let Err(msg) = run_caught(frame, &input) {
                failures.push(format!("{} frame #{n}: {msg}", rec.path.display()));
            }
        }
        2 * MUTATIONS_PER_RECORDING
    }

    #[test]
    fn mutations_are_deterministic_and_vary() {
        let base: Vec<u8> = (0..200u8).collect();
        let run = || {
            let mut rng = Rng(42);
            (0..50)
                .map(|_| {
                    let mut b = base.clone();
                    mutate(&mut rng, &mut b);
                    b
                })
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        assert!(a.iter().filter(|b| **b != base).count() > 40);
    }

    // ---- the API table -------------------------------------------------------------------

    #[test]
    fn pick_selects_every_api_at_every_version_it_claims() {
        let keys: BTreeSet<i16> = APIS.iter().map(|e| e.key).collect();
        assert_eq!(keys.len(), APIS.len(), "duplicate keys in APIS");
        for e in APIS {
            assert!(e.min <= e.max, "{}", e.name);
            for v in e.min..=e.max {
                let (got, gv) = pick(e.key, v);
                assert_eq!((got.key, gv), (e.key, v));
                let corr = correlation_for(e.key, v);
                assert_eq!(((corr >> 16) as i16, corr as i16), (e.key, v));
            }
        }
        for key in i16::MIN..=i16::MAX {
            let (e, v) = pick(key, key);
            assert!((e.min..=e.max).contains(&v));
        }
    }

    // ---- seeds -----------------------------------------------------------------------------

    fn find_coordinator_sample() -> crate::protocol::api::find_coordinator::FindCoordinatorResponse
    {
        use crate::protocol::api::find_coordinator::{Coordinator, FindCoordinatorResponse};
        FindCoordinatorResponse {
            throttle_time_ms: 0,
            error_code: 0,
            error_message: None,
            node_id: 1,
            host: "127.0.0.1".into(),
            port: 9092,
            coordinators: vec![Coordinator {
                key: "group".into(),
                node_id: 1,
                host: "127.0.0.1".into(),
                port: 9092,
                error_code: 0,
                error_message: None,
            }],
        }
    }

    fn offset_commit_sample() -> crate::protocol::api::offset_commit::OffsetCommitResponse {
        use crate::protocol::api::offset_commit::{
            OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
        };
        OffsetCommitResponse {
            throttle_time_ms: 0,
            topics: vec![OffsetCommitResponseTopic {
                name: "t".into(),
                partitions: vec![OffsetCommitResponsePartition {
                    partition_index: 0,
                    error_code: 0,
                }],
            }],
        }
    }

    fn offset_fetch_sample() -> crate::protocol::api::offset_fetch::OffsetFetchResponse {
        use crate::protocol::api::offset_fetch::{
            OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition,
            OffsetFetchResponseTopic,
        };
        let topics = vec![OffsetFetchResponseTopic {
            name: "t".into(),
            partitions: vec![OffsetFetchResponsePartition {
                partition_index: 0,
                committed_offset: 42,
                committed_leader_epoch: 3,
                metadata: Some("m".into()),
                error_code: 0,
            }],
        }];
        OffsetFetchResponse {
            topics: topics.clone(),
            groups: vec![OffsetFetchResponseGroup {
                group_id: "group".into(),
                topics,
                error_code: 0,
            }],
            ..Default::default()
        }
    }

    fn join_group_sample() -> crate::protocol::api::join_group::JoinGroupResponse {
        use crate::protocol::api::join_group::{JoinGroupResponse, JoinGroupResponseMember};
        let member = |id: &str, instance: Option<&str>| JoinGroupResponseMember {
            member_id: id.into(),
            group_instance_id: instance.map(Into::into),
            metadata: Bytes(subscription_sample().encode()),
        };
        JoinGroupResponse {
            throttle_time_ms: 0,
            error_code: 0,
            generation_id: 3,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            leader: "m-1".into(),
            skip_assignment: false,
            member_id: "m-1".into(),
            members: vec![member("m-1", Some("host-a")), member("m-2", None)],
        }
    }

    fn heartbeat_sample() -> crate::protocol::api::heartbeat::HeartbeatResponse {
        crate::protocol::api::heartbeat::HeartbeatResponse {
            throttle_time_ms: 1,
            error_code: 27,
        }
    }

    fn leave_group_sample() -> crate::protocol::api::leave_group::LeaveGroupResponse {
        use crate::protocol::api::leave_group::{LeaveGroupResponse, MemberResponse};
        LeaveGroupResponse {
            throttle_time_ms: 0,
            error_code: 0,
            members: vec![MemberResponse {
                member_id: "m-1".into(),
                group_instance_id: Some("host-a".into()),
                error_code: 0,
            }],
        }
    }

    fn sync_group_sample() -> crate::protocol::api::sync_group::SyncGroupResponse {
        crate::protocol::api::sync_group::SyncGroupResponse {
            throttle_time_ms: 0,
            error_code: 0,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignment: Bytes(assignment_sample().encode()),
        }
    }

    fn consumer_group_heartbeat_sample(
    ) -> crate::protocol::api::consumer_group_heartbeat::ConsumerGroupHeartbeatResponse {
        use crate::protocol::api::consumer_group_heartbeat::{
            Assignment, ConsumerGroupHeartbeatResponse, TopicPartitions,
        };
        ConsumerGroupHeartbeatResponse {
            throttle_time_ms: 0,
            error_code: 0,
            error_message: None,
            member_id: Some("N5ixEYxVTAe4nJ0rvlVjAA".into()),
            member_epoch: 4,
            heartbeat_interval_ms: 5000,
            assignment: Some(Assignment {
                topic_partitions: vec![TopicPartitions {
                    topic_id: Uuid([7; 16]),
                    partitions: vec![0, 1, 2],
                }],
            }),
        }
    }

    fn subscription_sample() -> ConsumerProtocolSubscription {
        use crate::protocol::consumer_protocol::TopicPartition;
        ConsumerProtocolSubscription {
            topics: vec!["audit".into(), "orders".into()],
            user_data: Some(Bytes(vec![0, 1])),
            owned_partitions: vec![TopicPartition {
                topic: "orders".into(),
                partitions: vec![0, 2],
            }],
            generation_id: 3,
            rack_id: Some("rack-a".into()),
        }
    }

    fn assignment_sample() -> ConsumerProtocolAssignment {
        use crate::protocol::consumer_protocol::TopicPartition;
        ConsumerProtocolAssignment {
            assigned_partitions: vec![TopicPartition {
                topic: "orders".into(),
                partitions: vec![1, 3],
            }],
            user_data: None,
        }
    }

    fn api_versions_sample() -> ApiVersionsResponse {
        let range = |api_key, min_version, max_version| ApiVersion {
            api_key,
            min_version,
            max_version,
        };
        ApiVersionsResponse {
            error_code: 0,
            api_keys: vec![
                range(1, 4, 18),
                range(2, 1, 11),
                range(3, 0, 13),
                range(18, 0, 4),
            ],
            throttle_time_ms: 5,
        }
    }

    fn metadata_sample() -> MetadataResponse {
        MetadataResponse {
            throttle_time_ms: 1,
            brokers: vec![
                MetadataResponseBroker {
                    node_id: 1,
                    host: "localhost".into(),
                    port: 9092,
                    rack: Some("rack-a".into()),
                },
                MetadataResponseBroker {
                    node_id: 2,
                    host: "b2".into(),
                    port: 9093,
                    rack: None,
                },
            ],
            cluster_id: Some("cluster".into()),
            controller_id: 1,
            topics: vec![
                MetadataResponseTopic {
                    error_code: 0,
                    name: Some("orders".into()),
                    topic_id: Uuid([7; 16]),
                    is_internal: false,
                    partitions: vec![
                        MetadataResponsePartition {
                            error_code: 0,
                            partition_index: 0,
                            leader_id: 1,
                            leader_epoch: 4,
                            replica_nodes: vec![1, 2],
                            isr_nodes: vec![1],
                            offline_replicas: vec![2],
                        },
                        MetadataResponsePartition {
                            error_code: 6,
                            partition_index: 1,
                            leader_id: -1,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                },
                MetadataResponseTopic {
                    error_code: 3,
                    name: None,
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    fn list_offsets_sample() -> ListOffsetsResponse {
        ListOffsetsResponse {
            throttle_time_ms: 0,
            topics: vec![ListOffsetsTopicResponse {
                name: "orders".into(),
                partitions: vec![
                    ListOffsetsPartitionResponse {
                        partition_index: 0,
                        error_code: 0,
                        timestamp: 1_700_000_000_000,
                        offset: 42,
                        leader_epoch: 3,
                    },
                    ListOffsetsPartitionResponse {
                        partition_index: 1,
                        error_code: 6,
                        ..Default::default()
                    },
                ],
            }],
        }
    }

    fn offset_for_leader_epoch_sample() -> OffsetForLeaderEpochResponse {
        OffsetForLeaderEpochResponse {
            throttle_time_ms: 0,
            topics: vec![OffsetForLeaderTopicResult {
                topic: "orders".into(),
                partitions: vec![
                    EpochEndOffset {
                        error_code: 0,
                        partition: 0,
                        leader_epoch: 3,
                        end_offset: 40,
                    },
                    EpochEndOffset {
                        error_code: 74,
                        partition: 1,
                        leader_epoch: -1,
                        end_offset: -1,
                    },
                ],
            }],
        }
    }

    const HEADERS: &[(&str, Option<&[u8]>)] = &[
        ("seq", Some(b"1")),
        ("dup", Some(b"a")),
        ("dup", Some(b"b")),
        ("nul", None),
    ];

    fn sample_records() -> Vec<RecordSpec<'static>> {
        vec![
            (0, 0, Some(b"key-0"), Some(b"value-0"), HEADERS),
            (1, 5, None, Some(b"value-1"), &[]),
            (2, 9, Some(b"key-2"), None, &[("h", Some(b""))]),
        ]
    }

    fn compress(c: Compression, data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        match c {
            Compression::None => data.to_vec(),
            Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Snappy => {
                // xerial framing, as the Java producer writes it
                let mut out = vec![
                    0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
                ];
                let block = snap::raw::Encoder::new().compress_vec(data).unwrap();
                out.extend_from_slice(&(block.len() as i32).to_be_bytes());
                out.extend_from_slice(&block);
                out
            }
            Compression::Lz4 => {
                let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Zstd => {
                let mut out = Vec::new();
                ruzstd::encoding::compress(
                    data,
                    &mut out,
                    ruzstd::encoding::CompressionLevel::Fastest,
                );
                out
            }
        }
    }

    /// The other encodings each codec accepts: raw and framed snappy, concatenated gzip
    /// members, zstd with a skippable frame, LZ4 with checksums.
    fn compress_variants(c: Compression, data: &[u8]) -> Vec<Vec<u8>> {
        use std::io::Write;
        let mut v = vec![compress(c, data)];
        match c {
            Compression::Gzip => {
                let (a, b) = data.split_at(data.len() / 2);
                let mut two = compress(c, a);
                two.extend(compress(c, b));
                v.push(two);
            }
            Compression::Snappy => {
                v.push(snap::raw::Encoder::new().compress_vec(data).unwrap());
                let mut e = snap::write::FrameEncoder::new(Vec::new());
                e.write_all(data).unwrap();
                v.push(e.into_inner().unwrap());
            }
            Compression::Lz4 => {
                let mut info = lz4_flex::frame::FrameInfo::new();
                info.content_checksum = true;
                info.block_checksums = true;
                info.content_size = Some(data.len() as u64);
                let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
                e.write_all(data).unwrap();
                v.push(e.finish().unwrap());
            }
            Compression::Zstd => {
                let mut skip = vec![0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3];
                skip.extend(compress(c, data));
                skip.extend(compress(c, b""));
                v.push(skip);
            }
            _ => {}
        }
        v
    }

    const COMPRESSED: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// A record set with a batch of each codec, a transaction and its markers, and a
    /// LogAppendTime batch.
    fn sample_record_set() -> Vec<u8> {
        let records = sample_records();
        let section = encode_records(&records);
        let mut set = encode_batch(&BatchSpec {
            base_offset: 100,
            records: &records,
            base_timestamp: 1_700_000_000_000,
            ..BatchSpec::default()
        });
        let mut next = 103;
        for c in COMPRESSED {
            let z = compress(c, &section);
            set.extend(encode_batch(&BatchSpec {
                base_offset: next,
                attributes: c.code(),
                records: &records,
                records_section: Some(&z),
                ..BatchSpec::default()
            }));
            next += 3;
        }
        set.extend(encode_batch(&BatchSpec {
            base_offset: next,
            attributes: 0x10,
            producer_id: 9,
            producer_epoch: 0,
            base_sequence: 0,
            records: &records,
            ..BatchSpec::default()
        }));
        set.extend(control_batch(next + 3, 9, 0));
        set.extend(encode_batch(&BatchSpec {
            base_offset: next + 4,
            attributes: 0x08,
            max_timestamp: Some(1_800_000_000_000),
            records: &records,
            ..BatchSpec::default()
        }));
        set.extend(control_batch(next + 7, 10, 1));
        set
    }

    /// A Fetch response at `v` whose partitions carry `sets` (one partition each); the
    /// encoder writes null record sets, which are replaced by the sets here.
    fn fetch_sample(v: i16, sets: &[&[u8]]) -> Vec<u8> {
        let partitions = sets
            .iter()
            .enumerate()
            .map(|(i, _)| PartitionData {
                partition_index: i as i32,
                error_code: 0,
                high_watermark: 1000,
                last_stable_offset: 990,
                log_start_offset: 0,
                aborted_transactions: (i == 0).then(|| {
                    vec![AbortedTransaction {
                        producer_id: 9,
                        first_offset: 115,
                    }]
                }),
                preferred_read_replica: -1,
                ..Default::default()
            })
            .collect();
        let resp = FetchResponse {
            throttle_time_ms: 0,
            error_code: 0,
            session_id: 77,
            responses: vec![FetchableTopicResponse {
                topic: "orders".into(),
                topic_id: Uuid([7; 16]),
                partitions,
            }],
        };
        let frame =
            encode_response::<FetchRequest>(&resp, v, correlation_for(FetchRequest::KEY, v));
        let mut body = frame[4..].to_vec();
        let decoded = frame::decode_response::<FetchRequest>(&body, v).unwrap();
        let starts: Vec<usize> = decoded.responses[0]
            .partitions
            .iter()
            .map(|p| p.records.start)
            .collect();
        let flexible = v >= FetchRequest::FLEXIBLE_FROM;
        for (start, set) in starts.iter().zip(sets).rev() {
            let marker = if flexible { 1 } else { 4 };
            let mut w = Writer::new();
            if flexible {
                w.uvarint(set.len() as u32 + 1);
            } else {
                w.i32(set.len() as i32);
            }
            w.raw(set);
            body.splice(start - marker..*start, w.into_inner());
        }
        body
    }

    /// Valid inputs for every target, made with the crate's encoders.
    fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
        let mut out: Vec<(&'static str, String, Vec<u8>)> = Vec::new();
        let set = sample_record_set();
        let plain = encode_batch(&BatchSpec {
            records: &sample_records(),
            ..BatchSpec::default()
        });
        // response and frame: every API at every version.
        let mut bodies: Vec<(i16, i16, Vec<u8>)> = Vec::new();
        for e in APIS {
            for v in e.min..=e.max {
                let corr = correlation_for(e.key, v);
                let frame = match e.key {
                    k if k == ApiVersionsRequest::KEY => {
                        encode_response::<ApiVersionsRequest>(&api_versions_sample(), v, corr)
                    }
                    k if k == MetadataRequest::KEY => {
                        encode_response::<MetadataRequest>(&metadata_sample(), v, corr)
                    }
                    k if k == ListOffsetsRequest::KEY => {
                        encode_response::<ListOffsetsRequest>(&list_offsets_sample(), v, corr)
                    }
                    k if k == FetchRequest::KEY => {
                        let body = fetch_sample(v, &[&plain]);
                        let mut f = (body.len() as i32).to_be_bytes().to_vec();
                        f.extend(body);
                        f
                    }
                    k if k == FindCoordinatorRequest::KEY => encode_response::<
                        FindCoordinatorRequest,
                    >(
                        &find_coordinator_sample(), v, corr
                    ),
                    k if k == OffsetCommitRequest::KEY => {
                        encode_response::<OffsetCommitRequest>(&offset_commit_sample(), v, corr)
                    }
                    k if k == OffsetFetchRequest::KEY => {
                        encode_response::<OffsetFetchRequest>(&offset_fetch_sample(), v, corr)
                    }
                    k if k == OffsetForLeaderEpochRequest::KEY => {
                        encode_response::<OffsetForLeaderEpochRequest>(
                            &offset_for_leader_epoch_sample(),
                            v,
                            corr,
                        )
                    }
                    k if k == JoinGroupRequest::KEY => {
                        encode_response::<JoinGroupRequest>(&join_group_sample(), v, corr)
                    }
                    k if k == HeartbeatRequest::KEY => {
                        encode_response::<HeartbeatRequest>(&heartbeat_sample(), v, corr)
                    }
                    k if k == LeaveGroupRequest::KEY => {
                        encode_response::<LeaveGroupRequest>(&leave_group_sample(), v, corr)
                    }
                    k if k == SyncGroupRequest::KEY => {
                        encode_response::<SyncGroupRequest>(&sync_group_sample(), v, corr)
                    }
                    k if k == ConsumerGroupHeartbeatRequest::KEY => {
                        encode_response::<ConsumerGroupHeartbeatRequest>(
                            &consumer_group_heartbeat_sample(),
                            v,
                            corr,
                        )
                    }
                    k if k == SaslHandshakeRequest::KEY => encode_response::<SaslHandshakeRequest>(
                        &SaslHandshakeResponse {
                            error_code: 33,
                            mechanisms: vec!["PLAIN".into(), "SCRAM-SHA-512".into()],
                        },
                        v,
                        corr,
                    ),
                    k if k == SaslAuthenticateRequest::KEY => {
                        encode_response::<SaslAuthenticateRequest>(
                            &SaslAuthenticateResponse {
                                error_code: 0,
                                error_message: None,
                                auth_bytes: Bytes(
                                    b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec(),
                                ),
                                session_lifetime_ms: 3_600_000,
                            },
                            v,
                            corr,
                        )
                    }
                    _ => panic!("no seed sample for {}: add one to seeds()", e.name),
                };
                bodies.push((e.key, v, frame[4..].to_vec()));
            }
        }
        let mut fallback = api_versions_sample();
        fallback.error_code = 35;
        let corr = correlation_for(ApiVersionsRequest::KEY, 0);
        bodies.push((
            18,
            0,
            encode_response::<ApiVersionsRequest>(&fallback, 0, corr)[4..].to_vec(),
        ));
        for (key, v, body) in &bodies {
            let mut r = vec![*key as u8, *v as u8];
            r.extend_from_slice(body);
            out.push(("response", format!("seed-k{key}-v{v}"), r));
            let mut f = (body.len() as i32).to_be_bytes().to_vec();
            f.extend_from_slice(body);
            out.push(("frame", format!("seed-k{key}-v{v}"), f));
        }
        // frame: a stream of two frames, then a partial one.
        let mut stream = Vec::new();
        for (_, _, body) in bodies.iter().take(2) {
            stream.extend((body.len() as i32).to_be_bytes());
            stream.extend_from_slice(body);
        }
        stream.extend([0, 0, 1, 0, 0, 1]);
        out.push(("frame", "seed-stream".into(), stream));
        // record_set
        for crc in [0u8, 1] {
            let mut r = vec![crc];
            r.extend_from_slice(&set);
            out.push(("record_set", format!("seed-mixed-crc{crc}"), r));
        }
        let mut cut = vec![1];
        cut.extend_from_slice(&set[..set.len() - 7]);
        out.push(("record_set", "seed-partial-tail".into(), cut));
        // codec targets
        let section = encode_records(&sample_records());
        for c in COMPRESSED {
            let target = match c {
                Compression::Gzip => "batch_gzip",
                Compression::Snappy => "batch_snappy",
                Compression::Lz4 => "batch_lz4",
                _ => "batch_zstd",
            };
            for (i, z) in compress_variants(c, &section).into_iter().enumerate() {
                for attrs in [0u8, 0x08] {
                    let mut r = vec![0, 3, attrs];
                    r.extend_from_slice(&z);
                    out.push((target, format!("seed-{i}-attrs{attrs}"), r));
                }
            }
            // A compressed control batch.
            let mut key = Writer::new();
            key.i16(0);
            key.i16(1);
            let key = key.into_inner();
            let ctl = encode_records(&[(0, 0, Some(&key), Some(&[0, 0, 0, 0, 0, 0]), &[])]);
            let mut r = vec![0, 1, 0x30];
            r.extend(compress(c, &ctl));
            out.push((target, "seed-control".into(), r));
        }
        // fetch_response: every version, records of every codec over three partitions.
        let third = set.len() / 3;
        let mut at = 0;
        let mut parts: Vec<&[u8]> = Vec::new();
        for b in BatchIter::new(&set, true) {
            let b = b.unwrap();
            let end = b.start + BATCH_LEN_OVERHEAD + b.header.batch_length as usize;
            if end >= at + third || end == set.len() {
                parts.push(&set[at..end]);
                at = end;
            }
        }
        for v in FetchRequest::MIN_VERSION..=FetchRequest::MAX_VERSION {
            let mut r = vec![v as u8, 1];
            r.extend(fetch_sample(v, &parts));
            out.push(("fetch_response", format!("seed-v{v}"), r));
        }
        // consumer_protocol: the Java client's payloads, and ours at every version.
        for (name, payload) in java_payloads() {
            out.push(("consumer_protocol", format!("java-{name}"), payload));
        }
        for v in 0..=3 {
            let s = subscription_sample().encode_version(v);
            out.push(("consumer_protocol", format!("seed-subscription-v{v}"), s));
            let a = assignment_sample().encode_version(v);
            out.push(("consumer_protocol", format!("seed-assignment-v{v}"), a));
        }
        out.extend(sasl_seeds());
        #[cfg(all(feature = "zstd", feature = "zstd-native"))]
        out.extend(zstd_diff_seeds());
        out
    }

    /// Found by `sasl_scram` (`regressions/sasl_scram/nonce-echoes-the-password-text`): the
    /// client-final message repeats the server's nonce, so a nonce holding the password's
    /// text puts it there; that is the input's doing, not a leak, and the target accepts it.
    #[cfg(feature = "scram")]
    #[test]
    fn a_scram_server_nonce_may_echo_the_passwords_text() {
        let nonce = crate::sasl::base64::encode(&SASL_NONCE);
        let input = format!("r={nonce}%srv{SASL_PASSWORD},s=ZnV6ei1zYWx0,i=4096");
        assert_eq!(scram_exchange(input.as_bytes()), SaslOutcome::Pending);
        let mut input = input.into_bytes();
        input.extend_from_slice(b"\xffe=invalid-proof");
        assert_eq!(
            scram_exchange(&input),
            SaslOutcome::Failed(AuthErrorKind::Failed)
        );
    }

    /// `[length: u16 BE][body]` for each body, as `sasl_authenticate` reads answers.
    fn sasl_frames(bodies: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in bodies {
            out.extend_from_slice(&(b.len() as u16).to_be_bytes());
            out.extend_from_slice(b);
        }
        out
    }

    /// The outcome a SASL seed's name promises: its last `-` part.
    fn promised(name: &str) -> SaslOutcome {
        match name.rsplit('-').next() {
            Some("done") => SaslOutcome::Done,
            Some("pending") => SaslOutcome::Pending,
            Some("failed") => SaslOutcome::Failed(AuthErrorKind::Failed),
            Some("unsupported") => SaslOutcome::Failed(AuthErrorKind::Unsupported),
            Some("protocol") => SaslOutcome::Failed(AuthErrorKind::Protocol),
            _ => panic!("{name}: no outcome in the seed's name"),
        }
    }

    /// The broker's SCRAM messages in a whole `sasl_scram`/`sasl_authenticate` login with
    /// `hash`: server-first and server-final, from a fake server that knows the password.
    #[cfg(feature = "scram")]
    fn scram_login(hash: crate::sasl::scram::ScramHash) -> (Vec<u8>, Vec<u8>) {
        use crate::sasl::scram::{nonce_from, testing::FakeServer, ScramClient};
        let server = FakeServer {
            hash,
            password: SASL_PASSWORD,
            salt: b"fuzz-salt".to_vec(),
            iterations: 4096,
            server_nonce: "%srv",
        };
        let password = Secret::from(SASL_PASSWORD);
        let client = ScramClient::new(hash, SASL_USER, &password, nonce_from(&SASL_NONCE));
        let client_first = client.client_first();
        let server_first = server.server_first(&client_first);
        let last = client.server_first(&server_first).unwrap();
        let server_final = server.server_final(&client_first, &server_first, last.client_final());
        (server_first, server_final)
    }

    /// Seeds of the SASL targets; each name ends with the outcome it leads to.
    fn sasl_seeds() -> Vec<(&'static str, String, Vec<u8>)> {
        let mut out: Vec<(&'static str, String, Vec<u8>)> = Vec::new();
        let nonce = crate::sasl::base64::encode(&SASL_NONCE);
        let server_first = format!("r={nonce}%srv,s=ZnV6ei1zYWx0,i=4096");
        // sasl_scram
        let mut with_error = server_first.clone().into_bytes();
        with_error.push(0xff);
        with_error.extend_from_slice(b"e=invalid-proof");
        out.push((
            "sasl_scram",
            "seed-server-first-pending".into(),
            server_first.clone().into_bytes(),
        ));
        out.push((
            "sasl_scram",
            "seed-e-invalid-proof-failed".into(),
            with_error,
        ));
        let mut ext = format!("{server_first},x=ext").into_bytes();
        ext.push(0xff);
        ext.extend_from_slice(b"v=AAAA,y=1");
        out.push((
            "sasl_scram",
            "seed-extension-bad-signature-failed".into(),
            ext,
        ));
        out.push((
            "sasl_scram",
            "seed-mandatory-extension-protocol".into(),
            format!("m=x,{server_first}").into_bytes(),
        ));
        #[cfg(feature = "scram")]
        {
            use crate::sasl::scram::ScramHash;
            let (first, last) = scram_login(ScramHash::Sha256);
            let mut login = first.clone();
            login.push(0xff);
            login.extend_from_slice(&last);
            out.push(("sasl_scram", "seed-login-done".into(), login));
            for (m, hash) in [(1u8, ScramHash::Sha256), (2, ScramHash::Sha512)] {
                let (first, last) = scram_login(hash);
                for v in 0..=2i16 {
                    let mut input = vec![m, v as u8];
                    input.extend(sasl_frames(&[
                        &sasl_handshake_ok(),
                        &sasl_answer(v, 0, None, &first),
                        &sasl_answer(v, 0, None, &last),
                    ]));
                    out.push((
                        "sasl_authenticate",
                        format!("seed-scram{m}-v{v}-done"),
                        input,
                    ));
                }
                let mut input = vec![m, 2];
                input.extend(sasl_frames(&[
                    &sasl_handshake_ok(),
                    &sasl_answer(2, 0, None, &first),
                    &sasl_answer(2, 0, None, b"e=invalid-proof"),
                ]));
                out.push((
                    "sasl_authenticate",
                    format!("seed-scram{m}-e-failed"),
                    input,
                ));
            }
        }
        // sasl_oauthbearer
        let json = br#"{"status":"invalid_token","scope":"kafka"}"#;
        let mut refused = json.to_vec();
        refused.push(0xff);
        refused.extend_from_slice(b"Authentication failed: token expired");
        out.push(("sasl_oauthbearer", "seed-accepted-done".into(), Vec::new()));
        out.push((
            "sasl_oauthbearer",
            "seed-json-error-pending".into(),
            json.to_vec(),
        ));
        out.push(("sasl_oauthbearer", "seed-json-error-failed".into(), refused));
        out.push((
            "sasl_oauthbearer",
            "seed-not-json-failed".into(),
            b"<html>\xff".to_vec(),
        ));
        // sasl_authenticate: PLAIN and OAUTHBEARER at every version, refusals.
        let kafka = "Authentication failed during authentication due to invalid credentials \
                     with SASL mechanism PLAIN";
        for v in 0..=2i16 {
            let mut plain = vec![0, v as u8];
            plain.extend(sasl_frames(&[
                &sasl_handshake_ok(),
                &sasl_answer(v, 0, None, b""),
            ]));
            out.push(("sasl_authenticate", format!("seed-plain-v{v}-done"), plain));
            let mut plain = vec![0, v as u8];
            let refusal = sasl_answer(v, 58, Some(kafka.into()), b"");
            plain.extend(sasl_frames(&[&sasl_handshake_ok(), &refusal]));
            out.push((
                "sasl_authenticate",
                format!("seed-plain-v{v}-failed"),
                plain,
            ));
            let mut oauth = vec![3, v as u8];
            oauth.extend(sasl_frames(&[
                &sasl_handshake_ok(),
                &sasl_answer(v, 0, None, b""),
            ]));
            out.push((
                "sasl_authenticate",
                format!("seed-oauthbearer-v{v}-done"),
                oauth,
            ));
            let mut oauth = vec![3, v as u8];
            oauth.extend(sasl_frames(&[
                &sasl_handshake_ok(),
                &sasl_answer(v, 0, None, json),
                &sasl_answer(v, 58, Some("invalid_token".into()), b""),
            ]));
            out.push((
                "sasl_authenticate",
                format!("seed-oauthbearer-v{v}-failed"),
                oauth,
            ));
        }
        let unsupported = SaslHandshakeResponse {
            error_code: 33,
            mechanisms: vec!["SCRAM-SHA-512".into()],
        };
        let unsupported = encode_response::<SaslHandshakeRequest>(&unsupported, 1, 1);
        let mut input = vec![0, 2];
        input.extend(sasl_frames(&[&unsupported[4..]]));
        out.push((
            "sasl_authenticate",
            "seed-mechanism-unsupported".into(),
            input,
        ));
        let mut input = vec![0, 2];
        input.extend(sasl_frames(&[
            &sasl_handshake_ok(),
            &sasl_answer(2, 34, None, b""),
        ]));
        out.push((
            "sasl_authenticate",
            "seed-illegal-state-protocol".into(),
            input,
        ));
        out
    }

    /// `zstd_diff` seeds: mode-1 inputs (libzstd frames, no corruption) over varied
    /// payloads, at levels -5..=19, each flag and each payload repetition.
    #[cfg(all(feature = "zstd", feature = "zstd-native"))]
    fn zstd_diff_seeds() -> Vec<(&'static str, String, Vec<u8>)> {
        let mut rng = Rng(0x5eed_25d0_0000_0001);
        let letters: Vec<u8> = (0..1500).map(|_| b'a' + (rng.next() % 26) as u8).collect();
        let random: Vec<u8> = (0..1200).map(|_| rng.byte()).collect();
        let mut json = Vec::new();
        for i in 0..20u64 {
            let r = rng.next();
            json.extend_from_slice(
                format!(
                    "{{\"id\":{i},\"user\":\"u{}\",\"amount\":{}.{:02},\"ok\":{}}}\n",
                    r % 1000,
                    r % 100_000,
                    r % 100,
                    r % 2 == 0
                )
                .as_bytes(),
            );
        }
        let payloads: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("byte", vec![7]),
            ("tiny", b"kafka".to_vec()),
            ("zeros", vec![0; 1000]),
            (
                "text",
                b"the quick brown fox jumps over the lazy dog; ".repeat(30),
            ),
            ("letters", letters),
            ("json", json),
            ("random", random),
        ];
        // (level, flags, copies index)
        let mut shapes = Vec::new();
        for (i, level) in [-5, -1, 1, 3, 6, 9, 12, 16, 19].into_iter().enumerate() {
            shapes.push((level, 0u8, 0u8));
            shapes.push((level, 0x02, 0));
            shapes.push((
                level,
                [0x01, 0x03, 0x06, 0x0b, 0x0e, 0x12, 0x22, 0x42, 0x83][i],
                0,
            ));
        }
        for flags in [
            0x01, 0x02, 0x04, 0x08, 0x0c, 0x10, 0x20, 0x30, 0x40, 0x80, 0x33,
        ] {
            shapes.push((3, flags, 0));
        }
        for copies in 3..=8 {
            shapes.push((3, 0x02, copies));
            shapes.push((1, 0x13, copies));
        }
        let mut out = Vec::new();
        for (name, payload) in &payloads {
            for &(level, flags, copies) in &shapes {
                if copies > 0 && payload.len() < 100 {
                    continue;
                }
                let level_byte = copies * 27 + (level + 7) as u8;
                let mut input = vec![1, level_byte, flags, 0];
                input.extend_from_slice(payload);
                out.push((
                    "zstd_diff",
                    format!("seed-{name}-l{level}-f{flags:02x}-c{copies}"),
                    input,
                ));
            }
        }
        out
    }

    const BATCH_LEN_OVERHEAD: usize = 12;

    /// Inputs cut from the recordings: whole bodies for `fetch_response` and `frame`, each
    /// partition's record set for `record_set`, each compressed batch's records section
    /// for its codec target.
    fn recorded_inputs() -> Vec<(&'static str, String, Vec<u8>)> {
        let mut out = Vec::new();
        for rec in recordings() {
            let stem = format!("rec-v{}-{}", rec.version, rec.what);
            let mut f = vec![rec.version as u8, 1];
            f.extend_from_slice(&rec.body);
            out.push(("fetch_response", stem.clone(), f));
            let mut f = (rec.body.len() as i32).to_be_bytes().to_vec();
            f.extend_from_slice(&rec.body);
            out.push(("frame", stem.clone(), f));
            let resp = fetch_body(&rec.body, rec.version, true).unwrap().response;
            for p in resp.responses.iter().flat_map(|t| &t.partitions) {
                let set = &rec.body[p.records.start..][..p.records.len];
                let mut f = vec![1];
                f.extend_from_slice(set);
                out.push(("record_set", format!("{stem}-p{}", p.partition_index), f));
                for b in BatchIter::new(set, true) {
                    let b = b.unwrap();
                    let target = match b.header.compression() {
                        Compression::Gzip => "batch_gzip",
                        Compression::Snappy => "batch_snappy",
                        Compression::Lz4 => "batch_lz4",
                        Compression::Zstd => "batch_zstd",
                        _ => continue,
                    };
                    let count = u16::try_from(b.header.record_count).unwrap_or(u16::MAX);
                    let mut f = count.to_be_bytes().to_vec();
                    f.push(b.header.attributes as u8 & ATTR_FLAGS);
                    f.extend_from_slice(b.records);
                    let name = format!("{stem}-p{}-o{}", p.partition_index, b.header.base_offset);
                    out.push((target, name, f));
                }
            }
        }
        out
    }

    #[test]
    fn seeds_are_valid_inputs() {
        let seeds = seeds();
        for &(target, _) in TARGETS {
            assert!(seeds.iter().any(|s| s.0 == target), "no seed for {target}");
        }
        for (target, name, data) in &seeds {
            let what = format!("{target}/{name}");
            match *target {
                "response" => {
                    let (api, v) = pick(data[0] as i16, data[1] as i16);
                    assert!((api.decode)(&data[2..], v), "{what}");
                }
                "frame" => frame(data),
                "sasl_scram" => {
                    sasl_scram(data);
                    #[cfg(feature = "scram")]
                    assert_eq!(scram_exchange(data), promised(name), "{what}");
                }
                "sasl_oauthbearer" => {
                    assert_eq!(oauthbearer_exchange(data), promised(name), "{what}");
                }
                "sasl_authenticate" => {
                    assert_eq!(authenticate_exchange(data), promised(name), "{what}");
                }
                "consumer_protocol" => {
                    consumer_protocol(data);
                    let decodes = if name.contains("subscription") {
                        ConsumerProtocolSubscription::decode(data).is_ok()
                    } else {
                        ConsumerProtocolAssignment::decode(data).is_ok()
                    };
                    assert!(decodes, "{what}");
                }
                "record_set" => {
                    let d = decode_record_set(&data[1..], data[0] & 1 != 0);
                    assert!(d.records > 10, "{what}: {d:?}");
                    assert_eq!(d.errors, 0, "{what}: {d:?}");
                }
                #[cfg(all(feature = "zstd", feature = "zstd-native"))]
                "zstd_diff" => {
                    // libzstd's frames: ours decodes them (and agrees with libzstd).
                    zstd_diff(data);
                    let z = zstd_diff_frames(&data[1..]).unwrap();
                    let (mut out, mut end) = (Vec::new(), 0);
                    let r = crate::protocol::zstd::decode(&z, &mut out, &mut end, ZSTD_DIFF_LIMIT);
                    assert_eq!(r, Ok(()), "{what}");
                }
                "fetch_response" => {
                    let d = fetch_body(&data[2..], data[0] as i16, true).unwrap();
                    let partitions = d.response.responses[0].partitions.len();
                    assert_eq!(partitions, 3, "{what}");
                    if ALL_CODECS {
                        assert_eq!(d.records.errors, 0, "{what}: {:?}", d.records);
                        assert_eq!(d.records.records, 23, "{what}: {:?}", d.records);
                    }
                }
                _ => {
                    let c = match *target {
                        "batch_gzip" => Compression::Gzip,
                        "batch_snappy" => Compression::Snappy,
                        "batch_lz4" => Compression::Lz4,
                        _ => Compression::Zstd,
                    };
                    let count = BigEndian::read_u16(data);
                    let batch = codec_batch(c, count, data[2], &data[3..]);
                    let d = decode_record_set(&batch, true);
                    if ALL_CODECS {
                        assert_eq!(d.errors, 0, "{what}: {d:?}");
                        assert_eq!(d.records, count as usize, "{what}: {d:?}");
                    }
                }
            }
        }
    }

    /// Writes the seed corpora to `$FUZZ_SEEDS_OUT/<target>/` (default `target/fuzz-seeds`);
    /// see `fuzz/README.md`.
    #[test]
    #[ignore = "writes files; run by hand to refresh the seed corpora"]
    fn write_seed_corpora() {
        let out = std::env::var_os("FUZZ_SEEDS_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-seeds"));
        let mut all = seeds();
        all.extend(recorded_inputs());
        for (target, name, data) in all {
            let dir = out.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
}
