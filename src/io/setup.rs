//! The components as the configuration makes them, and the randomness they start from
//! (jitter seeds, the KIP-848 member id's bytes): the only place that reads the settings
//! for the sans-IO parts.

use std::sync::Arc;

use crate::backoff::{Backoff, XorShift};
use crate::buffer::Budget;
use crate::cluster::{Cluster, ClusterConfig};
use crate::config::{ConsumerConfig, GroupProtocol};
use crate::fetch::fetcher::{FetchConfig, Fetcher};
use crate::fetch::lookup::{LookupConfig, Lookups};
use crate::group::{Group, GroupConfig, ProtocolConfig};

/// The sans-IO components of one consumer.
pub(super) struct Components {
    pub cluster: Cluster,
    pub fetcher: Fetcher,
    pub lookups: Lookups,
    /// With a `group.id`.
    pub group: Option<Group>,
}

impl Components {
    /// The components for `cfg`, with `bootstrap_servers` bootstrap addresses.
    pub fn new(cfg: &ConsumerConfig, bootstrap_servers: usize, budget: &Arc<Budget>) -> Components {
        let retry = Backoff::new(cfg.retry_backoff, cfg.retry_backoff_max);
        let cluster = Cluster::new(ClusterConfig {
            bootstrap_servers,
            metadata_max_age: cfg.metadata_max_age,
            refresh_backoff: retry,
            request_timeout: cfg.request_timeout,
        });
        let mut fetcher = Fetcher::new(
            FetchConfig {
                auto_offset_reset: cfg.auto_offset_reset,
                isolation_level: cfg.isolation_level.wire(),
                check_crcs: cfg.check_crcs,
                fetch_min_bytes: cfg.fetch_min_bytes,
                fetch_max_bytes: cfg.fetch_max_bytes,
                fetch_max_wait: cfg.fetch_max_wait,
                max_partition_fetch_bytes: cfg.max_partition_fetch_bytes,
                request_timeout: cfg.request_timeout,
                retry_backoff: retry,
                client_rack: cfg.client_rack.clone(),
                replica_lease: cfg.metadata_max_age,
                use_committed: cfg.group_id.is_some(),
            },
            Arc::clone(budget),
            Box::new(XorShift::new(seed(1))),
        );
        // The I/O loop decodes answers once the next fetch is on its way (IoLoop::drive).
        fetcher.set_defer_decoding(true);
        let lookups = Lookups::new(
            LookupConfig {
                isolation_level: cfg.isolation_level.wire(),
                request_timeout: cfg.request_timeout,
                retry_backoff: retry,
            },
            Box::new(XorShift::new(seed(2))),
        );
        let group = cfg.group_id.as_ref().map(|group_id| {
            let protocol = match cfg.group_protocol {
                GroupProtocol::Classic => ProtocolConfig::Classic {
                    session_timeout: cfg.session_timeout,
                    heartbeat_interval: cfg.heartbeat_interval,
                    assignors: cfg.assignment_strategy.clone(),
                },
                GroupProtocol::Consumer => ProtocolConfig::Kip848 {
                    remote_assignor: cfg.group_remote_assignor.clone(),
                    member_id_seed: random_bytes(),
                },
            };
            let mut salt = 3;
            Group::new(
                GroupConfig {
                    group_id: group_id.clone(),
                    protocol,
                    instance_id: cfg.group_instance_id.clone(),
                    max_poll_interval: cfg.max_poll_interval,
                    client_rack: (!cfg.client_rack.is_empty()).then(|| cfg.client_rack.clone()),
                    retry_backoff: retry,
                    request_timeout: cfg.request_timeout,
                    require_stable: cfg.isolation_level.wire() == 1,
                },
                Box::new(move || {
                    salt += 1;
                    Box::new(XorShift::new(seed(salt)))
                }),
            )
        });
        Components {
            cluster,
            fetcher,
            lookups,
            group,
        }
    }
}

/// A seed for the jitter sources: the clock's nanoseconds.
pub(super) fn seed(salt: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos ^ salt.wrapping_mul(0x9E37_79B9)
}

/// 16 random bytes: the standard library's per-process random hash keys, mixed with the
/// clock (the member id of the consumer protocol is made from them).
fn random_bytes() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut out = [0u8; 16];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = state.build_hasher();
        h.write_usize(i);
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}
