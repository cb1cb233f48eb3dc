//! The consumer group without I/O: finding the group coordinator, committing offsets and
//! reading committed ones, and the group member of either protocol (`classic`, `kip848`,
//! both built on `member`). Everything here takes `now` as a parameter and returns what to
//! send; `src/io/` sends it.

pub mod assignor;
pub mod classic;
pub mod commit;
pub mod coordinator;
pub mod kip848;
pub mod member;
