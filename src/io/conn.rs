//! One socket: non-blocking connect to each resolved address in turn, ApiVersions
//! negotiation, framed reads straight into their own buffers, queued writes, correlation
//! ids.
//!
//! mio's rules, exactly: read and write until `WouldBlock`; expect spurious wake-ups; a
//! non-blocking connect is confirmed with `take_error` and `peer_addr` on the first
//! writable event; WRITABLE interest is registered only while output is queued.
//!
//! ```text
//!   Resolving ──addresses──▶ Connecting(i) ──connected──▶ Negotiating ──ApiVersions──▶ Ready
//!                               │  failed: next address (i+1)
//!                               └──── none left ──▶ closed (the caller backs off)
//! ```

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::buffer::{FrameBuf, Pool};
use crate::link::{Route, Tag, Transmit, Versions};
use crate::protocol::api::api_versions::{self, ApiVersionsRequest};
use crate::protocol::api::Api;
use crate::protocol::error_code::ErrorCode;
use crate::protocol::frame::{self, decode_response, encode_request_frame};
use crate::types::CorrelationId;

/// Where a connection is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnState {
    /// Waiting for the resolver (job id).
    Resolving(u64),
    /// TCP connect in progress to `addrs[index]`.
    Connecting,
    /// Connected; ApiVersions sent, waiting for the answer.
    Negotiating,
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
    pub version: i16,
    /// When it times out.
    pub deadline: Instant,
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
    stream: Option<TcpStream>,
    /// When the current setup step (resolving, or connecting to one address) started.
    step_started: Instant,
    api_versions_version: i16,
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
}

