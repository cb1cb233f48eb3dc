//! The consumer group without I/O: finding the group coordinator, committing offsets and
//! reading committed ones. Everything here takes `now` as a parameter and returns what to
//! send; `src/io/` sends it. Group membership (the classic and KIP-848 protocols) builds on
//! these parts.

pub mod assignor;
pub mod classic;
pub mod commit;
pub mod coordinator;
pub mod kip848;
pub mod member;
