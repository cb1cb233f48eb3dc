//! Links: the broker connections as the sans-IO components see them, and the vocabulary
//! the components and the I/O loop share (routes, transmits, tags).
//!
//! A component never touches a socket. When it wants to send, it asks
//! [`Links::ready`] for the link's negotiated API versions; a link that is not ready is
//! marked wanted, and the I/O loop connects it (after its backoff). The component then
//! returns a [`Transmit`] tagged with a [`Tag`]; the loop's router hands the answer (or the
//! failure) back to the component that the tag names.
//!
//! One socket per [`Route`]: a peer (bootstrap server or broker) and a [`Lane`]. Fetch
//! long-polls have a lane of their own, so a heartbeat, a commit or an offset lookup never
//! waits behind one.
//!
//! ```text
//!            want (ready() on a link that is not Ready)
//!   Idle ─────────────────────────────────────────────▶ Connecting ──ApiVersions ok──▶ Ready
//!    ▲  ▲                                                   │                           │
//!    │  └───────── closed (not wanted: nobody reconnects) ──┼───────────────────────────┤
//!    │                                                      ▼                           │
//!    └──── backoff passed and wanted again ─────────── Failed{until} ◀──── closed ──────┘
//! ```
//!
//! Invariants:
//! 1. A link is only connected while some component wants it: an idle link the broker
//!    closes stays closed until someone asks for it again, so an idle consumer is idle.
//! 2. Every close of a link schedules the next connect no earlier than a backoff that grows
//!    with consecutive failures (reset only once the link is ready again); no sequence of
//!    failures reconnects faster than [`MIN_DELAY`](crate::backoff::MIN_DELAY).
//! 3. [`Links::poll_timeout`] names only instants at which something will happen for a
//!    wanted link (a backoff or a throttle ending); a passed instant is never returned twice.
//! 4. A throttled link (KIP-219) is not ready until its throttle time has passed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::{Backoff, Jitter, Retry};
use crate::protocol::api::{negotiate, Api};
use crate::protocol::frame::decode_response;
use crate::protocol::wire::DecodeError;
use crate::protocol::wire::Writer;
use crate::types::{ApiVersion, NodeId, RequestId};

/// The other end of a link: a bootstrap server (by its index in `bootstrap.servers`) or a
/// broker from the cluster metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Peer {
    Bootstrap(usize),
    Node(NodeId),
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Bootstrap(i) => write!(f, "bootstrap server {}", i + 1),
            Peer::Node(n) => write!(f, "{n}"),
        }
    }
}

/// Which socket to a peer a request travels on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Lane {
    /// Fetch long-polls only.
    Fetch,
    /// Metadata, offset lookups and resets, coordinator discovery.
    Control,
    /// Requests to the group coordinator (commits, offset fetches, heartbeats, leaving).
    Group,
    /// JoinGroup and SyncGroup, which the coordinator may hold for up to the rebalance
    /// timeout: on a socket of their own, so that commits and heartbeats never wait
    /// behind them (a broker answers one request per connection at a time).
    Join,
}

/// A peer and a lane: one socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Route {
    pub peer: Peer,
    pub lane: Lane,
}

impl Route {
    /// A route to a broker.
    pub fn node(node: NodeId, lane: Lane) -> Route {
        Route {
            peer: Peer::Node(node),
            lane,
        }
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lane = match self.lane {
            Lane::Fetch => "fetch",
            Lane::Control => "control",
            Lane::Group => "group",
            Lane::Join => "join",
        };
        write!(f, "{} ({lane} link)", self.peer)
    }
}

/// The component that sent a request, which gets its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    Cluster,
    Fetcher,
    Lookups,
    Coordinator,
    Commits,
    /// The group member (JoinGroup, SyncGroup, Heartbeat, LeaveGroup).
    Member,
}

/// Names one request: its owner, and an id the owner chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Tag {
    pub owner: Owner,
    pub id: RequestId,
}