impl Conn {
    /// A connection waiting for resolver job `job` to give the addresses of `host`.
    pub fn resolving(
        route: Route,
        host: &str,
        token: Token,
        job: u64,
        client_id: &str,
        pool: Pool,
        now: Instant,
    ) -> Conn {
        Conn {
            route,
            token,
            state: ConnState::Resolving(job),
            host: host.to_owned(),
            addrs: Vec::new(),
            addr_index: 0,
            stream: None,
            step_started: now,
            api_versions_version: ApiVersionsRequest::MAX_VERSION,
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
                    self.stream = Some(stream);
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
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(&mut s);
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

    /// When the current setup step (resolving or connecting) times out.
    pub fn setup_deadline(&self, timeout: Duration) -> Option<Instant> {
        match self.state {
            ConnState::Resolving(_) | ConnState::Connecting => Some(self.step_started + timeout),
            _ => None,
        }
    }

    /// Closes the socket and returns every request that was in flight.
    pub fn close(&mut self, registry: &Registry) -> Vec<InFlight> {
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(&mut s);
        }
        self.out.clear();
        self.in_flight.drain().map(|(_, f)| f).collect()
    }

    /// Whether requests may be sent.
    pub fn is_ready(&self) -> bool {
        self.state == ConnState::Ready
    }

    /// Queues a component's request.
    pub fn send(&mut self, t: Transmit, now: Instant) {
        self.queue(
            t.api_key,
            t.version,
            t.flexible,
            &t.body,
            Some(t.tag),
            now + t.timeout,
        );
    }

    fn queue(
        &mut self,
        api_key: i16,
        version: i16,
        flexible: bool,
        body: &[u8],
        tag: Option<Tag>,
        deadline: Instant,
    ) {
        let corr = self.next_correlation;
        self.next_correlation = corr.next();
        let frame = encode_request_frame(api_key, version, flexible, corr.0, &self.client_id, body);
        log::trace!(
            "{} -> api {api_key} v{version} corr {} ({} bytes)",
            self.route,
            corr.0,
            frame.len()
        );
        self.out.push_back(frame);
        self.in_flight.insert(
            corr.0,
            InFlight {
                api_key,
                version,
                deadline,
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
        deadline: Instant,
    ) -> (Vec<Outcome>, io::Result<()>) {
        let mut out = Vec::new();
        let result = self.ready_into(&mut out, registry, readable, writable, deadline);
        (out, result)
    }

    fn ready_into(
        &mut self,
        out: &mut Vec<Outcome>,
        registry: &Registry,
        readable: bool,
        writable: bool,
        deadline: Instant,
    ) -> io::Result<()> {
        if self.state == ConnState::Connecting {
            if !writable && !readable {
                return Ok(());
            }
            let stream = self.stream.as_ref().ok_or_else(not_connected)?;
            if let Some(e) = stream.take_error()? {
                return Err(e);
            }
            match stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(()),
                Err(e) => return Err(e),
            }
            let _ = stream.set_nodelay(true);
            log::debug!("connected to {} ({})", self.route, self.host);
            self.state = ConnState::Negotiating;
            self.send_api_versions(deadline);
        }
        if writable || !self.out.is_empty() {
            self.flush()?;
        }
        if readable {
            self.read_frames(out, deadline)?;
        }
        self.update_interest(registry)
    }

    fn send_api_versions(&mut self, deadline: Instant) {
        let v = self.api_versions_version;
        let req = ApiVersionsRequest {
            client_software_name: "kafka-consumer-rs".into(),
            client_software_version: env!("CARGO_PKG_VERSION").into(),
        };
        let t = frame::version_of::<ApiVersionsRequest>(v);
        let mut w = crate::protocol::wire::Writer::new();
        crate::protocol::message::Wire::write(&req, &mut w, t);
        self.queue(
            ApiVersionsRequest::KEY,
            v,
            t.flexible,
            &w.into_inner(),
            None,
            deadline,
        );
    }

    /// Applies an ApiVersions answer: the versions when the connection became ready, `None`
    /// when it retried with an older ApiVersions version.
    fn handle_api_versions(
        &mut self,
        body: &[u8],
        version: i16,
        deadline: Instant,
    ) -> io::Result<Option<Versions>> {
        match decode_response::<ApiVersionsRequest>(body, version) {
            Ok(resp) if resp.error_code == 0 => {
                self.state = ConnState::Ready;
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
                    Some(v) if v < version && v >= 0 => {
                        self.api_versions_version = v;
                        self.send_api_versions(deadline);
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
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        while let Some(front) = self.out.front() {
            match stream.write(&front[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out_pos += n;
                    if self.out_pos == front.len() {
                        self.out.pop_front();
                        self.out_pos = 0;
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
        if matches!(self.state, ConnState::Negotiating | ConnState::Ready) {
            self.flush()?;
        }
        self.update_interest(registry)
    }

    fn update_interest(&mut self, registry: &Registry) -> io::Result<()> {
        let want_write = self.state == ConnState::Connecting || !self.out.is_empty();
        if want_write != self.writable_registered {
            if let Some(s) = self.stream.as_mut() {
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

    fn read_frames(&mut self, out: &mut Vec<Outcome>, deadline: Instant) -> io::Result<()> {
        loop {
            let stream = self.stream.as_mut().ok_or_else(not_connected)?;
            let res = if self.head_len < 4 {
                stream.read(&mut self.head[self.head_len..])
            } else {
                let end = self.body.len().min(self.frame_len);
                stream.read(&mut self.body[self.body_len..end])
            };
            match res {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the broker closed the connection",
                    ))
                }
                Ok(n) if self.head_len < 4 => {
                    self.head_len += n;
                    if self.head_len == 4 {
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
                        self.complete(body, out, deadline)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn complete(
        &mut self,
        body: FrameBuf,
        out: &mut Vec<Outcome>,
        deadline: Instant,
    ) -> io::Result<()> {
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
        match in_flight.tag {
            Some(_) => out.push(Outcome::Response { in_flight, body }),
            None => {
                if let Some(v) = self.handle_api_versions(&body, in_flight.version, deadline)? {
                    out.push(Outcome::Ready(v));
                }
            }
        }
        Ok(())
    }

    /// The earliest deadline among in-flight requests.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.in_flight.values().map(|f| f.deadline).min()
    }
}

fn not_connected() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "not connected")
}
