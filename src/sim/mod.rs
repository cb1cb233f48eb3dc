//! Deterministic simulation for the tests of the sans-IO components, by what it simulates:
//! - [`clock`]: virtual time, a [`Clock`] that only moves when a test advances it, and a
//!   byte budget that counts how often it woke the I/O thread;
//! - [`net`]: a [`Net`] that plays the I/O loop's part for links (connects, closes, sends),
//!   and the routes to the brokers;
//! - [`broker`]: a [`SimBroker`] that plays the brokers: it decodes the requests a
//!   component hands out as `Transmit`s and answers them from a small model of a cluster
//!   (brokers, topics, partition logs, fetch sessions, committed offsets), in the exact
//!   response bodies the components' `handle_response` take;
//! - [`settings`]: the components' settings the tests use unless they say otherwise.
//!
//! What the tests use is re-exported here (`crate::sim::Clock`, `crate::sim::SimBroker`, ...).
//! Compiled for tests only (and, with the internal `__testing` feature, for the scale
//! rigs of [`scale`]). Nothing here reads the real clock except [`Clock::new`], which takes
//! one arbitrary starting instant.

// Without `cfg(test)` only the scale rigs use the simulation.
#![cfg_attr(not(test), allow(dead_code, unused_imports))]

pub(crate) mod broker;
pub(crate) mod clock;
pub(crate) mod net;
#[cfg(feature = "__testing")]
pub mod scale;
pub(crate) mod settings;

pub(crate) use broker::{
    batch, batch_with, encode_fetch, known_cluster, malformed, request, response, tp, FetchAnswer,
    SimBroker,
};
pub(crate) use clock::{budget, ms, Clock, Wakes};
pub(crate) use net::{
    all_versions, bootstrap_route, control_route, fetch_route, group_route, node_of, Net,
};
pub(crate) use settings::{cluster_config, fetch_config, jitter, lookup_config, retry_backoff};
