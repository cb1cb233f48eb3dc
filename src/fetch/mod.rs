//! The fetch path without I/O: the [`fetcher::Fetcher`] (positions, pause and reset state,
//! fetch planning, the per-error policy of fetch answers), fetch sessions, turning answers
//! into chunks of records, read_committed filtering, and the application's offset lookups.
//! Everything here takes `now` as a parameter and returns what to send; `src/io/` sends it.

pub mod aborted;
pub mod chunk;
pub mod fetcher;
pub mod lookup;
pub mod offsets;
pub mod session;
pub mod validate;
