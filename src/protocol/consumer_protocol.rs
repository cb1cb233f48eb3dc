//! The consumer's payloads in the classic group protocol: its subscription, carried as
//! the `metadata` of each protocol it offers in JoinGroup (and handed to the leader in the
//! JoinGroup response), and its assignment, carried as the leader's `assignment` bytes in
//! SyncGroup (and handed back to each member in the SyncGroup response). The group
//! coordinator never looks inside them; only members do.
//!
//! Each payload is an `int16` version followed by the structure in the non-flexible
//! encoding (no compact types, no tagged fields) of that version:
//!
//! - [`ConsumerProtocolSubscription`] v0..=3: `topics` and nullable `user_data`; v1 adds
//!   `owned_partitions` (for cooperative rebalancing), v2 `generation_id` (-1 if none), v3
//!   the nullable `rack_id` (rack-aware assignment).
//! - [`ConsumerProtocolAssignment`] v0..=3: `assigned_partitions` and nullable `user_data`;
//!   every version has the same layout (its version follows the subscription's).
//!
//! Writing always uses v3, as the Java client does ([`ConsumerProtocolSubscription::encode`];
//! `encode_version` writes an older one). Reading follows Java's `ConsumerProtocol`: a
//! version above 3 is read with the v3 layout and whatever follows is ignored (new versions
//! may only append fields), and so are bytes after a v0..=3 body (Java does not check);
//! a negative version, a missing version, or a body cut short is a [`DecodeError`].
//!
//! An empty byte string is not a payload: [`ConsumerProtocolAssignment::decode`] (and
//! [`ConsumerProtocolSubscription::decode`]) fail on it with an
//! [`Invalid`](DecodeErrorKind::Invalid) error described by [`EMPTY_PAYLOAD`], which a
//! caller tells apart from a malformed payload with [`is_empty_payload`]. SyncGroup returns an empty assignment
//! when the leader sent none for the member (or the group is rebalancing); the caller
//! decides what that means (the Java client treats it as "rejoin").
//!
//! Layouts follow `ConsumerProtocolSubscription.json` / `ConsumerProtocolAssignment.json`.

use super::message::{Bytes, Version, Wire};
use super::wire::{DecodeError, DecodeErrorKind, Reader, Writer};
use super::wire_struct;

/// The JoinGroup `protocol_type` of consumer groups.
pub const PROTOCOL_TYPE: &str = "consumer";

/// The highest payload version we know (and the one we write).
pub const MAX_VERSION: i16 = 3;

/// The description of the error decoding an empty payload returns.
pub const EMPTY_PAYLOAD: &str = "empty consumer protocol payload";

wire_struct! {
    /// A member's subscription (JoinGroup protocol metadata).
    pub struct ConsumerProtocolSubscription {
        /// The subscribed topics (the Java client sorts them).
        topics: Vec<String>, since 0;
        /// The assignor's own data, if any.
        user_data: Option<Bytes>, since 0;
        /// The partitions the member owns (v1+; cooperative rebalancing).
        owned_partitions: Vec<TopicPartition>, since 1;
        /// The generation in which the member owned them, -1 if none (v2+).
        generation_id: i32, since 2, default -1;
        /// The member's rack, if any (v3+).
        rack_id: Option<String>, since 3;
    }

    /// Some partitions of one topic.
    pub struct TopicPartition {
        topic: String, since 0;
        partitions: Vec<i32>, since 0;
    }

    /// A member's assignment (SyncGroup assignment bytes).
    pub struct ConsumerProtocolAssignment {
        /// The partitions assigned to the member.
        assigned_partitions: Vec<TopicPartition>, since 0;
        /// The assignor's own data, if any.
        user_data: Option<Bytes>, since 0;
    }
}

impl ConsumerProtocolSubscription {
    /// The payload at version 3: the version, then the fields.
    pub fn encode(&self) -> Vec<u8> {
        encode_payload(self, MAX_VERSION)
    }

    /// The payload at `version` (clamped to 0..=3): fields the version lacks are not
    /// written.
    pub fn encode_version(&self, version: i16) -> Vec<u8> {
        encode_payload(self, version)
    }

    /// Decodes a payload. See the module docs for versions above 3, trailing bytes, and
    /// an empty payload (an error, [`is_empty_payload`]).
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        decode_payload(payload, "ConsumerProtocolSubscription version")
    }
}

impl ConsumerProtocolAssignment {
    /// The payload at version 3: the version, then the fields.
    pub fn encode(&self) -> Vec<u8> {
        encode_payload(self, MAX_VERSION)
    }

    /// The payload at `version` (clamped to 0..=3; every version has the same layout).
    pub fn encode_version(&self, version: i16) -> Vec<u8> {
        encode_payload(self, version)
    }

