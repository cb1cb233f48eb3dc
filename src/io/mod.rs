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
//! The components ([`Cluster`], [`Fetcher`], [`Lookups`]) decide everything; this module
//! only carries it out. It never runs user code and never blocks on anything but
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
mod resolve;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use mio::{Events, Poll, Token, Waker};

use self::conn::{Conn, ConnState, InFlight, Outcome};
use self::resolve::Resolver;
use crate::backoff::{Backoff, XorShift};
use crate::buffer::{Budget, FrameBuf, Pool};
use crate::cluster::{Cluster, ClusterConfig, ClusterEvent};
use crate::config::{parse_host_port, ConsumerConfig};
use crate::error::{Error, ErrorKind, Result};
use crate::fetch::chunk::Chunk;
use crate::fetch::fetcher::{FetchConfig, FetchEvent, Fetcher, SeekTo};
use crate::fetch::lookup::{LookupConfig, LookupEvent, LookupResult, Lookups};
use crate::group::commit::{CommitConfig, CommitEvent, Commits, Committed, CommittedResult};
use crate::group::coordinator::Coordinator;
use crate::link::{Failure, Lane, Links, Owner, Peer, Route, Tag, Transmit};
use crate::types::{PositionEpoch, TopicPartition};

const WAKER: Token = Token(0);

/// What the user side asks of the I/O thread.
pub(crate) enum Command {
    /// Replace the assignment. Each partition comes with its position epoch and where to
    /// start (partitions already assigned keep their fetch state if the epoch is unchanged).
    Assign(Vec<(TopicPartition, PositionEpoch, SeekTo)>),
    /// Move one partition's position (new epoch); `resume` also unpauses it.
    Seek {
        tp: TopicPartition,
        epoch: PositionEpoch,
        to: SeekTo,
        resume: bool,
    },
    /// Stop fetching these partitions.
    Pause(Vec<TopicPartition>),
    /// Look up offsets by timestamp (or the special -1 latest / -2 earliest).
    Lookup {
        id: u64,
        query: Vec<(TopicPartition, i64)>,
        deadline: Instant,
        reply: Sender<LookupResult>,
    },
    /// The partitions of a topic, from metadata.
    Partitions {
        id: u64,
        topic: String,
        deadline: Instant,
        reply: Sender<Result<Vec<TopicPartition>>>,
    },
    /// Commit these offsets to the group; answered on `reply`, or as an
    /// [`Event::CommitDone`] when there is none (an asynchronous commit).
    Commit {
        id: u64,
        offsets: BTreeMap<TopicPartition, Committed>,
        deadline: Instant,
        reply: Option<Sender<Result<()>>>,
    },
    /// The group's committed offsets of these partitions.
    Committed {
        id: u64,
        partitions: Vec<TopicPartition>,
        deadline: Instant,
        reply: Sender<CommittedResult>,
    },
    /// The caller of request `id` stopped waiting (woken up).
    Cancel(u64),
    /// Panic on the I/O thread (tests of the panic path only).
    #[cfg(any(test, feature = "testing"))]
    Panic,
    /// Stop the thread.
    Shutdown,
}

/// What the I/O thread hands to the user side.
pub(crate) enum Event {
    /// Records (or just a position move) for one partition.
    Chunk(Chunk),
    /// An error for `poll` to return. `epoch` ties a partition error to a position epoch.
    Error(Error, Option<PositionEpoch>),
    /// A partition's end offset changed (for lag).
    End {
        tp: TopicPartition,
        epoch: PositionEpoch,
        end_offset: i64,
    },
    /// Asynchronous commit `id` finished.
    CommitDone { id: u64, result: Result<()> },
    /// The I/O thread stopped for good (an error or a panic); nothing will follow.
    Stopped(Error),
}

/// Handle to the running I/O thread.
pub(crate) struct IoHandle {
    pub events: Receiver<Event>,
    pub budget: Arc<Budget>,
    commands: Sender<Command>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
    /// Disconnected when the thread has ended.
    done: Receiver<()>,
}

impl IoHandle {
    /// Sends a command and wakes the loop.
    pub fn send(&self, c: Command) -> Result<()> {
        self.commands.send(c).map_err(|_| Error::closed())?;
        self.waker
            .wake()
            .map_err(|e| Error::io(e, "waking the I/O thread"))
    }

