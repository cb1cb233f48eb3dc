//! A Kafka consumer for programs without an async runtime.
//!
//! It speaks the Kafka wire protocol itself (no C library), runs one I/O thread per
//! consumer that owns every socket and timer, and hands records to your thread through a
//! channel: `poll` blocks on it, never on a socket.
//!
//! ```no_run
//! use kafka_consumer::{Consumer, ConsumerConfig, OffsetReset, TopicPartition};
//! use std::time::Duration;
//!
//! let config = ConsumerConfig::new("127.0.0.1:9092").auto_offset_reset(OffsetReset::Earliest);
//! let mut consumer = Consumer::new(config)?;
//! consumer.assign(&[TopicPartition::new("orders", 0)])?;
//! let records = consumer.poll(Duration::from_secs(1))?;
//! for r in &records {
//!     log::info!("{} {:?} {:?}", r.offset(), r.key(), r.value());
//! }
//! # Ok::<(), kafka_consumer::Error>(())
//! ```
//!
//! With a `group.id`, [`Consumer::subscribe`] (or [`Consumer::subscribe_with_listener`],
//! with a [`RebalanceListener`] that runs on your thread inside `poll`) joins a consumer
//! group instead of assigning partitions by hand, with the classic protocol (the default)
//! or the KIP-848 one (`group.protocol=consumer`, see [`GroupProtocol`]).
//!
//! Secured clusters: `security.protocol` `SSL` or `SASL_SSL` (TLS with rustls, cargo
//! features `tls-graviola` or `tls-ring`), SASL `PLAIN`, `SCRAM-SHA-256`/`-512` (feature
//! `scram`) and `OAUTHBEARER` (an [`OAuthBearerTokenProvider`] of yours), by the Java and
//! librdkafka property names; see [`ConsumerConfig::set`].
//!
//! Layout (see `docs/architecture.md`): `protocol` (the wire format), `cluster`, `fetch`,
//! `group` and `link` (the sans-IO components: they take time as a parameter and say what to send),
//! `io` (the mio loop that carries it out); the public surface is re-exported here.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod backoff;
mod buffer;
mod cluster;
mod config;
mod consumer;
mod error;
mod fetch;
#[cfg(feature = "__fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(all(test, not(feature = "__fuzzing")))]
mod fuzzing;
mod group;
mod io;
mod link;
mod listener;
mod metrics;
// With `__testing`, the wire format is reachable from the crate's own tests (see below).
#[cfg_attr(feature = "__testing", allow(missing_docs))]
mod protocol;
mod record;
mod sasl;
mod security;
// The simulation the unit tests run on; with `__testing`, also the rigs of
// `tests/scale_sim.rs` (`testing::scale`).
#[cfg(any(test, feature = "__testing"))]
mod sim;
mod types;

/// Wire-format helpers for the crate's own integration tests (the fake broker), and the
/// group assignors (compared with kafka-clients' in `tests/assignors.rs`). Only built with
/// the internal `__testing` feature, which the crate enables for its own tests; not part of
/// the API.
#[cfg(feature = "__testing")]
#[doc(hidden)]
pub mod testing {
    pub use crate::group::assignor;
    pub use crate::protocol::*;
    pub use crate::sim::scale;
}

pub use config::{ConsumerConfig, GroupProtocol, IsolationLevel};
pub use consumer::{CommitCallback, Consumer, OffsetAndMetadata, OffsetAndTimestamp, WakeupHandle};
pub use error::{Error, ErrorKind, Result};
pub use listener::{GroupMetadata, RebalanceListener};
pub use metrics::{BrokerMetrics, ConnectionState, Metric, MetricKind, Metrics, PartitionMetrics};
pub use record::{ConsumerRecords, Header, Headers, OwnedRecord, Record, Records, TimestampType};
pub use security::{
    OAuthBearerToken, OAuthBearerTokenProvider, SaslMechanism, Secret, SecurityProtocol,
    UnsecuredJwsProvider,
};
pub use types::{OffsetReset, TopicPartition};

/// The README's example compiles.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