/// A request ready to go out: where, what (the encoded body at a negotiated version), and
/// how long the answer may take.
#[derive(Debug)]
pub(crate) struct Transmit {
    pub route: Route,
    pub api_key: i16,
    pub version: ApiVersion,
    /// Whether the request header is the flexible one (v2).
    pub flexible: bool,
    pub body: Vec<u8>,
    pub tag: Tag,
    /// How long to wait for the answer before the link is closed and the request failed.
    pub timeout: Duration,
}

impl Transmit {
    /// Encodes `req` at version `version`.
    pub fn new<A: Api>(
        route: Route,
        req: &A,
        version: ApiVersion,
        tag: Tag,
        timeout: Duration,
    ) -> Self {
        let v = crate::protocol::frame::version_of::<A>(version.get());
        let mut w = Writer::with_capacity(64);
        req.write(&mut w, v);
        Transmit {
            route,
            api_key: A::KEY,
            version,
            flexible: v.flexible,
            body: w.into_inner(),
            tag,
            timeout,
        }
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The link closed (or could not be used) before the answer came.
    Disconnected(String),
    /// No answer within the request's timeout (the link was closed).
    TimedOut,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Disconnected(why) => write!(f, "connection lost: {why}"),
            Failure::TimedOut => f.write_str("no answer within request.timeout.ms"),
        }
    }
}

/// The API version ranges one broker supports (from ApiVersions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Versions(HashMap<i16, (i16, i16)>);

impl Versions {
    /// From `(api_key, min, max)` triples.
    pub fn new(ranges: impl IntoIterator<Item = (i16, i16, i16)>) -> Versions {
        Versions(
            ranges
                .into_iter()
                .map(|(k, lo, hi)| (k, (lo, hi)))
                .collect(),
        )
    }

    /// The highest version of `A` both sides speak, if any.
    pub fn pick<A: Api>(&self) -> Option<ApiVersion> {
        let (lo, hi) = *self.0.get(&A::KEY)?;
        negotiate::<A>(lo, hi).map(ApiVersion)
    }

    /// The broker's range for `A`, for error messages.
    pub fn range<A: Api>(&self) -> Option<(i16, i16)> {
        self.0.get(&A::KEY).copied()
    }

    /// An error text for a broker that speaks no version of `A` that we do.
    pub fn unsupported<A: Api>(&self, peer: Peer) -> String {
        match self.range::<A>() {
            Some((lo, hi)) => format!(
                "{peer} supports {} v{lo}-v{hi}, this client needs v{}-v{}",
                A::NAME,
                A::MIN_VERSION,
                A::MAX_VERSION
            ),
            None => format!("{peer} does not support the {} API", A::NAME),
        }
    }
}

/// Where one link is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LinkState {
    /// Not connected, and free to connect.
    Idle,
    /// Resolving, connecting or negotiating versions.
    Connecting,
    /// Usable.
    Ready(Arc<Versions>),
    /// Closed after a failure; may reconnect from `until`.
    Failed { until: Instant },
}

#[derive(Debug)]
struct Link {
    state: LinkState,
    retry: Retry,
    throttled_until: Option<Instant>,
    in_flight: usize,
    /// Why the link last closed, for error messages.
    last_error: Option<String>,
}

impl Link {
    fn new() -> Link {
        Link {
            state: LinkState::Idle,
            retry: Retry::default(),
            throttled_until: None,
            in_flight: 0,
            last_error: None,
        }
    }
}

/// The state of every link, and which ones the components want this round.
#[derive(Debug)]
pub(crate) struct Links {
    links: HashMap<Route, Link>,
    wanted: HashSet<Route>,
    backoff: Backoff,
    /// Links a component found unusable (a malformed answer): the loop closes them.
    close_requests: Vec<(Route, String)>,
}

impl Links {
    /// No links yet; reconnects back off with `backoff`.
    pub fn new(backoff: Backoff) -> Links {
        Links {
            links: HashMap::new(),
            wanted: HashSet::new(),
            backoff,
            close_requests: Vec::new(),
        }
    }

    // ----- for the components ---------------------------------------------------------