    /// Decodes a payload. An empty one (what SyncGroup returns when the leader assigned
    /// nothing to this member) is an error that [`is_empty_payload`] recognises; see the
    /// module docs for versions above 3 and trailing bytes.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        decode_payload(payload, "ConsumerProtocolAssignment version")
    }
}

/// Whether `e` is the error of decoding an empty payload (rather than a malformed one).
pub fn is_empty_payload(e: &DecodeError) -> bool {
    e.kind() == &DecodeErrorKind::Invalid(EMPTY_PAYLOAD)
}

fn encode_payload<T: Wire>(payload: &T, version: i16) -> Vec<u8> {
    let v = version.clamp(0, MAX_VERSION);
    let mut w = Writer::with_capacity(64);
    w.i16(v);
    payload.write(&mut w, Version { v, flexible: false });
    w.into_inner()
}

fn decode_payload<T: Wire>(payload: &[u8], what: &'static str) -> Result<T, DecodeError> {
    if payload.is_empty() {
        return Err(DecodeError::invalid(EMPTY_PAYLOAD));
    }
    let mut r = Reader::new(payload);
    let v = r.i16().map_err(|e| e.context(what))?;
    if v < 0 {
        return Err(DecodeError::invalid("negative version").context(what));
    }
    // Newer versions only append fields: read what v3 has and leave the rest, as Java does.
    T::read(
        &mut r,
        Version {
            v: v.min(MAX_VERSION),
            flexible: false,
        },
    )
}

/// Output of `scripts/java/ConsumerProtocolBytes.java` run with kafka-clients 4.4.0 (see
/// that file for the inputs): `name hex` lines, the bytes the Java client's
/// `ConsumerProtocol.serializeSubscription` / `serializeAssignment` write. The tests below
/// decode them and compare them with our encoder's; the fuzzing seeds use them too.
#[cfg(test)]
const JAVA: &str = "
subscription-v3-full 0003000000020005617564697400066f7264657273000000030102030000000200056175646974000000010000000100066f72646572730000000200000000000000020000000700067261636b2d31
subscription-v0-full 0000000000020005617564697400066f726465727300000003010203
subscription-v1-full 0001000000020005617564697400066f7264657273000000030102030000000200056175646974000000010000000100066f7264657273000000020000000000000002
subscription-v2-full 0002000000020005617564697400066f7264657273000000030102030000000200056175646974000000010000000100066f726465727300000002000000000000000200000007
subscription-v3-minimal 000300000001000174ffffffff00000000ffffffffffff
subscription-v3-empty-user-data 0003000000000000000000000000ffffffffffff
assignment-v3-full 00030000000200066f7264657273000000020000000000000002000561756469740000000100000001000000020908
assignment-v0-full 00000000000200066f7264657273000000020000000000000002000561756469740000000100000001000000020908
assignment-v3-empty 000300000000ffffffff
";

