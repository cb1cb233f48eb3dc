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
//! The components ([`Cluster`], [`Fetcher`], [`Lookups`], the group's [`Coordinator`] and
//! [`Commits`]) decide everything; this module only carries it out: [`net`] owns the
//! sockets, [`handle`] the channels to the user side and the thread itself. It never runs
//! user code and never blocks on anything but `Poll::poll` (names are resolved on other
//! threads, see [`resolve`]).
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
#[cfg(feature = "tls")]
mod tls;

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use mio::{Events, Poll, Token, Waker};

use self::conn::InFlight;
pub(crate) use self::handle::{spawn, Command, Event, IoHandle, PollClock};
use self::net::{Net, NetEvent, NetSettings};
use crate::backoff::{Backoff, XorShift};
use crate::buffer::{Budget, FrameBuf, Pool};
use crate::cluster::Interest;
use crate::cluster::{Cluster, ClusterConfig, ClusterEvent};
use crate::config::GroupProtocol;
use crate::config::{parse_host_port, ConsumerConfig};
use crate::error::{Error, Result};
use crate::fetch::fetcher::{FetchConfig, FetchEvent, Fetcher};
use crate::fetch::lookup::{LookupConfig, LookupEvent, LookupResult, Lookups};
use crate::group::classic::{ClassicConfig, ClassicMember};
use crate::group::commit::{CommitConfig, CommitEvent, Commits, CommittedResult};
use crate::group::coordinator::Coordinator;
use crate::group::kip848::{Kip848Config, Kip848Member};
use crate::group::member::{CallbackToken, Member as _, MemberEvent, Subscription};
use crate::link::{Failure, Lane, Links, Owner, Peer, Route, Tag, Transmit};
use crate::types::{Identity, TopicPartition};

const WAKER: Token = Token(0);

/// Callers waiting for an answer, by request id.
#[derive(Default)]
struct Replies {
    lookups: HashMap<u64, Sender<LookupResult>>,
    partitions: HashMap<u64, Sender<Result<Vec<TopicPartition>>>>,
    commits: HashMap<u64, Sender<Result<()>>>,
    committed: HashMap<u64, Sender<CommittedResult>>,
}

/// The group's components, when a `group.id` is configured.
struct Group {
    coordinator: Coordinator,
    commits: Commits,
    /// The member, once the application subscribed.
    member: Option<Member>,
    /// What the member subscribes to.
    subscription: Option<Subscription>,
    /// Callers of a leave, answered when the member has left.
    leaving: Vec<Sender<()>>,
}

/// The group member of either protocol; both answer to the same calls.
enum Member {
    Classic(ClassicMember),
    Consumer(Kip848Member),
}

/// Calls the same method on either member.
macro_rules! on_member {
    ($m:expr, $x:ident => $e:expr) => {
        match $m {
            Member::Classic($x) => $e,
            Member::Consumer($x) => $e,
        }
    };
}

impl Member {
    fn subscribe(&mut self, sub: Subscription, now: Instant) {
        on_member!(self, m => m.subscribe(sub, now))
    }
    fn leave(&mut self, now: Instant) {
        on_member!(self, m => m.leave(now))
    }
    fn callback_done(&mut self, token: CallbackToken, now: Instant) {
        on_member!(self, m => m.callback_done(token, now))
    }
    fn user_polled(&mut self, at: Instant) {
        on_member!(self, m => m.user_polled(at))
    }
    fn poll_event(&mut self) -> Option<MemberEvent> {
        on_member!(self, m => m.poll_event())
    }
    fn is_fatal(&self) -> bool {
        on_member!(self, m => m.is_fatal())
    }
    fn poll_transmit(
        &mut self,
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
        cluster: &mut Cluster,
    ) -> Option<Transmit> {
        on_member!(self, m => m.poll_transmit(now, links, coordinator, cluster))
    }
    #[allow(clippy::too_many_arguments)]
    fn handle_response(
        &mut self,
        id: u64,
        version: i16,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
        cluster: &mut Cluster,
    ) {
        on_member!(self, m => m.handle_response(id, version, body, now, links, coordinator, cluster))
    }
    fn handle_failure(
        &mut self,
        id: u64,
        failure: &Failure,
        now: Instant,
        coordinator: &mut Coordinator,
    ) {
        on_member!(self, m => m.handle_failure(id, failure, now, coordinator))
    }
    fn handle_timeout(&mut self, now: Instant, cluster: &mut Cluster) {
        on_member!(self, m => m.handle_timeout(now, cluster))
    }
    fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        on_member!(self, m => m.poll_timeout(now))
    }
}

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
    cfg: ConsumerConfig,
    poll_clock: Arc<PollClock>,
    /// The last connection error reported to the user (see `report_security_error`).
    last_security_error: Option<String>,
}

