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
//! Layout: `protocol` (wire format, no I/O), `fetch` (fetch sessions, record decoding,
//! no I/O), `io` (the mio loop); the public surface is re-exported here.

#![deny(missing_docs)]

mod buffer;
mod config;
mod consumer;
mod error;
mod fetch;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(all(test, not(feature = "fuzzing")))]
mod fuzzing;
mod io;
#[doc(hidden)]
pub mod protocol;
mod record;

pub use config::{ConsumerConfig, IsolationLevel, OffsetReset};
pub use consumer::{Consumer, Metrics, OffsetAndTimestamp, WakeupHandle};
pub use error::{Error, ErrorKind, Result};
pub use record::{ConsumerRecords, Header, Headers, Record, TimestampType, TopicPartition};

/// The README's example compiles.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
