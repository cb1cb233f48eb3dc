//! FindCoordinator (key 10): which broker coordinates a group (or a transactional id, or a
//! share group), so that offset commits and fetches go to it.
//!
//! We speak v0..=6 (flexible from v3). Up to v3 a request names one `key` and the answer is
//! top-level; from v4 (KIP-699) the request carries a batch of `coordinator_keys` and the
//! answer lists one [`Coordinator`] per key. v5 (`TRANSACTION_ABORTABLE`, KIP-890) and v6
//! (share groups, KIP-932) change no layout. We always ask for one group
//! ([`FindCoordinatorRequest::for_group`]) and read its answer the same way whatever the
//! version ([`FindCoordinatorResponse::coordinator`]).
//!
//! Layouts follow `FindCoordinatorRequest.json` / `FindCoordinatorResponse.json`; neither
//! declares tagged fields.

use super::Api;
use crate::protocol::wire::DecodeError;
use crate::protocol::wire_struct;

/// `key_type` of a consumer group (the only key type before v1).
pub const KEY_TYPE_GROUP: i8 = 0;
/// `key_type` of a transactional id (v1+).
pub const KEY_TYPE_TRANSACTION: i8 = 1;
/// `key_type` of a share group (v6+, KIP-932).
pub const KEY_TYPE_SHARE: i8 = 2;

/// The first version that batches keys (`coordinator_keys`, `coordinators`; KIP-699).
pub const BATCHED_VERSION: i16 = 4;

wire_struct! {
    /// FindCoordinator request.
    pub struct FindCoordinatorRequest {
        /// The one key asked for (v0-3).
        key: String, since 0, until 3;
        /// [`KEY_TYPE_GROUP`], [`KEY_TYPE_TRANSACTION`] or [`KEY_TYPE_SHARE`].
        key_type: i8, since 1, default KEY_TYPE_GROUP;
        /// The keys asked for (v4+).
        coordinator_keys: Vec<String>, since 4;
    }

    /// FindCoordinator response.
    pub struct FindCoordinatorResponse {
        throttle_time_ms: i32, since 1;
        /// The answer for the one key (v0-3).
        error_code: i16, since 0, until 3;
        error_message: Option<String>, since 1, until 3;
        node_id: i32, since 0, until 3;
        host: String, since 0, until 3;
        port: i32, since 0, until 3;
        /// One answer per key asked for (v4+).
        coordinators: Vec<Coordinator>, since 4;
    }

    /// The coordinator of one key (v4+).
    pub struct Coordinator {
        key: String, since 4;
        node_id: i32, since 4;
        host: String, since 4;
        port: i32, since 4;
        error_code: i16, since 4;
        error_message: Option<String>, since 4;
    }
}

impl Api for FindCoordinatorRequest {
    const KEY: i16 = 10;
    const NAME: &'static str = "FindCoordinator";
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 6;
    const FLEXIBLE_FROM: i16 = 3;
    type Response = FindCoordinatorResponse;
    fn throttle_time_ms(resp: &FindCoordinatorResponse) -> i32 {
        resp.throttle_time_ms
    }
}

impl FindCoordinatorRequest {
    /// Asks for the coordinator of group `group_id`, filling the fields version `v` carries:
    /// `key` up to v3, the one-element `coordinator_keys` from v4.
    pub fn for_group(group_id: &str, v: i16) -> Self {
        let mut req = FindCoordinatorRequest {
            key_type: KEY_TYPE_GROUP,
            ..Default::default()
        };
        if v >= BATCHED_VERSION {
            req.coordinator_keys = vec![group_id.to_owned()];
        } else {
            req.key = group_id.to_owned();
        }
        req
    }
}