    /// Stops the thread and waits up to `timeout` for it to end (it is left to finish on
    /// its own after that). Returns an error if it did not end in time.
    pub fn shutdown(&mut self, timeout: Duration) -> Result<()> {
        let _ = self.send(Command::Shutdown);
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        match self.done.recv_timeout(timeout) {
            Err(RecvTimeoutError::Disconnected) | Ok(()) => {
                // The thread's own panics are caught and reported as events.
                let _ = thread.join();
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => Err(Error::timeout(
                "the I/O thread did not stop within the close timeout",
            )),
        }
    }
}

/// Starts the I/O thread.
pub(crate) fn spawn(cfg: ConsumerConfig) -> Result<IoHandle> {
    let poll = Poll::new().map_err(|e| Error::io(e, "creating the poll instance"))?;
    let waker = Arc::new(
        Waker::new(poll.registry(), WAKER).map_err(|e| Error::io(e, "creating the waker"))?,
    );
    let wake = Arc::clone(&waker);
    let budget = Budget::new(
        cfg.fetch_buffer_bytes,
        Box::new(move || {
            let _ = wake.wake();
        }),
    );
    let (cmd_tx, cmd_rx) = crossbeam_channel::unbounded();
    let (ev_tx, ev_rx) = crossbeam_channel::unbounded();
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
    let mut io = IoLoop::new(
        cfg,
        poll,
        Arc::clone(&waker),
        cmd_rx,
        ev_tx.clone(),
        Arc::clone(&budget),
    )?;
    let thread = std::thread::Builder::new()
        .name("kafka-consumer".into())
        .spawn(move || {
            let _done = done_tx;
            let stopped = match panic::catch_unwind(AssertUnwindSafe(|| io.run())) {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(Error::io(e, "the I/O thread failed")),
                Err(payload) => {
                    let what = payload
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown cause".to_owned());
                    Some(Error::new(
                        ErrorKind::Closed,
                        format!("the I/O thread panicked: {what}"),
                    ))
                }
            };
            if let Some(e) = stopped {
                log::error!("{e}");
                let _ = ev_tx.send(Event::Stopped(e));
            }
        })
        .map_err(|e| Error::io(e, "starting the I/O thread"))?;
    Ok(IoHandle {
        commands: cmd_tx,
        events: ev_rx,
        budget,
        waker,
        thread: Some(thread),
        done: done_rx,
    })
}

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
}

struct IoLoop {
    poll: Poll,
    cmd_rx: Receiver<Command>,
    ev_tx: Sender<Event>,
    conns: HashMap<Route, Conn>,
    tokens: HashMap<Token, Route>,
    jobs: HashMap<u64, Route>,
    next_token: usize,
    resolver: Resolver,
    pool: Pool,
    links: Links,
    cluster: Cluster,
    fetcher: Fetcher,
    lookups: Lookups,
    group: Option<Group>,
    replies: Replies,
    jitter: XorShift,
    bootstrap: Vec<(String, u16)>,
    client_id: String,
    request_timeout: Duration,
    setup_timeout: Duration,
}

/// A seed for the jitter sources: the clock's nanoseconds.
fn seed(salt: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos ^ salt.wrapping_mul(0x9E37_79B9)
}

