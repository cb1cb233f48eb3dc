//! The I/O thread: one mio poll loop that owns every socket and timer, and the router that
//! hands each answer to the component that sent the request.
//!
//! ```text
//!  user thread                       I/O thread
//!  Consumer ──Command──▶ channel ──▶ [commands]  ◀── mio::Waker (commands, resolver, freed memory)
//!                                    [sockets] ──answers──▶ router ──▶ component.handle_response
//!  poll() ◀──Event (chunks, errors)── [drive: component.poll_transmit ──▶ sockets;
//!                                             links wanted ──▶ connect; events ──▶ user]
//!                                    [sleep until the earliest component/link/socket deadline]
//! ```
//!
//! The components ([`Cluster`], [`Fetcher`], [`Lookups`] and the [`Group`]: coordinator,
//! member and commits) decide everything; this module only carries it out: [`net`] owns the
//! sockets, [`handle`] the channels to the user side and the thread itself, [`user`] the
//! commands from it and the answers and events to it, [`setup`] builds the components from
//! the configuration. It never runs user code and never blocks on anything but
//! `Poll::poll` (names are resolved on other threads, see [`resolve`]).
//!
//! Invariants:
//! 1. The loop sleeps until the earliest instant some component, link or socket has
//!    something to do, and every one of those only names future instants: once a fault
//!    clears, the thread is idle (no periodic wake-ups).
//! 2. Every request sent is answered to its owner exactly once: a response, or a failure
//!    when its connection closes or it times out.
//! 3. A connection exists only for a link some component wants (or wanted when it was
//!    opened); closing it reports every request in flight on it as failed.

mod conn;
mod handle;
mod net;
mod resolve;
mod secure;
mod setup;
#[cfg(feature = "tls")]
mod tls;
mod user;

use std::io;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use mio::{Events, Poll, Token, Waker};

use self::conn::InFlight;
pub(crate) use self::handle::{
    spawn, Command, Event, IoHandle, PollClock, SharedMetrics, TopicCache,
};
use self::net::{Net, NetEvent, NetSettings};
use self::setup::Components;
use self::user::Replies;
use crate::backoff::{Backoff, XorShift};
use crate::buffer::{Budget, FrameBuf, Pool};
use crate::cluster::Cluster;
use crate::config::{parse_host_port, ConsumerConfig};
use crate::error::Result;
use crate::fetch::fetcher::Fetcher;
use crate::fetch::lookup::Lookups;
use crate::group::{Group, GroupCommand};
use crate::link::{Failure, Links, Owner, Peer, Route, Tag, Transmit};
use crate::protocol::api::fetch::FetchRequest;
use crate::protocol::api::offset_commit::OffsetCommitRequest;
use crate::protocol::api::Api;
use crate::types::MetadataGeneration;

const WAKER: Token = Token(0);

struct IoLoop {
    net: Net,
    cmd_rx: Receiver<Command>,
    ev_tx: Sender<Event>,
    links: Links,
    cluster: Cluster,
    fetcher: Fetcher,
    lookups: Lookups,
    group: Option<Group>,
    replies: Replies,
    jitter: XorShift,
    bootstrap: Vec<(String, u16)>,
    poll_clock: Arc<PollClock>,
    /// The metadata cache's topics as the user side reads them, and the cache generation
    /// last published there.
    topic_cache: Arc<TopicCache>,
    published: Option<MetadataGeneration>,
    /// The figures `Consumer::metrics` reads.
    metrics: Arc<SharedMetrics>,
    /// The last connection error reported to the user (see `report_security_error`).
    last_security_error: Option<String>,
}

