//! One module per API. Each declares its request and response layouts once, with the
//! version range of every field (see [`wire_struct!`](crate::protocol::wire_struct)), and implements
//! [`Api`] for its request type.
//!
//! Struct names follow the Kafka JSON schemas (`clients/src/main/resources/common/message/`),
//! field names are their snake_case forms.

use super::message::Wire;

pub mod api_versions;
pub mod consumer_group_heartbeat;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod join_group;
pub mod leave_group;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;

/// A request type of one Kafka API.
pub trait Api: Wire {
    /// The API key.
    const KEY: i16;
    /// Name for logs and errors.
    const NAME: &'static str;
    /// Lowest version we can speak.
    const MIN_VERSION: i16;
    /// Highest version we can speak.
    const MAX_VERSION: i16;
    /// First flexible version (KIP-482).
    const FLEXIBLE_FROM: i16;
    /// Whether flexible versions use response header v1 (with tagged fields). Every API
    /// does except ApiVersions, whose response header is always v0.
    const TAGGED_RESPONSE_HEADER: bool = true;
    /// The response type.
    type Response: Wire;
    /// How long (KIP-219) the broker asks us to hold further requests on this connection,
    /// in milliseconds; 0 when the response carries no throttle time.
    fn throttle_time_ms(_resp: &Self::Response) -> i32 {
        0
    }
}

/// Picks the highest version both sides support, given the broker's range for this API.
/// `None` when the ranges do not overlap.
pub fn negotiate<A: Api>(broker_min: i16, broker_max: i16) -> Option<i16> {
    let hi = broker_max.min(A::MAX_VERSION);
    (hi >= broker_min.max(A::MIN_VERSION)).then_some(hi)
}
