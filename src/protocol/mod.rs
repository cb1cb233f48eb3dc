//! The Kafka wire protocol as a consumer needs it. No I/O, no clock, no threads.
//!
//! - [`wire`]: the bounds-checked [`Reader`](wire::Reader) and one-pass [`Writer`](wire::Writer).
//! - [`message`]: the [`wire_struct!`] declarations and the [`Wire`](message::Wire) trait.
//! - [`frame`]: request/response headers and size-prefixed framing.
//! - [`api`]: one module per API, each declaring its layouts once with version ranges.
//! - [`records`]: record batches (magic 2), compression, control records.
//! - `zstd`: the default build's zstd decoder (RFC 8878, decode only).
//! - [`consumer_protocol`]: the classic group protocol's embedded consumer payloads
//!   (subscription and assignment).
//! - [`error_code`]: Kafka error codes.

// The wire layer is complete for what it declares (every primitive, encoders the tests and
// the fake broker use, the protocol's constants); a normal build of the consumer uses a
// subset of it.
#![cfg_attr(
    not(any(test, feature = "__testing", feature = "__fuzzing")),
    allow(dead_code)
)]

pub mod api;
pub mod consumer_protocol;
pub mod error_code;
pub mod frame;
pub mod message;
pub mod records;
pub mod wire;
// The build's zstd decoder unless `zstd-native` or `zstd-ruzstd` picks another (then only
// the fuzz targets use it).
#[cfg(feature = "zstd")]
#[cfg_attr(
    any(feature = "zstd-native", feature = "zstd-ruzstd"),
    allow(dead_code)
)]
pub(crate) mod zstd;

pub(crate) use message::wire_struct;
