//! The Kafka wire protocol as a consumer needs it. No I/O, no clock, no threads.
//!
//! - [`wire`]: the bounds-checked [`Reader`](wire::Reader) and one-pass [`Writer`](wire::Writer).
//! - [`message`]: the [`wire_struct!`] declarations and the [`Wire`](message::Wire) trait.
//! - [`frame`]: request/response headers and size-prefixed framing.
//! - [`api`]: one module per API, each declaring its layouts once with version ranges.
//! - [`records`]: record batches (magic 2), compression, control records.
//! - [`error_code`]: Kafka error codes.

pub mod api;
pub mod error_code;
pub mod frame;
pub mod message;
pub mod records;
pub mod wire;

pub(crate) use message::wire_struct;