    /// The link's versions if it is ready (and not throttled). Otherwise marks it wanted, so
    /// the loop connects it, and returns `None`.
    pub fn ready(&mut self, route: Route, now: Instant) -> Option<Arc<Versions>> {
        self.wanted.insert(route);
        let link = self.links.get(&route)?;
        if link.throttled_until.is_some_and(|t| now < t) {
            return None;
        }
        match &link.state {
            LinkState::Ready(v) => Some(Arc::clone(v)),
            _ => None,
        }
    }

    /// The link's state, without wanting it.
    pub fn state(&self, route: Route) -> LinkState {
        self.links
            .get(&route)
            .map_or(LinkState::Idle, |l| l.state.clone())
    }

    /// Requests on the link awaiting answers.
    pub fn in_flight(&self, route: Route) -> usize {
        self.links.get(&route).map_or(0, |l| l.in_flight)
    }

    /// Why the link last closed, if it did.
    pub fn last_error(&self, route: Route) -> Option<&str> {
        self.links.get(&route)?.last_error.as_deref()
    }

    /// The broker asked us (KIP-219) not to send on this link before `until`.
    pub fn throttle(&mut self, route: Route, until: Instant) {
        let link = self.links.entry(route).or_insert_with(Link::new);
        link.throttled_until = Some(link.throttled_until.map_or(until, |t| t.max(until)));
    }

    /// Decodes the answer to a request of API `A` that arrived on `route`. A body that does
    /// not decode is logged and closes the link (nothing more it carries can be trusted); a
    /// throttle time in the answer (KIP-219) holds the link's next requests.
    pub fn decode<A: Api>(
        &mut self,
        route: Route,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
    ) -> Result<A::Response, DecodeError> {
        match decode_response::<A>(body, version.get()) {
            Ok(resp) => {
                let ms = A::throttle_time_ms(&resp);
                if ms > 0 {
                    self.throttle(route, now + Duration::from_millis(ms as u64));
                }
                Ok(resp)
            }
            Err(e) => {
                log::warn!("malformed {} response from {route}: {e}", A::NAME);
                self.request_close(route, &format!("malformed {} response", A::NAME));
                Err(e)
            }
        }
    }

    /// Asks the loop to close the link (its byte stream can no longer be trusted).
    pub fn request_close(&mut self, route: Route, why: &str) {
        self.close_requests.push((route, why.to_owned()));
    }

    // ----- for the I/O loop ------------------------------------------------------------

    /// Links the components asked to close.
    pub fn take_close_requests(&mut self) -> Vec<(Route, String)> {
        std::mem::take(&mut self.close_requests)
    }

    /// Starts a round: wants are collected afresh from the components.
    pub fn begin_round(&mut self) {
        self.wanted.clear();
    }

    /// Wanted links that should start connecting now (idle, or failed with the backoff
    /// passed). They are marked connecting.
    pub fn connects_due(&mut self, now: Instant) -> Vec<Route> {
        let mut due: Vec<Route> = Vec::new();
        for route in &self.wanted {
            let link = self.links.entry(*route).or_insert_with(Link::new);
            let go = match link.state {
                LinkState::Idle => true,
                LinkState::Failed { until } => now >= until,
                LinkState::Connecting | LinkState::Ready(_) => false,
            };
            if go {
                link.state = LinkState::Connecting;
                due.push(*route);
            }
        }
        due.sort();
        due
    }

    /// The link negotiated its versions and is usable.
    pub fn on_ready(&mut self, route: Route, versions: Versions) {
        let link = self.links.entry(route).or_insert_with(Link::new);
        link.state = LinkState::Ready(Arc::new(versions));
        link.retry.succeeded();
        link.last_error = None;
    }

    /// The link closed (or could not be opened). It may reconnect after a backoff.
    pub fn on_closed(&mut self, route: Route, why: &str, now: Instant, jitter: &mut dyn Jitter) {
        let link = self.links.entry(route).or_insert_with(Link::new);
        let delay = link.retry.failed(&self.backoff, jitter);
        link.state = LinkState::Failed { until: now + delay };
        link.in_flight = 0;
        link.throttled_until = None;
        link.last_error = Some(why.to_owned());
    }