/// The Java fixtures ([`JAVA`]) as `(name, payload)`.
#[cfg(test)]
pub(crate) fn java_payloads() -> Vec<(&'static str, Vec<u8>)> {
    let unhex = |s: &str| -> Vec<u8> {
        assert!(s.len() % 2 == 0, "odd hex length");
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    JAVA.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (name, hex) = l.split_once(' ').expect("name hex");
            (name, unhex(hex))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partitions: &[i32]) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partitions: partitions.to_vec(),
        }
    }

    /// A subscription with every field set away from its default.
    fn subscription() -> ConsumerProtocolSubscription {
        ConsumerProtocolSubscription {
            topics: vec!["audit".into(), "orders".into()],
            user_data: Some(Bytes(vec![1, 2, 3])),
            owned_partitions: vec![tp("audit", &[1]), tp("orders", &[0, 2])],
            generation_id: 7,
            rack_id: Some("rack-1".into()),
        }
    }

    /// What a reader decodes from `subscription()` written at `v`.
    fn subscription_seen_at(v: i16) -> ConsumerProtocolSubscription {
        let mut s = subscription();
        if v < 1 {
            s.owned_partitions.clear();
        }
        if v < 2 {
            s.generation_id = -1;
        }
        if v < 3 {
            s.rack_id = None;
        }
        s
    }

    /// An assignment with every field set away from its default.
    fn assignment() -> ConsumerProtocolAssignment {
        ConsumerProtocolAssignment {
            assigned_partitions: vec![tp("orders", &[0, 2]), tp("audit", &[1])],
            user_data: Some(Bytes(vec![9, 8])),
        }
    }

    fn java(name: &str) -> Vec<u8> {
        java_payloads()
            .into_iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no Java fixture {name}"))
            .1
    }

    #[test]
    fn java_subscriptions_decode_and_our_encoder_writes_the_same_bytes() {
        let full = java("subscription-v3-full");
        assert_eq!(
            ConsumerProtocolSubscription::decode(&full).unwrap(),
            subscription()
        );
        assert_eq!(subscription().encode(), full);
        for v in 0..=2 {
            let b = java(&format!("subscription-v{v}-full"));
            assert_eq!(
                ConsumerProtocolSubscription::decode(&b).unwrap(),
                subscription_seen_at(v),
                "v{v}"
            );
            assert_eq!(subscription().encode_version(v), b, "v{v}");
        }
        let minimal = ConsumerProtocolSubscription {
            topics: vec!["t".into()],
            ..Default::default()
        };
        let b = java("subscription-v3-minimal");
        assert_eq!(ConsumerProtocolSubscription::decode(&b).unwrap(), minimal);
        assert_eq!(minimal.encode(), b);
        let empty = ConsumerProtocolSubscription {
            user_data: Some(Bytes(vec![])),
            ..Default::default()
        };
        let b = java("subscription-v3-empty-user-data");
        assert_eq!(ConsumerProtocolSubscription::decode(&b).unwrap(), empty);
        assert_eq!(empty.encode(), b);
    }

    #[test]
    fn java_assignments_decode_and_our_encoder_writes_the_same_bytes() {
        for (name, v) in [("assignment-v3-full", 3), ("assignment-v0-full", 0)] {
            let b = java(name);
            assert_eq!(
                ConsumerProtocolAssignment::decode(&b).unwrap(),
                assignment(),
                "{name}"
            );
            assert_eq!(assignment().encode_version(v), b, "{name}");
        }
        assert_eq!(assignment().encode(), java("assignment-v3-full"));
        let b = java("assignment-v3-empty");
        assert_eq!(
            ConsumerProtocolAssignment::decode(&b).unwrap(),
            ConsumerProtocolAssignment::default()
        );
        assert_eq!(ConsumerProtocolAssignment::default().encode(), b);
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in 0..=MAX_VERSION {
            let b = subscription().encode_version(v);
            assert_eq!(b[..2], v.to_be_bytes());
            assert_eq!(
                ConsumerProtocolSubscription::decode(&b).unwrap(),
                subscription_seen_at(v),
                "v{v}"
            );
            let b = assignment().encode_version(v);
            assert_eq!(b[..2], v.to_be_bytes());
            assert_eq!(
                ConsumerProtocolAssignment::decode(&b).unwrap(),
                assignment(),
                "v{v}"
            );
        }
        // We write v3 unless told otherwise, and never a version we do not know.
        assert_eq!(subscription().encode(), subscription().encode_version(3));
        assert_eq!(subscription().encode_version(9)[..2], [0, 3]);
        assert_eq!(assignment().encode()[..2], [0, 3]);
    }

    #[test]
    fn defaults_are_the_schema_defaults() {
        let s = ConsumerProtocolSubscription::default();
        assert_eq!((s.user_data, s.generation_id, s.rack_id), (None, -1, None));
        assert_eq!(ConsumerProtocolAssignment::default().user_data, None);
        assert_eq!(PROTOCOL_TYPE, "consumer");
    }

    #[test]
    fn v0_and_v3_subscriptions_match_the_schema_byte_for_byte() {
        let s = ConsumerProtocolSubscription {
            topics: vec!["t".into()],
            user_data: Some(Bytes(vec![0xaa])),
            owned_partitions: vec![tp("t", &[5])],
            generation_id: 2,
            rack_id: Some("r".into()),
        };
        let mut want = vec![0, 0]; // version 0
        want.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // topics ["t"]
        want.extend_from_slice(&[0, 0, 0, 1, 0xaa]); // user_data
        assert_eq!(s.encode_version(0), want);
        let mut want = vec![0, 3]; // version 3
        want.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // topics
        want.extend_from_slice(&[0, 0, 0, 1, 0xaa]); // user_data
        want.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 5]); // owned
        want.extend_from_slice(&[0, 0, 0, 2]); // generation_id
        want.extend_from_slice(&[0, 1, b'r']); // rack_id
        assert_eq!(s.encode(), want);
        assert_eq!(ConsumerProtocolSubscription::decode(&want).unwrap(), s);
        // Null user data and rack: -1 lengths.
        let s = ConsumerProtocolSubscription {
            user_data: None,
            rack_id: None,
            ..s
        };
        let b = s.encode();
        assert_eq!(b[9..13], [0xff; 4]);
        assert_eq!(b[b.len() - 2..], [0xff, 0xff]);
        assert_eq!(ConsumerProtocolSubscription::decode(&b).unwrap(), s);
    }

    #[test]
    fn assignments_match_the_schema_byte_for_byte() {
        let a = ConsumerProtocolAssignment {
            assigned_partitions: vec![tp("t", &[1, 2])],
            user_data: None,
        };
        let mut want = vec![0, 3]; // version 3
        want.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // one topic, "t"
        want.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2]); // partitions
        want.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // user_data null
        assert_eq!(a.encode(), want);
        assert_eq!(ConsumerProtocolAssignment::decode(&want).unwrap(), a);
        // v0..=2 are laid out the same.
        for v in 0..=2i16 {
            want[..2].copy_from_slice(&v.to_be_bytes());
            assert_eq!(a.encode_version(v), want);
            assert_eq!(ConsumerProtocolAssignment::decode(&want).unwrap(), a);
        }
    }

    #[test]
    fn newer_versions_are_read_as_v3_and_what_follows_is_ignored() {
        for version in [4i16, 5, i16::MAX] {
            let mut b = java("subscription-v3-full");
            b[..2].copy_from_slice(&version.to_be_bytes());
            b.extend_from_slice(&[0, 0, 0, 9, 1, 2, 3]); // a field v3 does not know
            assert_eq!(
                ConsumerProtocolSubscription::decode(&b).unwrap(),
                subscription()
            );
            let mut b = java("assignment-v3-full");
            b[..2].copy_from_slice(&version.to_be_bytes());
            b.push(0x42);
            assert_eq!(
                ConsumerProtocolAssignment::decode(&b).unwrap(),
                assignment()
            );
        }
        // As in Java, bytes after a known version's body are ignored too.
        let mut b = java("subscription-v0-full");
        b.extend_from_slice(&[0xde, 0xad]);
        assert_eq!(
            ConsumerProtocolSubscription::decode(&b).unwrap(),
            subscription_seen_at(0)
        );
        // But a newer version still needs the whole v3 body.
        let mut b = java("subscription-v2-full");
        b[..2].copy_from_slice(&4i16.to_be_bytes());
        assert!(ConsumerProtocolSubscription::decode(&b).is_err());
    }

    #[test]
    fn empty_negative_and_truncated_payloads_are_errors() {
        let e = ConsumerProtocolAssignment::decode(&[]).unwrap_err();
        assert!(is_empty_payload(&e), "{e}");
        assert_eq!(e.kind(), &DecodeErrorKind::Invalid(EMPTY_PAYLOAD));
        assert!(is_empty_payload(
            &ConsumerProtocolSubscription::decode(&[]).unwrap_err()
        ));
        for b in [
            &[0xff, 0xff][..],
            &[0x80, 0x00],
            &[0xff, 0xfe, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
        ] {
            let e = ConsumerProtocolAssignment::decode(b).unwrap_err();
            assert!(!is_empty_payload(&e));
            assert!(e.to_string().contains("negative version"), "{e}");
            assert!(ConsumerProtocolSubscription::decode(b).is_err());
        }
        // Every strict prefix of a payload fails (and only the empty one as empty).
        let payloads = [
            java("subscription-v3-full"),
            java("subscription-v0-full"),
            java("subscription-v3-minimal"),
        ];
        for b in &payloads {
            for cut in 0..b.len() {
                let e = ConsumerProtocolSubscription::decode(&b[..cut]).unwrap_err();
                assert_eq!(is_empty_payload(&e), cut == 0, "cut at {cut}: {e}");
            }
        }
        for b in [java("assignment-v3-full"), java("assignment-v3-empty")] {
            for cut in 0..b.len() {
                let e = ConsumerProtocolAssignment::decode(&b[..cut]).unwrap_err();
                assert_eq!(is_empty_payload(&e), cut == 0, "cut at {cut}: {e}");
            }
        }
    }

    #[test]
    fn impossible_lengths_are_rejected_before_allocating() {
        // Topics: i32::MAX entries.
        let b = [0, 3, 0x7f, 0xff, 0xff, 0xff, 0, 0];
        let e = ConsumerProtocolSubscription::decode(&b).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // User data: i32::MAX bytes.
        let b = [0, 3, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 1];
        let e = ConsumerProtocolSubscription::decode(&b).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // Assigned partitions of one topic: i32::MAX entries.
        let b = [
            0, 0, 0, 0, 0, 1, 0, 1, b't', 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0,
        ];
        let e = ConsumerProtocolAssignment::decode(&b).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A null topic list and a negative (not null) user data length.
        assert!(
            ConsumerProtocolSubscription::decode(&[0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0])
                .is_err()
        );
        assert!(
            ConsumerProtocolAssignment::decode(&[0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfe])
                .is_err()
        );
    }
}
