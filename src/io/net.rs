//! The sockets: one [`Conn`] per route, the poll instance they are registered with, name
//! resolution, and their setup and request deadlines. It reports what happened as
//! [`NetEvent`]s; what to do about it is the loop's and the components' business.
//!
//! Invariants:
//! 1. A closed connection is forgotten at once (a reconnect is a new one), and every request
//!    that was in flight on it is reported in its [`NetEvent::Closed`].
//! 2. A connection that is still being set up (resolving, connecting to one address) gives
//!    up after `socket.connection.setup.timeout.ms` per step; a request without an answer
//!    within its timeout closes its connection.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};

use super::conn::{At, Conn, ConnState, InFlight, Outcome};
use super::handle::SharedMetrics;
use super::resolve::Resolver;
use super::secure::{as_user_error, Security};
use crate::buffer::{FrameBuf, Pool};
use crate::error::{Error, ErrorKind};
use crate::link::{Failure, Route, Tag, Transmit, Versions};
use crate::security::OAuthBearerToken;

/// Something that happened on the sockets.
pub(crate) enum NetEvent {
    /// A connection negotiated its versions.
    Ready(Route, Versions),
    /// An answer to a component's request.
    Response(Route, InFlight, FrameBuf),
    /// A connection closed (or could not be opened); `failed` are the requests that were
    /// in flight on it; `busy` says whether it was doing anything (for the log level);
    /// `established` whether it had become ready at all.
    Closed {
        route: Route,
        why: String,
        failure: Failure,
        failed: Vec<Tag>,
        busy: bool,
        established: bool,
        /// Why the connection failed, when the user must hear it (a refused login, a
        /// certificate not trusted): reported from `poll`.
        error: Option<Error>,
    },
}

/// Every socket of the consumer.
pub(crate) struct Net {
    poll: Poll,
    conns: HashMap<Route, Conn>,
    tokens: HashMap<Token, Route>,
    /// Resolver jobs, by id: the route waiting for them.
    jobs: HashMap<u64, Route>,
    next_token: usize,
    resolver: Resolver,
    pool: Pool,
    client_id: String,
    request_timeout: Duration,
    setup_timeout: Duration,
    waker_token: Token,
    security: Security,
    /// Requests, answers and connection states are counted here.
    metrics: Arc<SharedMetrics>,
}