    /// A request went out on the link.
    pub fn on_sent(&mut self, route: Route) {
        self.links.entry(route).or_insert_with(Link::new).in_flight += 1;
    }

    /// A request on the link was answered.
    pub fn on_answered(&mut self, route: Route) {
        if let Some(l) = self.links.get_mut(&route) {
            l.in_flight = l.in_flight.saturating_sub(1);
        }
    }

    /// The next instant at which a wanted link's backoff or throttle ends.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        self.wanted
            .iter()
            .filter_map(|r| self.links.get(r))
            .filter_map(|l| {
                let backoff = match l.state {
                    LinkState::Failed { until } => Some(until),
                    _ => None,
                };
                let throttle = l.throttled_until.filter(|t| *t > now);
                match (backoff, throttle) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                }
            })
            .filter(|t| *t > now)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::XorShift;

    fn links() -> Links {
        Links::new(Backoff::new(
            Duration::from_millis(50),
            Duration::from_millis(1000),
        ))
    }

    fn r(n: i32) -> Route {
        Route::node(NodeId(n), Lane::Fetch)
    }

    #[test]
    fn a_wanted_link_connects_once_and_becomes_ready() {
        let mut l = links();
        let now = crate::sim::Clock::new().now();
        assert!(l.ready(r(1), now).is_none());
        assert_eq!(l.connects_due(now), vec![r(1)]);
        l.begin_round();
        assert!(l.ready(r(1), now).is_none());
        assert!(l.connects_due(now).is_empty(), "already connecting");
        l.on_ready(r(1), Versions::new([(1, 4, 17)]));
        let v = l.ready(r(1), now).expect("ready");
        assert_eq!(
            v.pick::<crate::protocol::api::fetch::FetchRequest>(),
            Some(ApiVersion(17))
        );
    }

    #[test]
    fn a_closed_link_waits_a_growing_backoff_and_only_reconnects_when_wanted() {
        let mut l = links();
        let mut j = XorShift::new(1);
        let t0 = crate::sim::Clock::new().now();
        l.ready(r(1), t0);
        l.connects_due(t0);
        l.on_closed(r(1), "refused", t0, &mut j);
        let first = l.poll_timeout(t0).expect("a retry is scheduled");
        assert!(first > t0);
        l.begin_round();
        l.ready(r(1), t0);
        assert!(l.connects_due(t0).is_empty(), "still backing off");
        assert!(l.connects_due(first).contains(&r(1)));
        l.on_closed(r(1), "refused", first, &mut j);
        let second = l.poll_timeout(first).unwrap();
        assert!(second - first > first - t0 - Duration::from_millis(20));
        // Nobody wants it any more: no timer, no reconnect.
        l.begin_round();
        assert_eq!(l.poll_timeout(second), None);
        assert!(l.connects_due(second + Duration::from_secs(10)).is_empty());
        assert_eq!(l.last_error(r(1)), Some("refused"));
    }

    #[test]
    fn a_throttled_link_is_not_ready_until_the_throttle_ends() {
        let mut l = links();
        let now = crate::sim::Clock::new().now();
        l.on_ready(r(1), Versions::default());
        l.throttle(r(1), now + Duration::from_millis(300));
        l.begin_round();
        assert!(l.ready(r(1), now).is_none());
        assert_eq!(l.poll_timeout(now), Some(now + Duration::from_millis(300)));
        assert!(l.ready(r(1), now + Duration::from_millis(300)).is_some());
    }

    #[test]
    fn passed_instants_are_never_returned() {
        let mut l = links();
        let mut j = XorShift::new(9);
        let now = crate::sim::Clock::new().now();
        l.ready(r(2), now);
        l.connects_due(now);
        l.on_closed(r(2), "x", now, &mut j);
        let t = l.poll_timeout(now).unwrap();
        assert_eq!(l.poll_timeout(t), None);
    }
}
