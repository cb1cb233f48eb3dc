//! One socket: non-blocking connect to each resolved address in turn, the TLS handshake
//! (`SSL`, `SASL_SSL`), ApiVersions negotiation, SASL authentication and re-authentication
//! (`SASL_*`), framed reads straight into their own buffers, queued writes, correlation
//! ids.
//!
//! mio's rules, exactly: read and write until `WouldBlock`; expect spurious wake-ups; a
//! non-blocking connect is confirmed with `take_error` and `peer_addr` on the first
//! writable event; WRITABLE interest is registered only while output is queued.
//!
//! ```text
//!   Resolving ──addresses──▶ Connecting(i) ──connected──▶ Negotiating ──ApiVersions──▶ Ready
//!                               │  failed: next address (i+1)     (TLS handshake     │     ▲ ▲
//!                               └──── none left ──▶ closed         runs underneath)  │ SASL│ │ re-auth done
//!                                      (the caller backs off)          Authenticating ◀┘─────┘ │
//!                                                                       Ready, re-auth due ─────┘
//! ```
//!
//! Invariants:
//! 1. Only the connection's own requests (ApiVersions, SaslHandshake, SaslAuthenticate)
//!    travel before it is ready; a component's request is never sent on a connection that
//!    has not authenticated.
//! 2. A re-authentication (KIP-368) starts only when no request is in flight, and requests
//!    handed to the connection meanwhile are held and sent, in order, once it is done.
//! 3. A connection whose setup failed for a reason the user must act on (a refused login, a
//!    certificate not trusted, TLS on one end only) closes with a user-facing error.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use super::handle::SharedMetrics;
use super::secure::{as_user_error, reauth_after, user_error, Reauth, Security, Transport};
use crate::buffer::{FrameBuf, Pool};
use crate::error::ErrorKind;
use crate::link::{Route, Tag, Transmit, Versions};
use crate::protocol::api::api_versions::{self, ApiVersionsRequest};
use crate::protocol::api::Api;
use crate::protocol::error_code::ErrorCode;
use crate::protocol::frame::{self, decode_response, encode_request_frame};
use crate::sasl::{AuthErrorKind, Authenticator, SaslRequest, Step};
use crate::types::{ApiVersion, CorrelationId};

/// Where a connection is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnState {
    /// Waiting for the resolver (job id).
    Resolving(u64),
    /// TCP connect in progress to `addrs[index]`.
    Connecting,
    /// Connected (TLS handshake running underneath, if any); ApiVersions sent, waiting for
    /// the answer.
    Negotiating,
    /// SASL: the handshake and authentication exchange (or, with OAUTHBEARER, waiting for
    /// the first token).
    Authenticating,
    /// Versions known; requests may be sent.
    Ready,
}

/// First allocation for an incoming frame; larger frames grow as their bytes arrive.
const INITIAL_FRAME_BUFFER: usize = 1024 * 1024;

/// A request on the wire awaiting its response.
#[derive(Debug)]
pub struct InFlight {
    /// The API key.
    pub api_key: i16,
    /// The version it was sent at.
    pub version: ApiVersion,
    /// When it times out.
    pub deadline: Instant,
    /// When it was queued (its latency runs from then, as in Java).
    pub sent_at: Instant,
    /// Whose answer it is; `None` for the connection's own ApiVersions.
    pub tag: Option<Tag>,
}

/// What reading produced.
pub enum Outcome {
    /// A complete response to a component's request.
    Response { in_flight: InFlight, body: FrameBuf },
    /// The connection finished negotiating and is ready.
    Ready(Versions),
}