/// What every connection of one consumer shares.
pub(crate) struct NetSettings {
    pub client_id: String,
    /// `request.timeout.ms`.
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms`.
    pub setup_timeout: Duration,
    pub security: Security,
    pub metrics: Arc<SharedMetrics>,
}

impl Net {
    /// No connections yet. `waker` is registered with `poll` under `waker_token`.
    pub fn new(
        poll: Poll,
        waker: Arc<Waker>,
        waker_token: Token,
        pool: Pool,
        settings: NetSettings,
    ) -> Net {
        let NetSettings {
            client_id,
            request_timeout,
            setup_timeout,
            security,
            metrics,
        } = settings;
        Net {
            poll,
            conns: HashMap::new(),
            tokens: HashMap::new(),
            jobs: HashMap::new(),
            next_token: waker_token.0 + 1,
            resolver: Resolver::new(waker),
            pool,
            client_id,
            request_timeout,
            setup_timeout,
            waker_token,
            security,
            metrics,
        }
    }

    /// A new OAUTHBEARER token: connections waiting for one log in now; later logins and
    /// re-authentications use it.
    pub fn set_token(&mut self, token: OAuthBearerToken, now: Instant, out: &mut Vec<NetEvent>) {
        self.security.set_token(token);
        let at = At {
            now,
            deadline: now + self.request_timeout,
            security: &self.security,
        };
        let registry = self.poll.registry();
        let mut broken = Vec::new();
        for (route, c) in self.conns.iter_mut() {
            if let Err(e) = c.token_arrived(registry, at) {
                broken.push((*route, e));
            }
        }
        for (route, e) in broken {
            self.close_for(route, e, out);
        }
    }

    /// Closes `route` after error `e`, reporting it to the user if it is one they must see.
    fn close_for(&mut self, route: Route, e: std::io::Error, out: &mut Vec<NetEvent>) {
        let why = e.to_string();
        let error = as_user_error(&e);
        self.close_with(route, &why, Failure::Disconnected(why.clone()), error, out);
    }

    /// Waits for readiness (or the waker) until `timeout`.
    pub fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        match self.poll.poll(events, timeout) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            r => r,
        }
    }

    /// Reads and writes on the sockets `events` say are ready.
    pub fn handle_events(&mut self, events: &Events, now: Instant, out: &mut Vec<NetEvent>) {
        for ev in events.iter() {
            if ev.token() == self.waker_token {
                continue;
            }
            let Some(&route) = self.tokens.get(&ev.token()) else {
                continue;
            };
            let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
            self.ready(route, readable, ev.is_writable(), now, out);
        }
    }

    fn ready(
        &mut self,
        route: Route,
        readable: bool,
        writable: bool,
        now: Instant,
        out: &mut Vec<NetEvent>,
    ) {
        let at = At {
            now,
            deadline: now + self.request_timeout,
            security: &self.security,
        };
        let registry = self.poll.registry();
        let Some(conn) = self.conns.get_mut(&route) else {
            return;
        };
        let (outcomes, result) = conn.ready(registry, readable, writable, at);
        // Answers that arrived before an error are handed on before the close.
        for o in outcomes {
            out.push(match o {
                Outcome::Ready(versions) => {
                    self.metrics.with(|m| m.connected(route));
                    NetEvent::Ready(route, versions)
                }
                Outcome::Response { in_flight, body } => NetEvent::Response(route, in_flight, body),
            });
        }
        let Err(e) = result else { return };
        if conn.state == ConnState::Connecting {
            if let Err(e) = conn.next_address(registry, now, &e.to_string()) {
                let why = e.to_string();
                self.close(route, &why, Failure::Disconnected(why.clone()), out);
            }
        } else {
            self.close_for(route, e, out);
        }
    }

    /// Opens a connection for `route` to `host:port`: resolves the name off this thread,
    /// then connects. An older connection of the route is dropped first.
    pub fn connect(&mut self, route: Route, host: &str, port: u16, now: Instant) {
        if let Some(mut old) = self.conns.remove(&route) {
            self.tokens.remove(&old.token);
            let _ = old.close(self.poll.registry());
        }
        self.metrics.with(|m| m.connecting(route));
        let job = self.resolver.submit(host, port);
        let token = Token(self.next_token);
        self.next_token += 1;
        self.tokens.insert(token, route);
        self.jobs.insert(job, route);
        self.conns.insert(
            route,
            Conn::resolving(
                route,
                host,
                token,
                job,
                &self.client_id,
                self.pool.clone(),
                Arc::clone(&self.metrics),
                now,
            ),
        );
        log::debug!("opening {route} to {host}:{port}");
    }

    /// Starts connecting the routes whose names were resolved.
    pub fn handle_resolved(&mut self, now: Instant, out: &mut Vec<NetEvent>) {
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
                self.close(route, &why, Failure::Disconnected(why.clone()), out);
            }
        }
    }

    /// Queues `t` on its connection; gives it back if the connection is not ready.
    pub fn send(&mut self, t: Transmit, now: Instant) -> std::result::Result<(), Transmit> {
        match self.conns.get_mut(&t.route) {
            Some(c) if c.is_ready() => {
                c.send(t, now);
                Ok(())
            }
            _ => Err(t),
        }
    }

    /// Frees spare frame buffers if the fetcher waits for memory.
    pub fn reclaim_spares(&self) {
        self.pool.reclaim_if_starved();
    }

    /// Writes what is queued; closes connections whose writes fail.
    pub fn flush(&mut self, out: &mut Vec<NetEvent>) {
        let registry = self.poll.registry();
        let mut broken = Vec::new();
        for (route, c) in self.conns.iter_mut() {
            if let Err(e) = c.flush_and_update(registry) {
                broken.push((*route, e));
            }
        }
        for (route, e) in broken {
            let why = format!("write failed: {e}");
            self.close(route, &why, Failure::Disconnected(why.clone()), out);
        }
    }

    /// Closes `route`'s connection; its requests in flight fail with `failure`.
    pub fn close(&mut self, route: Route, why: &str, failure: Failure, out: &mut Vec<NetEvent>) {
        self.close_with(route, why, failure, None, out)
    }

    fn close_with(
        &mut self,
        route: Route,
        why: &str,
        failure: Failure,
        error: Option<Error>,
        out: &mut Vec<NetEvent>,
    ) {
        let Some(mut conn) = self.conns.remove(&route) else {
            return;
        };
        self.metrics.with(|m| m.closed(route));
        self.tokens.remove(&conn.token);
        let failed: Vec<Tag> = conn
            .close(self.poll.registry())
            .into_iter()
            .filter_map(|f| f.tag)
            .collect();
        let established = conn.state == ConnState::Ready;
        let busy = !failed.is_empty() || !established;
        let why = format!("{why} ({})", conn.host);
        out.push(NetEvent::Closed {
            route,
            why,
            failure,
            failed,
            busy,
            established,
            error,
        });
    }

    /// Gives up on setup steps and requests that took too long.
    pub fn handle_timeouts(&mut self, now: Instant, out: &mut Vec<NetEvent>) {
        let mut setup = Vec::new();
        let mut requests = Vec::new();
        let mut reauth = Vec::new();
        for (route, c) in &self.conns {
            if c.setup_deadline(self.setup_timeout)
                .is_some_and(|d| now >= d)
            {
                setup.push(*route);
            } else if c.next_deadline().is_some_and(|d| now >= d) {
                requests.push(*route);
            } else if c.reauth_due().is_some_and(|d| now >= d) {
                reauth.push(*route);
            }
        }
        let at = At {
            now,
            deadline: now + self.request_timeout,
            security: &self.security,
        };
        let mut broken = Vec::new();
        for route in reauth {
            if let Some(c) = self.conns.get_mut(&route) {
                if let Err(e) = c.begin_reauth(self.poll.registry(), at) {
                    broken.push((route, e));
                }
            }
        }
        for (route, e) in broken {
            self.close_for(route, e, out);
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
                ConnState::Connecting => conn
                    .next_address(registry, now, "connect timed out")
                    .map_err(|e| e.to_string()),
                _ => {
                    let step = conn.setup_step();
                    let why = format!(
                        "{step} with {} did not finish within socket.connection.setup.timeout.ms",
                        conn.address()
                    );
                    let error = match step {
                        "the TLS handshake" => Some(Error::new(
                            ErrorKind::Tls,
                            format!("{why}: is it a TLS listener?"),
                        )),
                        "SASL authentication" => {
                            Some(Error::new(ErrorKind::Authentication, why.clone()))
                        }
                        _ => None,
                    };
                    self.close_with(route, &why, Failure::Disconnected(why.clone()), error, out);
                    continue;
                }
            };
            if let Err(why) = result {
                self.close(route, &why, Failure::Disconnected(why.clone()), out);
            }
        }
        for route in requests {
            self.close(route, "a request timed out", Failure::TimedOut, out);
        }
    }

    /// The earliest setup or request deadline of any connection.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter_map(|c| {
                [
                    c.setup_deadline(self.setup_timeout),
                    c.next_deadline(),
                    c.reauth_due(),
                ]
                .into_iter()
                .flatten()
                .min()
            })
            .min()
    }
}