impl IoLoop {
    fn new(
        cfg: ConsumerConfig,
        poll: Poll,
        waker: Arc<Waker>,
        cmd_rx: Receiver<Command>,
        ev_tx: Sender<Event>,
        budget: Arc<Budget>,
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
        });
        Ok(IoLoop {
            poll,
            cmd_rx,
            ev_tx,
            conns: HashMap::new(),
            tokens: HashMap::new(),
            jobs: HashMap::new(),
            next_token: 1,
            resolver: Resolver::new(waker),
            pool: Pool::new(budget),
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
            client_id: cfg.client_id.clone(),
            request_timeout: cfg.request_timeout,
            setup_timeout: cfg.connection_setup_timeout,
        })
    }

    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        loop {
            let now = Instant::now();
            self.drive(now);
            let timeout = self
                .next_wakeup(now)
                .map(|t| t.saturating_duration_since(now));
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            for ev in events.iter() {
                if ev.token() == WAKER {
                    continue;
                }
                let Some(&route) = self.tokens.get(&ev.token()) else {
                    continue;
                };
                let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                self.conn_ready(route, readable, ev.is_writable(), now);
            }
            self.resolved(now);
            loop {
                match self.cmd_rx.try_recv() {
                    Ok(Command::Shutdown) => return Ok(()),
                    Ok(c) => self.command(c, now),
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    // The consumer was dropped without close().
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return Ok(()),
                }
            }
            self.timers(now);
        }
    }

    // ----- commands ----------------------------------------------------------------------

    fn command(&mut self, c: Command, now: Instant) {
        let _ = now;
        match c {
            Command::Assign(list) => self.fetcher.assign(list, &mut self.cluster),
            Command::Seek {
                tp,
                epoch,
                to,
                resume,
            } => self.fetcher.seek(&tp, epoch, to, resume),
            Command::Pause(tps) => self.fetcher.pause(&tps),
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
            #[cfg(any(test, feature = "testing"))]
            Command::Panic => panic!("injected by a test"),
            Command::Shutdown => {}
        }
    }

    // ----- driving the components --------------------------------------------------------

    /// Collects what every component wants to send, connects wanted links, and hands
    /// events to the user side.
    fn drive(&mut self, now: Instant) {
        // Spare buffers give way to a batch that waits for room.
        self.pool.yield_to_starved();
        // What the last answers produced first: committed offsets position partitions the
        // fetcher is about to plan.
        self.forward_events(now);
        self.links.begin_round();
        if let Some(g) = &mut self.group {
            g.coordinator.begin_round();
            g.commits
                .fetch_positions(self.fetcher.take_committed_wanted(now));
            while let Some(t) = g
                .commits
                .poll_transmit(now, &mut self.links, &mut g.coordinator)
            {
                if let Err(t) = Self::send_on(&mut self.conns, &mut self.links, t, now) {
                    let why = Failure::Disconnected(format!("{} is not connected", t.route));
                    g.commits
                        .handle_failure(t.tag.id, &why, now, &mut g.coordinator);
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
        for (route, why) in self.links.take_close_requests() {
            self.close(route, &why, Failure::Disconnected(why.clone()), now);
        }
        for route in self.links.connects_due(now) {
            self.connect(route, now);
        }
        let registry = self.poll.registry();
        let mut broken = Vec::new();
        for (route, c) in self.conns.iter_mut() {
            if let Err(e) = c.flush_and_update(registry) {
                broken.push((*route, e));
            }
        }
        for (route, e) in broken {
            let why = format!("write failed: {e}");
            self.close(route, &why, Failure::Disconnected(why.clone()), now);
        }
        self.forward_events(now);
    }

    fn send(&mut self, t: Transmit, now: Instant) {
        if let Err(t) = Self::send_on(&mut self.conns, &mut self.links, t, now) {
            // The link said ready: this cannot happen; fail the request rather than lose it.
            let why = format!("{} is not connected", t.route);
            self.route_failure(t.tag, &Failure::Disconnected(why), now);
        }
    }

    /// Queues `t` on its connection; gives it back if the connection is not ready.
    fn send_on(
        conns: &mut HashMap<Route, Conn>,
        links: &mut Links,
        t: Transmit,
        now: Instant,
    ) -> std::result::Result<(), Transmit> {
        match conns.get_mut(&t.route) {
            Some(c) if c.is_ready() => {
                links.on_sent(t.route);
                c.send(t, now);
                Ok(())
            }
            _ => Err(t),
        }
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
            Owner::Commits => {
                if let Some(g) = &mut self.group {
                    g.commits
                        .handle_failure(tag.id, failure, now, &mut g.coordinator);
                }
            }
        }
    }

    // ----- connections -------------------------------------------------------------------

    fn address(&self, route: Route) -> Option<(String, u16)> {
        match route.peer {
            Peer::Bootstrap(i) => self.bootstrap.get(i).cloned(),
            Peer::Node(n) => self.cluster.broker(n).map(|b| (b.host.clone(), b.port)),
        }
    }

    fn connect(&mut self, route: Route, now: Instant) {
        let Some((host, port)) = self.address(route) else {
            let why = "no address known for this broker";
            self.links.on_closed(route, why, now, &mut self.jitter);
            self.cluster.request_update();
            self.link_failed(route, why, now);
            return;
        };
        if let Some(mut old) = self.conns.remove(&route) {
            self.tokens.remove(&old.token);
            let _ = old.close(self.poll.registry());
        }
        let job = self.resolver.submit(&host, port);
        let token = Token(self.next_token);
        self.next_token += 1;
        self.tokens.insert(token, route);
        self.jobs.insert(job, route);
        self.conns.insert(
            route,
            Conn::resolving(
                route,
                &host,
                token,
                job,
                &self.client_id,
                self.pool.clone(),
                now,
            ),
        );
        log::debug!("opening {route} to {host}:{port}");
    }

    fn resolved(&mut self, now: Instant) {
        for (job, result) in self.resolver.answers() {
            let Some(route) = self.jobs.remove(&job) else {
                continue;
            };
            let Some(conn) = self.conns.get_mut(&route) else {
                continue;
            };
            if conn.state != ConnState::Resolving(job) {
                continue;
            }
            let host = conn.host.clone();
            let outcome = match result {
                Ok(addrs) => conn
                    .resolved(addrs, self.poll.registry(), now)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("cannot resolve {host}: {e}")),
            };
            if let Err(why) = outcome {
                self.close(route, &why, Failure::Disconnected(why.clone()), now);
            }
        }
    }

    fn conn_ready(&mut self, route: Route, readable: bool, writable: bool, now: Instant) {
        let deadline = now + self.request_timeout;
        let registry = self.poll.registry();
        let Some(conn) = self.conns.get_mut(&route) else {
            return;
        };
        match conn.ready(registry, readable, writable, deadline) {
            Ok(outcomes) => {
                for o in outcomes {
                    match o {
                        Outcome::Ready(versions) => self.links.on_ready(route, versions),
                        Outcome::Response { in_flight, body } => {
                            self.route_response(route, in_flight, body, now)
                        }
                    }
                }
            }
            Err(e) if conn.state == ConnState::Connecting => {
                if let Err(e) = conn.next_address(registry, now, &e.to_string()) {
                    let why = e.to_string();
                    self.close(route, &why, Failure::Disconnected(why.clone()), now);
                }
            }
            Err(e) => {
                let why = e.to_string();
                self.close(route, &why, Failure::Disconnected(why.clone()), now);
            }
        }
    }

    /// Closes `route`'s socket; its requests in flight fail with `failure`.
    fn close(&mut self, route: Route, why: &str, failure: Failure, now: Instant) {
        let Some(mut conn) = self.conns.remove(&route) else {
            return;
        };
        self.tokens.remove(&conn.token);
        let failed = conn.close(self.poll.registry());
        let busy = failed.iter().any(|f| f.tag.is_some()) || conn.state != ConnState::Ready;
        if busy {
            log::warn!("{route} ({}) closed: {why}", conn.host);
        } else {
            log::debug!("{route} ({}) closed while idle: {why}", conn.host);
        }
        self.links.on_closed(route, why, now, &mut self.jitter);
        if conn.state != ConnState::Ready {
            self.link_failed(route, why, now);
        }
        for f in failed {
            if let Some(tag) = f.tag {
                self.route_failure(tag, &failure, now);
            }
        }
    }

    /// A link could not be opened. To the group coordinator: look for the coordinator again
    /// (it may have moved), as a request that fails on that link does. A fetch link to a
    /// preferred read replica: fetch from the leader instead.
    fn link_failed(&mut self, route: Route, why: &str, now: Instant) {
        let Peer::Node(node) = route.peer else { return };
        match (route.lane, &mut self.group) {
            (Lane::Group, Some(g)) => g.coordinator.link_failed(node, why, now),
            (Lane::Fetch, _) => self.fetcher.replica_unreachable(node),
            _ => {}
        }
    }

    // ----- timers --------------------------------------------------------------------------

    fn timers(&mut self, now: Instant) {
        let mut setup = Vec::new();
        let mut requests = Vec::new();
        for (route, c) in &self.conns {
            if c.setup_deadline(self.setup_timeout)
                .is_some_and(|d| now >= d)
            {
                setup.push(*route);
            } else if c.next_deadline().is_some_and(|d| now >= d) {
                requests.push(*route);
            }
        }
        for route in setup {
            let registry = self.poll.registry();
            let Some(conn) = self.conns.get_mut(&route) else {
                continue;
            };
            let result = match conn.state {
                ConnState::Resolving(_) => Err(format!(
                    "resolving {} took longer than socket.connection.setup.timeout.ms",
                    conn.host
                )),
                _ => conn
                    .next_address(registry, now, "connect timed out")
                    .map_err(|e| e.to_string()),
            };
            if let Err(why) = result {
                self.close(route, &why, Failure::Disconnected(why.clone()), now);
            }
        }
        for route in requests {
            self.close(route, "a request timed out", Failure::TimedOut, now);
        }
        self.cluster.handle_timeout(now, &self.links);
        self.lookups
            .handle_timeout(now, &self.links, &mut self.cluster);
        if let Some(g) = &mut self.group {
            g.commits.handle_timeout(now, &g.coordinator);
        }
    }

    fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        let conns = self.conns.values().filter_map(|c| {
            let setup = c.setup_deadline(self.setup_timeout);
            let req = c.next_deadline();
            match (setup, req) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        });
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
        ]
        .into_iter()
        .flatten()
        .chain(conns)
        .min()
        .map(|t| t.max(now))
    }
}
