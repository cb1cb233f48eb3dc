//! The fetch path without I/O: fetch sessions, turning responses into chunks of records,
//! read_committed filtering.

pub mod aborted;
pub mod chunk;
pub mod session;