impl FindCoordinatorResponse {
    /// The answer for `key` in a response decoded at version `v`, as
    /// `(error_code, node_id, host, port, error_message)`: the top-level fields up to v3
    /// (which answer the one key asked for), the entry for `key` in `coordinators` from v4.
    /// A v4+ response without an entry for `key` is an error.
    pub fn coordinator(
        &self,
        key: &str,
        v: i16,
    ) -> Result<(i16, i32, &str, i32, Option<&str>), DecodeError> {
        if v < BATCHED_VERSION {
            return Ok((
                self.error_code,
                self.node_id,
                &self.host,
                self.port,
                self.error_message.as_deref(),
            ));
        }
        self.coordinators
            .iter()
            .find(|c| c.key == key)
            .map(|c| {
                (
                    c.error_code,
                    c.node_id,
                    c.host.as_str(),
                    c.port,
                    c.error_message.as_deref(),
                )
            })
            .ok_or_else(|| {
                DecodeError::invalid("FindCoordinator response has no entry for the key asked for")
                    .context("FindCoordinatorResponse.coordinators")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::{
        decode_request, decode_response, encode_request, encode_response,
    };
    use crate::protocol::wire::DecodeErrorKind;

    fn versions() -> std::ops::RangeInclusive<i16> {
        FindCoordinatorRequest::MIN_VERSION..=FindCoordinatorRequest::MAX_VERSION
    }

    /// A request with every field set away from its default.
    fn request() -> FindCoordinatorRequest {
        FindCoordinatorRequest {
            key: "orders-app".into(),
            key_type: KEY_TYPE_TRANSACTION,
            coordinator_keys: vec!["orders-app".into(), "billing".into()],
        }
    }

    /// What the broker decodes from `request()` sent at `v`.
    fn request_seen_at(v: i16) -> FindCoordinatorRequest {
        let mut r = request();
        if v > 3 {
            r.key.clear();
        }
        if v < 1 {
            r.key_type = KEY_TYPE_GROUP;
        }
        if v < 4 {
            r.coordinator_keys.clear();
        }
        r
    }

    fn response() -> FindCoordinatorResponse {
        FindCoordinatorResponse {
            throttle_time_ms: 12,
            error_code: 15,
            error_message: Some("loading".into()),
            node_id: 3,
            host: "kafka-3".into(),
            port: 9094,
            coordinators: vec![
                Coordinator {
                    key: "orders-app".into(),
                    node_id: 2,
                    host: "kafka-2".into(),
                    port: 9093,
                    error_code: 0,
                    error_message: None,
                },
                Coordinator {
                    key: "billing".into(),
                    node_id: -1,
                    host: String::new(),
                    port: -1,
                    error_code: 15,
                    error_message: Some("not available".into()),
                },
            ],
        }
    }

    fn response_seen_at(v: i16) -> FindCoordinatorResponse {
        let mut r = response();
        if v < 1 {
            r.throttle_time_ms = 0;
            r.error_message = None;
        }
        if v > 3 {
            r.error_code = 0;
            r.error_message = None;
            r.node_id = 0;
            r.host.clear();
            r.port = 0;
        } else {
            r.coordinators.clear();
        }
        r
    }

    #[test]
    fn claims_v0_to_v6_flexible_from_v3() {
        assert_eq!(
            (
                FindCoordinatorRequest::KEY,
                FindCoordinatorRequest::MIN_VERSION,
                FindCoordinatorRequest::MAX_VERSION,
                FindCoordinatorRequest::FLEXIBLE_FROM
            ),
            (10, 0, 6, 3)
        );
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(), v, 4, "me");
            let (ver, corr, back) = decode_request::<FindCoordinatorRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 4));
            assert_eq!(back, request_seen_at(v), "request v{v}");

            let frame = encode_response::<FindCoordinatorRequest>(&response(), v, 4);
            let back = decode_response::<FindCoordinatorRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response_seen_at(v), "response v{v}");
        }
    }

    #[test]
    fn v1_request_matches_the_schema_byte_for_byte() {
        let frame = encode_request(&FindCoordinatorRequest::for_group("g", 1), 1, 7, "c");
        let mut want = vec![0, 10, 0, 1, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0, 1, b'g']); // key "g"
        want.push(0); // key_type group
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame[..4], (want.len() as i32).to_be_bytes());
        // v0: the key alone.
        let frame = encode_request(&FindCoordinatorRequest::for_group("g", 0), 0, 7, "c");
        assert_eq!(&frame[4 + 11..], &[0, 1, b'g']);
    }

    #[test]
    fn flexible_requests_match_the_schema_byte_for_byte() {
        // v3: compact key, key_type, tags.
        let frame = encode_request(&FindCoordinatorRequest::for_group("gr", 3), 3, 7, "c");
        let mut want = vec![0, 10, 0, 3, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.extend_from_slice(&[3, b'g', b'r', 0, 0]); // key "gr", key_type, tags
        assert_eq!(&frame[4..], &want[..]);
        // v4: key_type, then a compact array of compact strings, tags.
        let frame = encode_request(&FindCoordinatorRequest::for_group("gr", 4), 4, 7, "c");
        let mut want = vec![0, 10, 0, 4, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.push(0); // key_type group
        want.extend_from_slice(&[2, 3, b'g', b'r']); // coordinator_keys ["gr"]
        want.push(0); // tags
        assert_eq!(&frame[4..], &want[..]);
    }

    /// A v3 response (last unbatched, flexible).
    fn v3_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 5]); // throttle_time_ms
        b.extend_from_slice(&[0, 0]); // error_code
        b.push(0); // error_message null
        b.extend_from_slice(&[0, 0, 0, 2]); // node_id
        b.extend_from_slice(&[2, b'h']); // host "h"
        b.extend_from_slice(&[0, 0, 0x23, 0x84]); // port 9092
        b.push(0); // tags
        b
    }

    /// A v4 response with one coordinator.
    fn v4_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 0]); // throttle_time_ms
        b.push(2); // coordinators: 1
        b.extend_from_slice(&[2, b'g']); // key "g"
        b.extend_from_slice(&[0, 0, 0, 2]); // node_id
        b.extend_from_slice(&[2, b'h']); // host "h"
        b.extend_from_slice(&[0, 0, 0x23, 0x84]); // port 9092
        b.extend_from_slice(&[0, 14]); // error_code COORDINATOR_LOAD_IN_PROGRESS
        b.extend_from_slice(&[3, b'l', b'd']); // error_message "ld"
        b.push(0); // coordinator tags
        b.push(0); // response tags
        b
    }

    #[test]
    fn v3_and_v4_responses_are_decoded_as_the_schema_lays_them_out() {
        let resp = decode_response::<FindCoordinatorRequest>(&v3_body(), 3).unwrap();
        assert_eq!(
            resp,
            FindCoordinatorResponse {
                throttle_time_ms: 5,
                node_id: 2,
                host: "h".into(),
                port: 9092,
                ..Default::default()
            }
        );
        assert_eq!(resp.coordinator("g", 3).unwrap(), (0, 2, "h", 9092, None));

        let resp = decode_response::<FindCoordinatorRequest>(&v4_body(), 4).unwrap();
        assert_eq!(
            resp.coordinators,
            vec![Coordinator {
                key: "g".into(),
                node_id: 2,
                host: "h".into(),
                port: 9092,
                error_code: 14,
                error_message: Some("ld".into()),
            }]
        );
        assert_eq!(
            resp.coordinator("g", 4).unwrap(),
            (14, 2, "h", 9092, Some("ld"))
        );
    }

    #[test]
    fn v0_response_has_no_throttle_time_and_no_message() {
        let mut b = vec![0, 0, 0, 3]; // correlation id
        b.extend_from_slice(&[0, 15]); // error_code
        b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // node_id -1
        b.extend_from_slice(&[0, 0]); // host ""
        b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // port -1
        let resp = decode_response::<FindCoordinatorRequest>(&b, 0).unwrap();
        assert_eq!(resp.coordinator("g", 0).unwrap(), (15, -1, "", -1, None));
        assert_eq!(resp.throttle_time_ms, 0);
    }

    #[test]
    fn for_group_and_coordinator_work_at_every_version() {
        for v in versions() {
            let req = FindCoordinatorRequest::for_group("grp", v);
            let frame = encode_request(&req, v, 1, "c");
            let (_, _, back) = decode_request::<FindCoordinatorRequest>(&frame[4..]).unwrap();
            assert_eq!(back, req, "v{v}");
            assert_eq!(back.key_type, KEY_TYPE_GROUP);
            if v >= 4 {
                assert_eq!(
                    (back.key.as_str(), &back.coordinator_keys[..]),
                    ("", &["grp".to_owned()][..])
                );
            } else {
                assert_eq!((back.key.as_str(), back.coordinator_keys.len()), ("grp", 0));
            }

            // The broker's answer for "grp", laid out as version v has it.
            let mut resp = FindCoordinatorResponse::default();
            if v >= 4 {
                resp.coordinators = vec![
                    Coordinator {
                        key: "other".into(),
                        node_id: 9,
                        host: "x".into(),
                        port: 1,
                        error_code: 0,
                        error_message: None,
                    },
                    Coordinator {
                        key: "grp".into(),
                        node_id: 2,
                        host: "kafka-2".into(),
                        port: 9093,
                        error_code: 0,
                        error_message: Some("m".into()),
                    },
                ];
            } else {
                resp.node_id = 2;
                resp.host = "kafka-2".into();
                resp.port = 9093;
                resp.error_message = Some("m".into());
            }
            let frame = encode_response::<FindCoordinatorRequest>(&resp, v, 1);
            let back = decode_response::<FindCoordinatorRequest>(&frame[4..], v).unwrap();
            let message = if v >= 1 { Some("m") } else { None };
            assert_eq!(
                back.coordinator("grp", v).unwrap(),
                (0, 2, "kafka-2", 9093, message),
                "v{v}"
            );
            if v >= 4 {
                assert!(back.coordinator("missing", v).is_err(), "v{v}");
                let empty = FindCoordinatorResponse::default();
                assert!(empty.coordinator("grp", v).is_err(), "v{v}");
            }
        }
    }

    #[test]
    fn truncated_frames_are_errors() {
        for v in versions() {
            let frame = encode_response::<FindCoordinatorRequest>(&response(), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<FindCoordinatorRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<FindCoordinatorRequest>(&frame[4..cut]).is_err());
            }
        }
        for (body, v) in [(v3_body(), 3), (v4_body(), 4)] {
            for cut in 0..body.len() {
                assert!(decode_response::<FindCoordinatorRequest>(&body[..cut], v).is_err());
            }
        }
    }

    #[test]
    fn impossible_counts_are_rejected_before_allocating() {
        // v4: coordinators compact count 2^31 (2^31 - 1 entries).
        let mut body = v4_body();
        let at = 9; // after header (5), throttle (4)
        assert_eq!(body[at], 2);
        body.splice(at..at + 1, [0x80, 0x80, 0x80, 0x80, 0x08]);
        let e = decode_response::<FindCoordinatorRequest>(&body, 4).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A v4 request claiming 2^31 - 1 keys.
        let mut frame = encode_request(&FindCoordinatorRequest::for_group("g", 4), 4, 1, "c");
        let at = 4 + 12 + 1; // size, header v2, key_type
        assert_eq!(frame[at], 2);
        frame.splice(at..at + 1, [0x80, 0x80, 0x80, 0x80, 0x08]);
        let e = decode_request::<FindCoordinatorRequest>(&frame[4..]).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A host longer than the frame.
        let mut body = v3_body();
        body[16] = 0x7f;
        assert!(decode_response::<FindCoordinatorRequest>(&body, 3).is_err());
        // A null where the host is required.
        let mut body = v3_body();
        body[16] = 0;
        assert!(decode_response::<FindCoordinatorRequest>(&body, 3).is_err());
    }
}