impl IoLoop {
    #[allow(clippy::too_many_arguments)]
    fn new(
        cfg: ConsumerConfig,
        poll: Poll,
        waker: Arc<Waker>,
        cmd_rx: Receiver<Command>,
        ev_tx: Sender<Event>,
        budget: Arc<Budget>,
        poll_clock: Arc<PollClock>,
        topic_cache: Arc<TopicCache>,
        metrics: Arc<SharedMetrics>,
    ) -> Result<IoLoop> {
        let bootstrap = cfg
            .bootstrap
            .iter()
            .map(|s| parse_host_port(s))
            .collect::<Result<Vec<_>>>()?;
        let Components {
            cluster,
            fetcher,
            lookups,
            group,
        } = Components::new(&cfg, bootstrap.len(), &budget);
        let security = self::secure::Security::new(&cfg)?;
        let net = Net::new(
            poll,
            waker,
            WAKER,
            Pool::new(budget),
            NetSettings {
                client_id: cfg.client_id.clone(),
                request_timeout: cfg.request_timeout,
                setup_timeout: cfg.connection_setup_timeout,
                security,
                metrics: Arc::clone(&metrics),
            },
        );
        Ok(IoLoop {
            net,
            cmd_rx,
            ev_tx,
            links: Links::new(Backoff::new(
                cfg.reconnect_backoff,
                cfg.reconnect_backoff_max,
            )),
            cluster,
            fetcher,
            lookups,
            group,
            replies: Replies::default(),
            jitter: XorShift::new(setup::seed(3)),
            bootstrap,
            poll_clock,
            topic_cache,
            published: None,
            metrics,
            last_security_error: None,
        })
    }

    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        let mut happened = Vec::new();
        loop {
            let now = Instant::now();
            self.drive(now);
            let timeout = self
                .next_wakeup(now)
                .map(|t| t.saturating_duration_since(now));
            self.net.wait(&mut events, timeout)?;
            let now = Instant::now();
            self.net.handle_events(&events, now, &mut happened);
            self.net.handle_resolved(now, &mut happened);
            self.apply(&mut happened, now);
            loop {
                match self.cmd_rx.try_recv() {
                    Ok(Command::Shutdown) => return Ok(()),
                    Ok(c) => self.command(c, now),
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    // The consumer was dropped without close().
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return Ok(()),
                }
            }
            self.net.handle_timeouts(now, &mut happened);
            self.apply(&mut happened, now);
            self.cluster.handle_timeout(now, &self.links);
            self.lookups
                .handle_timeout(now, &self.links, &mut self.cluster);
            if let Some(g) = &mut self.group {
                g.handle_timeout(now, self.poll_clock.last(), &mut self.cluster);
            }
        }
    }

    /// Hands what happened on the sockets to the links and the components.
    fn apply(&mut self, happened: &mut Vec<NetEvent>, now: Instant) {
        for e in happened.drain(..) {
            match e {
                NetEvent::Ready(route, versions) => {
                    self.last_security_error = None;
                    self.links.on_ready(route, versions)
                }
                NetEvent::Response(route, f, body) => self.route_response(route, f, body, now),
                NetEvent::Closed {
                    route,
                    why,
                    failure,
                    failed,
                    busy,
                    established,
                    error,
                } => {
                    if busy {
                        log::warn!("{route} closed: {why}");
                    } else {
                        log::debug!("{route} closed while idle: {why}");
                    }
                    self.links.on_closed(route, &why, now, &mut self.jitter);
                    if let Some(e) = error {
                        self.report_security_error(e);
                    }
                    if !established {
                        self.link_failed(route, &why, now);
                    } else if !failed.is_empty() && matches!(route.peer, Peer::Node(_)) {
                        // As the Java client does on any disconnect: a broker that broke
                        // or timed out a request may have lost its leaderships (frozen,
                        // fenced); newer metadata says who leads now, before the next
                        // fetch waits for a new connection to it (a spaced refresh).
                        self.cluster.request_update();
                    }
                    for tag in failed {
                        self.route_failure(tag, &failure, now);
                    }
                }
            }
        }
    }

    // ----- driving the components --------------------------------------------------------

    /// Collects what every component wants to send, connects wanted links, and hands
    /// events to the user side.
    fn drive(&mut self, now: Instant) {
        // What the last answers produced first: committed offsets position partitions the
        // fetcher is about to plan.
        self.forward_events(now);
        self.links.begin_round();
        if let Some(g) = &mut self.group {
            g.begin_round();
            let wanted = self.fetcher.take_committed_wanted(now);
            g.handle_command(GroupCommand::FetchPositions(wanted), now, &mut self.cluster);
        }
        while let Some(t) = self
            .group
            .as_mut()
            .and_then(|g| g.poll_transmit(now, &mut self.links, &mut self.cluster))
        {
            self.send(t, now);
        }
        while let Some(t) = self
            .lookups
            .poll_transmit(now, &mut self.links, &mut self.cluster)
        {
            self.send(t, now);
        }
        while let Some(t) = self
            .fetcher
            .poll_transmit(now, &mut self.links, &mut self.cluster)
        {
            self.send(t, now);
        }
        while let Some(t) = self.cluster.poll_transmit(now, &mut self.links) {
            self.send(t, now);
        }
        self.net.reclaim_spares();
        let mut happened = Vec::new();
        for (route, why) in self.links.take_close_requests() {
            self.net.close(
                route,
                &why,
                Failure::Disconnected(why.clone()),
                &mut happened,
            );
        }
        for route in self.links.connects_due(now) {
            self.connect(route, now);
        }
        self.net.flush(&mut happened);
        self.apply(&mut happened, now);
        // The records of the answers just applied are decoded now that the next fetches
        // are on their way: the brokers serve them meanwhile. What decoding changed (a
        // position it moved back, memory it took) is planned at once.
        if self.fetcher.decode_deferred(now) {
            while let Some(t) = self
                .fetcher
                .poll_transmit(now, &mut self.links, &mut self.cluster)
            {
                self.send(t, now);
            }
            self.net.flush(&mut happened);
            self.apply(&mut happened, now);
        }
        self.forward_events(now);
    }

    /// Hands the metadata cache's topics to the user side when an answer changed them
    /// (before the answers to callers go out, so that a caller's next call finds them).
    fn publish_topics(&mut self) {
        let generation = self.cluster.generation();
        if self.published != Some(generation) {
            self.published = Some(generation);
            self.topic_cache.publish(self.cluster.described());
        }
    }

    fn send(&mut self, t: Transmit, now: Instant) {
        let route = t.route;
        match self.net.send(t, now) {
            Ok(()) => self.links.on_sent(route),
            Err(t) => {
                // The link said ready: this cannot happen; fail the request rather than lose it.
                let why = format!("{} is not connected", t.route);
                self.route_failure(t.tag, &Failure::Disconnected(why), now);
            }
        }
    }

    /// Opens a connection for a wanted link, if its address is known.
    fn connect(&mut self, route: Route, now: Instant) {
        let address = match route.peer {
            Peer::Bootstrap(i) => self.bootstrap.get(i).cloned(),
            Peer::Node(n) => self.cluster.broker(n).map(|b| (b.host.clone(), b.port)),
        };
        match address {
            Some((host, port)) => self.net.connect(route, &host, port, now),
            None => {
                let why = "no address known for this broker";
                self.links.on_closed(route, why, now, &mut self.jitter);
                self.cluster.request_update();
                self.link_failed(route, why, now);
            }
        }
    }

    /// A link could not be opened: the components that use it decide what that means.
    fn link_failed(&mut self, route: Route, why: &str, now: Instant) {
        // A broker that cannot be reached may be gone for good: newer metadata says who
        // leads its partitions now (a refresh, spaced by the cluster, not a loop).
        if let Peer::Node(_) = route.peer {
            self.cluster.request_update();
        }
        self.fetcher.link_failed(route);
        if let Some(g) = &mut self.group {
            g.link_failed(route, why, now);
        }
    }

    // ----- the router ----------------------------------------------------------------------

    fn route_response(&mut self, route: Route, f: InFlight, body: FrameBuf, now: Instant) {
        self.links.on_answered(route);
        let Some(Tag { owner, id }) = f.tag else {
            return;
        };
        let latency = now.saturating_duration_since(f.sent_at);
        match (owner, f.api_key) {
            (Owner::Fetcher, FetchRequest::KEY) => {
                self.metrics.with(|m| m.fetch_answered(latency, now))
            }
            (Owner::Commits, OffsetCommitRequest::KEY) => {
                self.metrics.with(|m| m.commit_answered(latency, now))
            }
            _ => {}
        }
        match owner {
            Owner::Cluster => {
                self.cluster
                    .handle_response(id, f.version, &body, now, &mut self.links)
            }
            Owner::Fetcher => self.fetcher.handle_response(
                id,
                f.version,
                body,
                now,
                &mut self.links,
                &mut self.cluster,
            ),
            Owner::Lookups => self.lookups.handle_response(
                id,
                f.version,
                &body,
                now,
                &mut self.links,
                &mut self.cluster,
            ),
            Owner::Coordinator | Owner::Member | Owner::Commits => {
                if let Some(g) = &mut self.group {
                    let tag = Tag { owner, id };
                    g.handle_response(
                        tag,
                        f.version,
                        &body,
                        now,
                        &mut self.links,
                        &mut self.cluster,
                    );
                }
            }
        }
    }

    fn route_failure(&mut self, tag: Tag, failure: &Failure, now: Instant) {
        match tag.owner {
            Owner::Cluster => self.cluster.handle_failure(tag.id, failure),
            Owner::Fetcher => self.fetcher.handle_failure(tag.id, failure, now),
            Owner::Lookups => self.lookups.handle_failure(tag.id, failure, now),
            Owner::Coordinator | Owner::Member | Owner::Commits => {
                if let Some(g) = &mut self.group {
                    g.handle_failure(tag, failure, now, &mut self.cluster);
                }
            }
        }
    }

    // ----- timers --------------------------------------------------------------------------

    fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        [
            self.cluster.poll_timeout(now),
            self.fetcher.poll_timeout(now),
            self.lookups.poll_timeout(now),
            self.links.poll_timeout(now),
            self.group.as_ref().and_then(|g| g.poll_timeout(now)),
            self.net.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|t| t.max(now))
    }
}