/// A seed for the jitter sources: the clock's nanoseconds.
fn seed(salt: u32) -> u32 {
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

impl IoLoop {
    fn new(
        cfg: ConsumerConfig,
        poll: Poll,
        waker: Arc<Waker>,
        cmd_rx: Receiver<Command>,
        ev_tx: Sender<Event>,
        budget: Arc<Budget>,
        poll_clock: Arc<PollClock>,
    ) -> Result<IoLoop> {
        let bootstrap = cfg
            .bootstrap
            .iter()
            .map(|s| parse_host_port(s))
            .collect::<Result<Vec<_>>>()?;
        let retry = Backoff::new(cfg.retry_backoff, cfg.retry_backoff_max);
        let cluster = Cluster::new(ClusterConfig {
            bootstrap_servers: bootstrap.len(),
            metadata_max_age: cfg.metadata_max_age,
            refresh_backoff: retry,
            request_timeout: cfg.request_timeout,
        });
        let fetcher = Fetcher::new(
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
            Arc::clone(&budget),
            Box::new(XorShift::new(seed(1))),
        );
        let lookups = Lookups::new(
            LookupConfig {
                isolation_level: cfg.isolation_level.wire(),
                request_timeout: cfg.request_timeout,
                retry_backoff: retry,
            },
            Box::new(XorShift::new(seed(2))),
        );
        let group = cfg.group_id.as_deref().map(|id| Group {
            coordinator: Coordinator::new(
                id,
                retry,
                cfg.request_timeout,
                Box::new(XorShift::new(seed(4))),
            ),
            commits: Commits::new(
                CommitConfig {
                    request_timeout: cfg.request_timeout,
                    retry_backoff: retry,
                    require_stable: cfg.isolation_level.wire() == 1,
                },
                Box::new(XorShift::new(seed(5))),
            ),
            member: None,
            subscription: None,
            leaving: Vec::new(),
        });
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
            jitter: XorShift::new(seed(3)),
            bootstrap,
            cfg,
            poll_clock,
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
                g.commits.handle_timeout(now, &g.coordinator);
                if let Some(m) = &mut g.member {
                    m.user_polled(self.poll_clock.last());
                    m.handle_timeout(now, &mut self.cluster);
                }
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
                    }
                    for tag in failed {
                        self.route_failure(tag, &failure, now);
                    }
                }
            }
        }
    }

    // ----- commands ----------------------------------------------------------------------

    fn command(&mut self, c: Command, now: Instant) {
        let _ = now;
        match c {
            Command::Assign(list) => {
                if let Some(g) = &mut self.group {
                    let owned: Vec<TopicPartition> =
                        list.iter().map(|(tp, ..)| tp.clone()).collect();
                    g.commits.set_assignment(&owned);
                }
                self.fetcher.assign(list, &mut self.cluster)
            }
            Command::Seek {
                tp,
                epoch,
                to,
                resume,
            } => self.fetcher.seek(&tp, epoch, to, resume),
            Command::Pause(tps) => self.fetcher.pause(&tps),
            Command::Token(Ok(token)) => {
                log::debug!(
                    "new OAUTHBEARER token for {} (expires {:?})",
                    token.principal,
                    token.expires_at
                );
                let mut happened = Vec::new();
                self.net.set_token(token, now, &mut happened);
                self.apply(&mut happened, now);
            }
            Command::Token(Err(why)) => self.report_security_error(Error::new(
                crate::error::ErrorKind::Authentication,
                format!("the OAUTHBEARER token provider failed: {why}"),
            )),
            Command::Lookup {
                id,
                query,
                deadline,
                reply,
            } => {
                self.replies.lookups.insert(id, reply);
                self.lookups.start(id, query, deadline, &mut self.cluster);
            }
            Command::Partitions {
                id,
                topic,
                deadline,
                reply,
            } => {
                self.replies.partitions.insert(id, reply);
                self.cluster.wait_for_topic(id, &topic, deadline);
            }
            Command::Commit {
                id,
                offsets,
                deadline,
                reply,
            } => match &mut self.group {
                Some(g) => {
                    if let Some(reply) = reply {
                        self.replies.commits.insert(id, reply);
                    }
                    g.commits.commit(id, offsets, deadline);
                }
                None => {
                    let e = Error::config("committing offsets needs a group.id");
                    match reply {
                        Some(r) => {
                            let _ = r.send(Err(e));
                        }
                        None => {
                            let _ = self.ev_tx.send(Event::CommitDone { id, result: Err(e) });
                        }
                    }
                }
            },
            Command::Committed {
                id,
                partitions,
                deadline,
                reply,
            } => match &mut self.group {
                Some(g) => {
                    self.replies.committed.insert(id, reply);
                    g.commits.fetch(id, partitions, deadline);
                }
                None => {
                    let _ = reply.send(Err(Error::config(
                        "reading committed offsets needs a group.id",
                    )));
                }
            },
            Command::Cancel(id) => {
                if self.replies.lookups.remove(&id).is_some() {
                    self.lookups.cancel(id, &mut self.cluster);
                }
                self.replies.partitions.remove(&id);
                self.replies.committed.remove(&id);
                self.replies.commits.remove(&id);
            }
            Command::Subscribe(sub) => self.subscribe(sub, now),
            Command::CallbackDone(token) => {
                if let Some(m) = self.group.as_mut().and_then(|g| g.member.as_mut()) {
                    m.callback_done(token, now);
                }
            }
            Command::Leave { reply } => match self.group.as_mut() {
                Some(g) => match &mut g.member {
                    Some(m) => {
                        g.leaving.push(reply);
                        m.leave(now);
                        g.subscription = None;
                    }
                    None => {
                        let _ = reply.send(());
                    }
                },
                None => {
                    let _ = reply.send(());
                }
            },
            Command::SubscribedTopics { reply } => {
                let known = self.cluster.topic_names();
                let topics = self
                    .group
                    .as_ref()
                    .and_then(|g| g.subscription.as_ref())
                    .map(|s| s.topics(known.iter().map(|t| &**t)))
                    .unwrap_or_default();
                let _ = reply.send(topics.into_iter().collect());
            }
            #[cfg(any(test, feature = "testing"))]
            Command::Panic => panic!("injected by a test"),
            Command::Shutdown => {}
        }
    }

    /// Starts (or changes) the group membership.
    fn subscribe(&mut self, sub: Subscription, now: Instant) {
        let Some(g) = &mut self.group else {
            // The user side checks for a group.id before subscribing.
            return;
        };
        // A member that stopped for good is replaced: subscribing again starts over.
        if g.member.as_ref().is_some_and(Member::is_fatal) {
            g.member = None;
        }
        if g.member.is_none() && self.cfg.group_protocol == GroupProtocol::Consumer {
            let rack = (!self.cfg.client_rack.is_empty()).then(|| self.cfg.client_rack.clone());
            g.member = Some(Member::Consumer(Kip848Member::new(
                Kip848Config {
                    instance_id: self.cfg.group_instance_id.clone(),
                    max_poll_interval: self.cfg.max_poll_interval,
                    remote_assignor: self.cfg.group_remote_assignor.clone(),
                    client_rack: rack,
                    retry_backoff: Backoff::new(self.cfg.retry_backoff, self.cfg.retry_backoff_max),
                    request_timeout: self.cfg.request_timeout,
                    member_id_seed: random_bytes(),
                },
                Box::new(XorShift::new(seed(7))),
            )));
        }
        if g.member.is_none() {
            let assignors = match self.cfg.assignors() {
                Ok(a) => a,
                Err(e) => {
                    // Checked by Consumer::new; kept from panicking all the same.
                    let _ = self.ev_tx.send(Event::GroupError {
                        error: e,
                        fatal: true,
                    });
                    return;
                }
            };
            let rack = (!self.cfg.client_rack.is_empty()).then(|| self.cfg.client_rack.clone());
            g.member = Some(Member::Classic(ClassicMember::new(
                ClassicConfig {
                    instance_id: self.cfg.group_instance_id.clone(),
                    session_timeout: self.cfg.session_timeout,
                    rebalance_timeout: self.cfg.max_poll_interval,
                    heartbeat_interval: self.cfg.heartbeat_interval,
                    max_poll_interval: self.cfg.max_poll_interval,
                    assignors,
                    client_rack: rack,
                    retry_backoff: Backoff::new(self.cfg.retry_backoff, self.cfg.retry_backoff_max),
                    request_timeout: self.cfg.request_timeout,
                },
                Box::new(XorShift::new(seed(6))),
            )));
        }
        g.subscription = Some(sub.clone());
        if let Some(m) = &mut g.member {
            m.user_polled(self.poll_clock.last().max(now));
            m.subscribe(sub, now);
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
            g.coordinator.begin_round();
            if let Some(m) = &mut g.member {
                while let Some(t) =
                    m.poll_transmit(now, &mut self.links, &mut g.coordinator, &mut self.cluster)
                {
                    let route = t.route;
                    match self.net.send(t, now) {
                        Ok(()) => self.links.on_sent(route),
                        Err(t) => {
                            let why =
                                Failure::Disconnected(format!("{} is not connected", t.route));
                            m.handle_failure(t.tag.id, &why, now, &mut g.coordinator);
                        }
                    }
                }
            }
            g.commits
                .fetch_positions(self.fetcher.take_committed_wanted(now));
            while let Some(t) = g
                .commits
                .poll_transmit(now, &mut self.links, &mut g.coordinator)
            {
                let route = t.route;
                match self.net.send(t, now) {
                    Ok(()) => self.links.on_sent(route),
                    Err(t) => {
                        let why = Failure::Disconnected(format!("{} is not connected", t.route));
                        g.commits
                            .handle_failure(t.tag.id, &why, now, &mut g.coordinator);
                    }
                }
            }
            if let Some(t) = g
                .coordinator
                .poll_transmit(now, &mut self.links, &mut self.cluster)
            {
                self.send(t, now);
            }
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
        self.forward_events(now);
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

    /// A link could not be opened. To the group coordinator: look for the coordinator again
    /// (it may have moved), as a request that fails on that link does. A fetch link to a
    /// preferred read replica: fetch from the leader instead.
    fn link_failed(&mut self, route: Route, why: &str, now: Instant) {
        let Peer::Node(node) = route.peer else { return };
        match (route.lane, &mut self.group) {
            (Lane::Group | Lane::Join, Some(g)) => g.coordinator.link_failed(node, why, now),
            (Lane::Fetch, _) => self.fetcher.replica_unreachable(node),
            _ => {}
        }
    }

    /// A connection failed for a reason the user must act on (a refused login, an untrusted
    /// certificate): reported from `poll`, once until it changes or a link gets ready again,
    /// so a reconnecting consumer does not repeat it on every attempt.
    fn report_security_error(&mut self, e: Error) {
        let text = e.to_string();
        if self.last_security_error.as_deref() == Some(text.as_str()) {
            return;
        }
        log::error!("{text}");
        self.last_security_error = Some(text);
        // Blocking calls waiting for brokers fail now with the reason, as in the Java
        // client, rather than at their timeout. Commits are not failed: they stay queued
        // in order and go out once a connection is ready.
        let waiting: Vec<u64> = self.replies.lookups.keys().copied().collect();
        for id in waiting {
            self.lookups.cancel(id, &mut self.cluster);
            if let Some(reply) = self.replies.lookups.remove(&id) {
                let _ = reply.send(Err(e.clone()));
            }
        }
        for (_, reply) in self.replies.partitions.drain() {
            let _ = reply.send(Err(e.clone()));
        }
        for (_, reply) in self.replies.committed.drain() {
            let _ = reply.send(Err(e.clone()));
        }
        let _ = self.ev_tx.send(Event::Error(e, None));
    }

    fn forward_events(&mut self, now: Instant) {
        while let Some(e) = self.fetcher.poll_event() {
            let ev = match e {
                FetchEvent::Chunk(c) => Event::Chunk(c),
                FetchEvent::Error(e, epoch) => Event::Error(e, epoch),
                FetchEvent::End {
                    tp,
                    epoch,
                    end_offset,
                } => Event::End {
                    tp,
                    epoch,
                    end_offset,
                },
            };
            let _ = self.ev_tx.send(ev);
        }
        while let Some(LookupEvent::Done { id, result }) = self.lookups.poll_event() {
            if let Some(reply) = self.replies.lookups.remove(&id) {
                let _ = reply.send(result);
            }
        }
        while let Some(e) = self.cluster.poll_event() {
            match e {
                ClusterEvent::Partitions { id, result } => {
                    if let Some(reply) = self.replies.partitions.remove(&id) {
                        let _ = reply.send(result);
                    }
                }
                ClusterEvent::Error(e) => {
                    let _ = self.ev_tx.send(Event::Error(e, None));
                }
            }
        }
        let Some(g) = &mut self.group else { return };
        if let Some(m) = &mut g.member {
            while let Some(e) = m.poll_event() {
                match e {
                    MemberEvent::Callback {
                        token,
                        kind,
                        partitions,
                        owned,
                    } => {
                        let _ = self.ev_tx.send(Event::Rebalance {
                            token,
                            kind,
                            partitions,
                            owned,
                        });
                    }
                    MemberEvent::Identity(id) => {
                        g.commits.set_identity(id.clone());
                        let _ = self.ev_tx.send(Event::Identity(id));
                    }
                    MemberEvent::Error { error, fatal } => {
                        let _ = self.ev_tx.send(Event::GroupError { error, fatal });
                    }
                    MemberEvent::Left => {
                        for reply in g.leaving.drain(..) {
                            let _ = reply.send(());
                        }
                        if g.subscription.is_none() {
                            self.cluster.clear_interest(Interest::Group);
                            self.cluster.set_all_topics(false);
                            g.commits.set_identity(Identity::Outsider);
                        }
                    }
                }
            }
        }
        while let Some(e) = g.commits.poll_event() {
            match e {
                CommitEvent::Committed { id, result } => match self.replies.commits.remove(&id) {
                    Some(reply) => {
                        let _ = reply.send(result);
                    }
                    None => {
                        let _ = self.ev_tx.send(Event::CommitDone { id, result });
                    }
                },
                CommitEvent::Offsets { id, result } => {
                    if let Some(reply) = self.replies.committed.remove(&id) {
                        let _ = reply.send(result);
                    }
                }
                CommitEvent::Positions { found, failed } => {
                    for (tp, epoch, c) in found {
                        self.fetcher.apply_committed(&tp, epoch, c);
                    }
                    for (tp, epoch) in failed {
                        self.fetcher.committed_failed(&tp, epoch, now);
                    }
                }
                CommitEvent::Error(e) => {
                    let _ = self.ev_tx.send(Event::Error(e, None));
                }
            }
        }
    }

    // ----- the router ----------------------------------------------------------------------

    fn route_response(&mut self, route: Route, f: InFlight, body: FrameBuf, now: Instant) {
        self.links.on_answered(route);
        let Some(Tag { owner, id }) = f.tag else {
            return;
        };
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
            Owner::Coordinator => {
                if let Some(g) = &mut self.group {
                    g.coordinator.handle_response(
                        id,
                        f.version,
                        &body,
                        now,
                        &mut self.links,
                        &mut self.cluster,
                    );
                }
            }
            Owner::Member => {
                if let Some(g) = &mut self.group {
                    if let Some(m) = &mut g.member {
                        m.handle_response(
                            id,
                            f.version,
                            &body,
                            now,
                            &mut self.links,
                            &mut g.coordinator,
                            &mut self.cluster,
                        );
                    }
                }
            }
            Owner::Commits => {
                if let Some(g) = &mut self.group {
                    g.commits.handle_response(
                        id,
                        f.version,
                        &body,
                        now,
                        &mut self.links,
                        &mut g.coordinator,
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
            Owner::Coordinator => {
                if let Some(g) = &mut self.group {
                    g.coordinator.handle_failure(tag.id, failure, now);
                }
            }
            Owner::Member => {
                if let Some(g) = &mut self.group {
                    if let Some(m) = &mut g.member {
                        m.handle_failure(tag.id, failure, now, &mut g.coordinator);
                    }
                }
            }
            Owner::Commits => {
                if let Some(g) = &mut self.group {
                    g.commits
                        .handle_failure(tag.id, failure, now, &mut g.coordinator);
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
            self.group
                .as_ref()
                .and_then(|g| g.coordinator.poll_timeout(now)),
            self.group
                .as_ref()
                .and_then(|g| g.commits.poll_timeout(now)),
            self.group
                .as_ref()
                .and_then(|g| g.member.as_ref())
                .and_then(|m| m.poll_timeout(now)),
            self.net.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|t| t.max(now))
    }
}
