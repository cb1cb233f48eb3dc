//! The components' settings in the simulation: the defaults the tests use unless they say
//! otherwise, and fixed-seed jitter.

use std::time::Duration;

use crate::backoff::{Backoff, XorShift};
use crate::cluster::ClusterConfig;
use crate::fetch::fetcher::FetchConfig;
use crate::fetch::lookup::LookupConfig;
use crate::types::OffsetReset;

use super::clock::ms;

/// The retry policy the tests use unless they say otherwise: 100 ms doubling to 1 s (the
/// defaults of `retry.backoff.ms` and `retry.backoff.max.ms`).
pub(crate) fn retry_backoff() -> Backoff {
    Backoff::new(ms(100), ms(1_000))
}

/// Cluster settings: one bootstrap server, `metadata.max.age.ms` 5 minutes.
pub(crate) fn cluster_config() -> ClusterConfig {
    ClusterConfig {
        bootstrap_servers: 1,
        metadata_max_age: Duration::from_secs(300),
        refresh_backoff: retry_backoff(),
        request_timeout: Duration::from_secs(30),
    }
}

/// Fetcher settings close to the defaults, with `auto.offset.reset` `reset`.
pub(crate) fn fetch_config(reset: OffsetReset) -> FetchConfig {
    FetchConfig {
        auto_offset_reset: reset,
        isolation_level: 0,
        check_crcs: true,
        fetch_min_bytes: 1,
        fetch_max_bytes: 50 * 1024 * 1024,
        fetch_max_wait: ms(500),
        max_partition_fetch_bytes: 1024 * 1024,
        request_timeout: Duration::from_secs(30),
        retry_backoff: retry_backoff(),
        client_rack: String::new(),
        replica_lease: Duration::from_secs(300),
        use_committed: false,
    }
}

/// Lookup settings.
pub(crate) fn lookup_config() -> LookupConfig {
    LookupConfig {
        isolation_level: 0,
        request_timeout: Duration::from_secs(30),
        retry_backoff: retry_backoff(),
    }
}

/// A jitter source with a fixed seed.
pub(crate) fn jitter(seed: u32) -> Box<XorShift> {
    Box::new(XorShift::new(seed))
}