/// One socket to one route.
pub struct Conn {
    pub route: Route,
    pub token: Token,
    pub state: ConnState,
    /// The host, for logs.
    pub host: String,
    addrs: Vec<SocketAddr>,
    addr_index: usize,
    transport: Option<Transport>,
    /// The versions from ApiVersions, while authentication runs.
    versions: Option<Versions>,
    /// The SASL exchange running, if one is.
    auth: Option<Authenticator>,
    reauth: Reauth,
    /// Requests handed over while a re-authentication is due or running.
    held: VecDeque<Transmit>,
    /// When the current setup step (resolving, or connecting to one address) started.
    step_started: Instant,
    api_versions_version: ApiVersion,
    next_correlation: CorrelationId,
    in_flight: HashMap<i32, InFlight>,
    out: VecDeque<Vec<u8>>,
    out_pos: usize,
    writable_registered: bool,
    head: [u8; 4],
    head_len: usize,
    /// The frame being read: `body[..body_len]` is filled; `body` may be longer (a reused
    /// buffer) and grows towards `frame_len` as bytes arrive.
    body: Vec<u8>,
    body_len: usize,
    frame_len: usize,
    pool: Pool,
    client_id: String,
    /// Requests and answers are counted here, under the route's broker.
    metrics: Arc<SharedMetrics>,
}

impl Conn {
    /// A connection waiting for resolver job `job` to give the addresses of `host`.
    #[allow(clippy::too_many_arguments)]
    pub fn resolving(
        route: Route,
        host: &str,
        token: Token,
        job: u64,
        client_id: &str,
        pool: Pool,
        metrics: Arc<SharedMetrics>,
        now: Instant,
    ) -> Conn {
        Conn {
            route,
            token,
            state: ConnState::Resolving(job),
            host: host.to_owned(),
            addrs: Vec::new(),
            addr_index: 0,
            transport: None,
            versions: None,
            auth: None,
            reauth: Reauth::default(),
            held: VecDeque::new(),
            step_started: now,
            api_versions_version: ApiVersion(ApiVersionsRequest::MAX_VERSION),
            next_correlation: CorrelationId(1),
            in_flight: HashMap::new(),
            out: VecDeque::new(),
            out_pos: 0,
            writable_registered: false,
            head: [0; 4],
            head_len: 0,
            body: Vec::new(),
            body_len: 0,
            frame_len: 0,
            pool,
            client_id: client_id.to_owned(),
            metrics,
        }
    }

