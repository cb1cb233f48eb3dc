//! kafka-consumer (in progress)
pub mod protocol;
