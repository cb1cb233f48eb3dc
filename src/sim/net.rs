//! The network double: the I/O loop's part for links ([`Net`]: connects, refusals, closes,
//! what is sent and answered), the routes to the simulated brokers, and the API versions
//! they advertise.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::backoff::{Backoff, XorShift};
use crate::link::{Lane, LinkState, Links, Peer, Route, Transmit, Versions};
use crate::types::NodeId;

use super::clock::{ms, Clock};

/// Every API version range this crate speaks, as a current broker advertises them.
pub(crate) fn all_versions() -> Versions {
    Versions::new([
        (1, 4, 18),
        (2, 1, 11),
        (3, 1, 13),
        (8, 2, 9),
        (9, 1, 9),
        (10, 0, 6),
        (11, 0, 9),
        (12, 0, 4),
        (13, 0, 5),
        (14, 0, 5),
        (18, 0, 4),
        (23, 2, 4),
    ])
}

/// Broker `n`'s fetch link.
pub(crate) fn fetch_route(n: i32) -> Route {
    Route::node(NodeId(n), Lane::Fetch)
}

/// Broker `n`'s control link.
pub(crate) fn control_route(n: i32) -> Route {
    Route::node(NodeId(n), Lane::Control)
}

/// Broker `n`'s group link.
pub(crate) fn group_route(n: i32) -> Route {
    Route::node(NodeId(n), Lane::Group)
}

/// Bootstrap server `i`'s control link.
pub(crate) fn bootstrap_route(i: usize) -> Route {
    Route {
        peer: Peer::Bootstrap(i),
        lane: Lane::Control,
    }
}

/// The broker a route leads to.
pub(crate) fn node_of(route: Route) -> i32 {
    match route.peer {
        Peer::Node(n) => n.0,
        Peer::Bootstrap(i) => panic!("{route} is bootstrap server {i}, not a broker"),
    }
}

/// The I/O loop's part for links: connects what the components want (or refuses), and
/// records what is sent and answered.
pub(crate) struct Net {
    pub clock: Clock,
    pub links: Links,
    pub jitter: XorShift,
    /// Peers whose connections are refused.
    pub down: BTreeSet<Peer>,
    /// Whether wanted links connect at once (else they stay connecting until
    /// [`Net::complete_connects`]).
    pub auto_connect: bool,
    /// Links connecting, not yet ready.
    pub connecting: Vec<Route>,
}

impl Net {
    /// Links that connect as soon as they are wanted; reconnects back off 50 ms to 1 s.
    pub fn new() -> Net {
        Net {
            clock: Clock::new(),
            links: Links::new(Backoff::new(ms(50), ms(1_000))),
            jitter: XorShift::new(17),
            down: BTreeSet::new(),
            auto_connect: true,
            connecting: Vec::new(),
        }
    }

    /// The current virtual instant.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Makes `route` ready at once, with every version we speak.
    pub fn ready(&mut self, route: Route) {
        self.links.on_ready(route, all_versions());
    }

    /// Starts the connects that are due; with `auto_connect`, they complete (or are
    /// refused) at once. Returns the routes that became ready.
    pub fn connect_wanted(&mut self) -> Vec<Route> {
        let now = self.now();
        let due = self.links.connects_due(now);
        self.connecting.extend(due);
        if self.auto_connect {
            self.complete_connects()
        } else {
            Vec::new()
        }
    }

    /// Completes every connect under way: ready, or refused for a peer that is down.
    pub fn complete_connects(&mut self) -> Vec<Route> {
        let now = self.now();
        let mut ready = Vec::new();
        for r in std::mem::take(&mut self.connecting) {
            if self.down.contains(&r.peer) {
                self.links
                    .on_closed(r, "connection refused", now, &mut self.jitter);
            } else {
                self.ready(r);
                ready.push(r);
            }
        }
        ready
    }

    /// A component hands out `t`: its link must be ready (the loop would fail it otherwise).
    pub fn sent(&mut self, t: &Transmit) {
        assert!(
            matches!(self.links.state(t.route), LinkState::Ready(_)),
            "request (api {}) handed out for {} which is not ready: {:?}",
            t.api_key,
            t.route,
            self.links.state(t.route)
        );
        self.links.on_sent(t.route);
    }

    /// The answer to a request on `route` arrived.
    pub fn answered(&mut self, route: Route) {
        self.links.on_answered(route);
    }

    /// The link closes (every request on it fails; the caller tells the components).
    pub fn close(&mut self, route: Route, why: &str) {
        let now = self.now();
        self.links.on_closed(route, why, now, &mut self.jitter);
    }
}