    /// The resolver answered: connect to the first address that accepts a connect.
    pub fn resolved(
        &mut self,
        addrs: Vec<SocketAddr>,
        registry: &Registry,
        now: Instant,
    ) -> io::Result<()> {
        if addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} resolves to no address", self.host),
            ));
        }
        self.addrs = addrs;
        self.addr_index = 0;
        self.connect_current(registry, now)
    }

    /// Starts a connect to the current address, moving on to the next ones while a connect
    /// fails at once.
    fn connect_current(&mut self, registry: &Registry, now: Instant) -> io::Result<()> {
        loop {
            let Some(addr) = self.addrs.get(self.addr_index).copied() else {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("no address of {} accepted a connection", self.host),
                ));
            };
            match TcpStream::connect(addr).and_then(|mut s| {
                registry.register(&mut s, self.token, Interest::READABLE | Interest::WRITABLE)?;
                Ok(s)
            }) {
                Ok(stream) => {
                    self.transport = Some(Transport::Plain(stream));
                    self.writable_registered = true;
                    self.state = ConnState::Connecting;
                    self.step_started = now;
                    log::debug!("connecting to {} at {addr}", self.route);
                    return Ok(());
                }
                Err(e) => {
                    log::debug!("connect to {addr} for {} failed: {e}", self.route);
                    self.addr_index += 1;
                }
            }
        }
    }

    /// The current connect attempt failed or timed out: try the next address, if any.
    /// Returns an error when none is left.
    pub fn next_address(&mut self, registry: &Registry, now: Instant, why: &str) -> io::Result<()> {
        if let Some(mut t) = self.transport.take() {
            let _ = registry.deregister(t.socket());
        }
        let failed = self.addrs.get(self.addr_index).copied();
        self.addr_index += 1;
        if self.addr_index >= self.addrs.len() {
            return Err(io::Error::other(match failed {
                Some(a) => format!("{a}: {why}"),
                None => why.to_owned(),
            }));
        }
        log::debug!("{}: {why}; trying the next address", self.route);
        self.connect_current(registry, now)
    }

    /// When the current setup step times out: resolving, connecting to one address, or
    /// everything between the TCP connect and ready (TLS handshake, ApiVersions, SASL).
    pub fn setup_deadline(&self, timeout: Duration) -> Option<Instant> {
        match self.state {
            ConnState::Ready => None,
            _ => Some(self.step_started + timeout),
        }
    }

    /// What the connection is doing while it is not ready, for timeout messages.
    pub fn setup_step(&self) -> &'static str {
        match self.state {
            ConnState::Resolving(_) => "resolving",
            ConnState::Connecting => "connecting",
            ConnState::Negotiating
                if self
                    .transport
                    .as_ref()
                    .is_some_and(Transport::is_handshaking) =>
            {
                "the TLS handshake"
            }
            ConnState::Negotiating => "ApiVersions",
            ConnState::Authenticating if self.auth.is_none() => "waiting for an OAUTHBEARER token",
            ConnState::Authenticating => "SASL authentication",
            ConnState::Ready => "ready",
        }
    }

    /// Where we connected, for messages: `host:port`.
    pub fn address(&self) -> String {
        match self.addrs.get(self.addr_index) {
            Some(a) => format!("{} ({a})", self.host),
            None => self.host.clone(),
        }
    }

    /// Closes the socket and returns every request that was in flight (and held).
    pub fn close(&mut self, registry: &Registry) -> Vec<InFlight> {
        if let Some(mut t) = self.transport.take() {
            let _ = registry.deregister(t.socket());
        }
        self.out.clear();
        let held = self.held.drain(..).map(|t| InFlight {
            api_key: t.api_key,
            version: t.version,
            deadline: self.step_started,
            sent_at: self.step_started,
            tag: Some(t.tag),
        });
        let mut failed: Vec<InFlight> = self.in_flight.drain().map(|(_, f)| f).collect();
        failed.extend(held);
        failed
    }

    /// Whether requests may be sent.
    pub fn is_ready(&self) -> bool {
        self.state == ConnState::Ready
    }

    /// Queues a component's request (or holds it while a re-authentication is due).
    pub fn send(&mut self, t: Transmit, now: Instant) {
        if self.reauth.pending {
            self.held.push_back(t);
            return;
        }
        self.queue(
            t.api_key,
            t.version,
            t.flexible,
            &t.body,
            Some(t.tag),
            (now, now + t.timeout),
        );
    }

    /// Queues a request, sent at `at.0` and due by `at.1`.
    fn queue(
        &mut self,
        api_key: i16,
        version: ApiVersion,
        flexible: bool,
        body: &[u8],
        tag: Option<Tag>,
        (sent_at, deadline): (Instant, Instant),
    ) {
        let corr = self.next_correlation;
        self.next_correlation = corr.next();
        let frame = encode_request_frame(
            api_key,
            version.get(),
            flexible,
            corr.0,
            &self.client_id,
            body,
        );
        log::trace!(
            "{} -> api {api_key} v{version} corr {} ({} bytes)",
            self.route,
            corr.0,
            frame.len()
        );
        self.metrics
            .with(|m| m.request_sent(self.route, frame.len(), sent_at));
        self.out.push_back(frame);
        self.in_flight.insert(
            corr.0,
            InFlight {
                api_key,
                version,
                deadline,
                sent_at,
                tag,
            },
        );
    }

    /// Handles readiness. Returns what came in, and an error after which the caller closes
    /// the connection (or, while connecting, tries the next address). What came in before
    /// the error (answers followed at once by the broker closing the connection) is
    /// returned with it, to be handed on before the close fails the rest.
    pub fn ready(
        &mut self,
        registry: &Registry,
        readable: bool,
        writable: bool,
        at: At<'_>,
    ) -> (Vec<Outcome>, io::Result<()>) {
        let mut out = Vec::new();
        let result = self.ready_into(&mut out, registry, readable, writable, at);
        (out, result)
    }

    fn ready_into(
        &mut self,
        out: &mut Vec<Outcome>,
        registry: &Registry,
        readable: bool,
        writable: bool,
        at: At<'_>,
    ) -> io::Result<()> {
        if self.state == ConnState::Connecting {
            if !writable && !readable {
                return Ok(());
            }
            let Some(Transport::Plain(stream)) = self.transport.as_ref() else {
                return Err(not_connected());
            };
            if let Some(e) = stream.take_error()? {
                return Err(e);
            }
            match stream.peer_addr() {
                // TCP's simultaneous open: connecting to a local port nobody listens on
                // can pick that very port as the source and connect the socket to itself.
                // It would read its own requests back as answers (and keep a restarting
                // broker from binding its port): a failed connect, retried as one.
                Ok(peer) if stream.local_addr().is_ok_and(|local| local == peer) => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        format!("the connection to {peer} reached itself: nothing listens there"),
                    ));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(()),
                Err(e) => return Err(e),
            }
            let _ = stream.set_nodelay(true);
            log::debug!("connected to {} ({})", self.route, self.host);
            if let Some(Transport::Plain(sock)) = self.transport.take() {
                let transport = at
                    .security
                    .transport(sock, &self.host)
                    .map_err(io::Error::other)?;
                self.transport = Some(transport);
            }
            self.state = ConnState::Negotiating;
            self.step_started = at.now;
            self.send_api_versions(at);
        }
        if writable || !self.out.is_empty() {
            self.flush()?;
        }
        if readable {
            self.read_frames(out, at)?;
            // A read can finish the TLS handshake: what waited for it can go now.
            if !self.out.is_empty() || self.transport.as_ref().is_some_and(Transport::wants_write) {
                self.flush()?;
            }
        }
        self.update_interest(registry)
    }

    fn send_api_versions(&mut self, at: At<'_>) {
        let v = self.api_versions_version;
        let req = ApiVersionsRequest {
            client_software_name: "kafka-consumer-rs".into(),
            client_software_version: env!("CARGO_PKG_VERSION").into(),
        };
        let t = frame::version_of::<ApiVersionsRequest>(v.get());
        let mut w = crate::protocol::wire::Writer::new();
        crate::protocol::message::Wire::write(&req, &mut w, t);
        self.queue(
            ApiVersionsRequest::KEY,
            v,
            t.flexible,
            &w.into_inner(),
            None,
            (at.now, at.deadline),
        );
    }

    /// Applies an ApiVersions answer: the versions when the connection became ready, `None`
    /// when it retried with an older ApiVersions version.
    fn handle_api_versions(
        &mut self,
        body: &[u8],
        version: ApiVersion,
        at: At<'_>,
    ) -> io::Result<Option<Versions>> {
        match decode_response::<ApiVersionsRequest>(body, version.get()) {
            Ok(resp) if resp.error_code == 0 => {
                log::debug!("{} ready ({} APIs)", self.route, resp.api_keys.len());
                Ok(Some(Versions::new(
                    resp.api_keys
                        .iter()
                        .map(|k| (k.api_key, k.min_version, k.max_version)),
                )))
            }
            Ok(resp) if ErrorCode::from_code(resp.error_code) != ErrorCode::UNSUPPORTED_VERSION => {
                Err(io::Error::other(format!(
                    "ApiVersions failed: {}",
                    ErrorCode::from_code(resp.error_code)
                )))
            }
            _ => {
                // UNSUPPORTED_VERSION (or an undecodable newer body): the broker answers with
                // a v0 body listing its range; retry with the highest version it offers.
                match api_versions::fallback_version(body) {
                    Some(v) if v < version.get() && v >= 0 => {
                        self.api_versions_version = ApiVersion(v);
                        self.send_api_versions(at);
                        Ok(None)
                    }
                    _ => Err(io::Error::other(format!(
                        "the broker speaks no ApiVersions version this client does (v0-v{})",
                        ApiVersionsRequest::MAX_VERSION
                    ))),
                }
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        let Some(transport) = self.transport.as_mut() else {
            return Ok(());
        };
        let handshaking = transport.is_handshaking();
        let result = Self::write_out(transport, &mut self.out, &mut self.out_pos)
            .and_then(|()| transport.flush_tls());
        match result {
            Err(e) if handshaking => Err(self.tls_failure(e)),
            r => r,
        }
    }

    fn write_out(
        transport: &mut Transport,
        out: &mut VecDeque<Vec<u8>>,
        out_pos: &mut usize,
    ) -> io::Result<()> {
        while let Some(front) = out.front() {
            match transport.write(&front[*out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    *out_pos += n;
                    if *out_pos == front.len() {
                        out.pop_front();
                        *out_pos = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Flushes queued output and keeps WRITABLE interest only while output remains.
    pub fn flush_and_update(&mut self, registry: &Registry) -> io::Result<()> {
        if !matches!(self.state, ConnState::Resolving(_) | ConnState::Connecting) {
            self.flush()?;
        }
        self.update_interest(registry)
    }

    fn update_interest(&mut self, registry: &Registry) -> io::Result<()> {
        let want_write = self.state == ConnState::Connecting
            || !self.out.is_empty()
            || self.transport.as_ref().is_some_and(Transport::wants_write);
        if want_write != self.writable_registered {
            if let Some(t) = self.transport.as_mut() {
                let s = t.socket();
                let interest = if want_write {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                registry.reregister(s, self.token, interest)?;
                self.writable_registered = want_write;
            }
        }
        Ok(())
    }

    fn read_frames(&mut self, out: &mut Vec<Outcome>, at: At<'_>) -> io::Result<()> {
        loop {
            let transport = self.transport.as_mut().ok_or_else(not_connected)?;
            let handshaking = transport.is_handshaking();
            let res = if self.head_len < 4 {
                transport.read(&mut self.head[self.head_len..])
            } else {
                let end = self.body.len().min(self.frame_len);
                transport.read(&mut self.body[self.body_len..end])
            };
            match res {
                Ok(0) if handshaking => {
                    return Err(self.tls_failure(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the broker closed the connection",
                    )))
                }
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        self.closed_while(),
                    ))
                }
                Ok(n) if self.head_len < 4 => {
                    self.head_len += n;
                    if self.head_len == 4 {
                        self.check_not_tls()?;
                        let len = frame::frame_len(&self.head)
                            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
                            .unwrap_or(0);
                        if len < 4 {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                "response frame shorter than its header",
                            ));
                        }
                        // The frame gets its own buffer, handed on without a copy. It
                        // grows as bytes arrive, so a hostile length cannot make us
                        // allocate memory the broker never sends.
                        self.frame_len = len;
                        self.body = self.pool.take_for(len);
                        let first = len.min(self.body.len().max(INITIAL_FRAME_BUFFER));
                        if self.body.len() < first {
                            // Exact: a frame is charged by its capacity.
                            self.body.reserve_exact(first - self.body.len());
                            self.body.resize(first, 0);
                        }
                        self.body_len = 0;
                    }
                }
                Ok(n) => {
                    self.body_len += n;
                    if self.body_len == self.body.len() && self.body_len < self.frame_len {
                        let grown = (self.body.len() * 2).min(self.frame_len);
                        self.body.reserve_exact(grown - self.body.len());
                        self.body.resize(grown, 0);
                    } else if self.body_len == self.frame_len {
                        let body = self
                            .pool
                            .frame(std::mem::take(&mut self.body), self.frame_len);
                        self.head_len = 0;
                        self.body_len = 0;
                        self.complete(body, out, at)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // TLS 1.3 servers refuse a client certificate after the client's side of
                // the handshake is done: that alert arrives with the first read.
                Err(e) if handshaking || as_user_error(&e).is_some() => {
                    return Err(self.tls_failure(e))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A plain connection whose first answer starts like a TLS record (a handshake or an
    /// alert) reached a TLS listener: say so, rather than read a TLS record header as a
    /// frame length.
    fn check_not_tls(&self) -> io::Result<()> {
        let plain = !self.transport.as_ref().is_some_and(Transport::is_tls);
        if plain
            && self.state == ConnState::Negotiating
            && matches!(self.head, [0x14..=0x17, 0x03, 0..=0x04, _])
        {
            return Err(user_error(
                ErrorKind::Tls,
                format!(
                    "{} answered with TLS: it is a TLS listener, and this consumer has \
                     security.protocol=PLAINTEXT or SASL_PLAINTEXT (use SSL or SASL_SSL)",
                    self.address()
                ),
            ));
        }
        Ok(())
    }

    /// The TLS handshake failed with `e`: a user-facing error that names the broker.
    fn tls_failure(&self, e: io::Error) -> io::Error {
        if let Some(err) = as_user_error(&e) {
            return user_error(
                err.kind(),
                format!("TLS handshake with {} failed: {err}", self.address()),
            );
        }
        let why = if e.kind() == io::ErrorKind::UnexpectedEof {
            "the broker closed the connection during the TLS handshake: is it a TLS listener? \
             (a PLAINTEXT or SASL_PLAINTEXT listener needs security.protocol=PLAINTEXT or \
             SASL_PLAINTEXT)"
                .to_owned()
        } else {
            e.to_string()
        };
        user_error(
            ErrorKind::Tls,
            format!("TLS handshake with {} failed: {why}", self.address()),
        )
    }

    /// Why a connection closed by the broker closed, as far as we can tell.
    fn closed_while(&self) -> String {
        match self.state {
            ConnState::Authenticating => format!(
                "the broker closed the connection during SASL authentication ({})",
                self.address()
            ),
            _ => "the broker closed the connection".to_owned(),
        }
    }

    fn complete(&mut self, body: FrameBuf, out: &mut Vec<Outcome>, at: At<'_>) -> io::Result<()> {
        let corr = frame::correlation_id(&body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        let Some(in_flight) = self.in_flight.remove(&corr) else {
            // Kafka answers in order on a connection; an unknown id means we lost sync.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("response with unknown correlation id {corr}"),
            ));
        };
        log::trace!(
            "{} <- api {} corr {corr} ({} bytes)",
            self.route,
            in_flight.api_key,
            body.len()
        );
        let latency = at.now.saturating_duration_since(in_flight.sent_at);
        // The frame and its 4-byte size, as the bytes read off the socket.
        let bytes = body.len() + 4;
        self.metrics
            .with(|m| m.response_received(self.route, bytes, latency, at.now));
        match in_flight.tag {
            Some(_) => out.push(Outcome::Response { in_flight, body }),
            None if in_flight.api_key == ApiVersionsRequest::KEY => {
                if let Some(v) = self.handle_api_versions(&body, in_flight.version, at)? {
                    if at.security.uses_sasl() {
                        self.versions = Some(v);
                        self.state = ConnState::Authenticating;
                        self.start_auth(at)?;
                    } else {
                        self.state = ConnState::Ready;
                        out.push(Outcome::Ready(v));
                    }
                }
            }
            None => self.handle_auth(&body, out, at)?,
        }
        if self.reauth.pending && self.auth.is_none() && self.in_flight.is_empty() {
            self.start_auth(at)?;
        }
        Ok(())
    }

    /// Starts a SASL exchange (a login, or a re-authentication), unless the OAUTHBEARER
    /// token has not arrived yet ([`Conn::token_arrived`] starts it then).
    fn start_auth(&mut self, at: At<'_>) -> io::Result<()> {
        let Some(versions) = &self.versions else {
            return Err(not_connected());
        };
        let Some(mut auth) = at.security.authenticator() else {
            log::debug!("{}: waiting for an OAUTHBEARER token", self.route);
            return Ok(());
        };
        let req = auth.start(versions).map_err(|e| self.auth_failure(e))?;
        log::debug!(
            "{}: SASL {} {}",
            self.route,
            auth.mechanism(),
            if self.state == ConnState::Ready {
                "re-authentication"
            } else {
                "authentication"
            }
        );
        self.queue_sasl(&req, at);
        self.auth = Some(auth);
        Ok(())
    }

    /// Queues one of the authenticator's requests (the connection's own: no tag).
    fn queue_sasl(&mut self, req: &SaslRequest, at: At<'_>) {
        self.queue(
            req.api_key,
            req.version,
            req.flexible,
            &req.body,
            None,
            (at.now, at.deadline),
        );
    }

    /// An OAUTHBEARER token arrived: a connection waiting for one logs in now.
    pub fn token_arrived(&mut self, registry: &Registry, at: At<'_>) -> io::Result<()> {
        if self.state == ConnState::Authenticating && self.auth.is_none() {
            self.start_auth(at)?;
            self.flush()?;
            self.update_interest(registry)?;
        }
        Ok(())
    }

    /// The broker answered the SASL exchange.
    fn handle_auth(&mut self, body: &[u8], out: &mut Vec<Outcome>, at: At<'_>) -> io::Result<()> {
        let Some(auth) = self.auth.as_mut() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "an answer to a SASL request that was not sent",
            ));
        };
        let mechanism = auth.mechanism();
        match auth.handle_response(body) {
            Ok(Step::Send(req)) => self.queue_sasl(&req, at),
            Ok(Step::Done { session_lifetime }) => {
                self.auth = None;
                self.reauth.due_at = session_lifetime.map(|l| at.now + reauth_after(l, jitter()));
                if let Some(l) = session_lifetime {
                    log::debug!(
                        "{}: authenticated with {mechanism}; session of {l:?}",
                        self.route
                    );
                }
                if self.state == ConnState::Authenticating {
                    self.state = ConnState::Ready;
                    let versions = self.versions.take().unwrap_or_default();
                    self.versions = Some(versions.clone());
                    out.push(Outcome::Ready(versions));
                } else {
                    self.reauth.pending = false;
                    while let Some(t) = self.held.pop_front() {
                        self.send(t, at.now);
                    }
                }
            }
            Err(e) => return Err(self.auth_failure(e)),
        }
        Ok(())
    }

    /// A failed SASL exchange: the authenticator's message (which names the mechanism) and
    /// the broker.
    fn auth_failure(&self, e: crate::sasl::AuthError) -> io::Error {
        let kind = match e.kind {
            AuthErrorKind::Failed | AuthErrorKind::Unsupported => ErrorKind::Authentication,
            AuthErrorKind::Protocol => ErrorKind::Protocol,
        };
        user_error(kind, format!("broker {}: {}", self.address(), e.message))
    }

    /// When this connection's SASL session must be renewed, if the broker limited it.
    pub fn reauth_due(&self) -> Option<Instant> {
        match self.state {
            ConnState::Ready if !self.reauth.pending => self.reauth.due_at,
            _ => None,
        }
    }

    /// The session is about to end: hold new requests, and re-authenticate as soon as the
    /// ones in flight are answered.
    pub fn begin_reauth(&mut self, registry: &Registry, at: At<'_>) -> io::Result<()> {
        self.reauth.pending = true;
        self.reauth.due_at = None;
        if self.in_flight.is_empty() && self.auth.is_none() {
            self.start_auth(at)?;
            self.flush()?;
            self.update_interest(registry)?;
        }
        Ok(())
    }

    /// The earliest deadline among in-flight requests.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.in_flight.values().map(|f| f.deadline).min()
    }
}

/// The moment a connection is driven at, and what it needs then.
#[derive(Clone, Copy)]
pub struct At<'a> {
    pub now: Instant,
    /// When a request sent now times out.
    pub deadline: Instant,
    pub security: &'a Security,
}

/// A number in `0.0..1.0` that differs between calls (re-authentication spreading).
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1000) / 1000.0
}

fn not_connected() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "not connected")
}
