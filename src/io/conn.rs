//! One broker connection: non-blocking connect, framed reads straight into their own
//! buffers, queued writes, version negotiation, correlation ids.
//!
//! mio's rules, exactly: read and write until `WouldBlock`; expect spurious wake-ups; a
//! non-blocking connect is confirmed with `take_error` and `peer_addr` on the first
//! writable event; WRITABLE interest is registered only while output is queued.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Instant;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::buffer::{FrameBuf, Pool};
use crate::protocol::api::api_versions::{self, ApiVersionsRequest};
use crate::protocol::api::{negotiate, Api};
use crate::protocol::error_code::ErrorCode;
use crate::protocol::frame::{self, decode_response, encode_request};

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// TCP connect in progress.
    Connecting,
    /// Connected; ApiVersions sent, waiting for the answer.
    Negotiating,
    /// Versions known; requests may be sent.
    Ready,
    /// Closed; may reconnect after the backoff.
    Closed,
}

/// First allocation for an incoming frame; larger frames grow as their bytes arrive.
const INITIAL_FRAME_BUFFER: usize = 1024 * 1024;

/// A request on the wire awaiting its response.
#[derive(Debug)]
pub struct InFlight<K> {
    /// The API key.
    pub api_key: i16,
    /// The version it was sent at.
    pub version: i16,
    /// When it times out.
    pub deadline: Instant,
    /// What the caller wants done with the answer.
    pub kind: K,
}

/// A broker connection. `K` is the caller's tag for in-flight requests.
pub struct Conn<K> {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
    pub token: Token,
    pub state: ConnState,
    stream: Option<TcpStream>,
    connect_started: Instant,
    /// Supported version ranges by API key, from ApiVersions.
    versions: HashMap<i16, (i16, i16)>,
    api_versions_version: i16,
    next_correlation: i32,
    pub in_flight: HashMap<i32, InFlight<K>>,
    out: VecDeque<Vec<u8>>,
    out_pos: usize,
    writable_registered: bool,
    head: [u8; 4],
    head_len: usize,
    /// The frame being read: `body[..body_len]` is filled; `body` may be longer (a reused
    /// buffer) and grows towards `frame_len` as bytes arrive.
    body: Vec<u8>,
    body_len: usize,
    pool: Pool,
    /// Size of the frame being read (the buffer grows towards it as bytes arrive).
    frame_len: usize,
    /// Consecutive failed attempts, for the reconnect backoff.
    pub failures: u32,
    /// Not before this instant may a closed connection reconnect.
    pub retry_at: Option<Instant>,
    client_id: String,
}

/// What reading produced.
pub enum ReadOutcome<K> {
    /// A complete response to one of our requests.
    Response {
        in_flight: InFlight<K>,
        body: FrameBuf,
    },
}

impl<K> Conn<K> {
    pub fn new(
        node_id: i32,
        host: &str,
        port: u16,
        token: Token,
        client_id: &str,
        pool: Pool,
    ) -> Conn<K> {
        Conn {
            node_id,
            host: host.to_owned(),
            port,
            token,
            state: ConnState::Closed,
            stream: None,
            connect_started: Instant::now(),
            versions: HashMap::new(),
            api_versions_version: ApiVersionsRequest::MAX_VERSION,
            next_correlation: 1,
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
            failures: 0,
            retry_at: None,
            client_id: client_id.to_owned(),
        }
    }

    /// Starts a non-blocking connect.
    pub fn connect(&mut self, registry: &Registry, now: Instant) -> io::Result<()> {
        let addr: SocketAddr = (self.host.as_str(), self.port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "host has no address"))?;
        let mut stream = TcpStream::connect(addr)?;
        registry.register(
            &mut stream,
            self.token,
            Interest::READABLE | Interest::WRITABLE,
        )?;
        self.writable_registered = true;
        self.stream = Some(stream);
        self.state = ConnState::Connecting;
        self.connect_started = now;
        log::debug!(
            "connecting to node {} at {}:{}",
            self.node_id,
            self.host,
            self.port
        );
        Ok(())
    }

    /// When the connect attempt started.
    pub fn connect_started(&self) -> Instant {
        self.connect_started
    }

    /// Closes the socket and returns every request that was in flight.
    pub fn close(&mut self, registry: &Registry) -> Vec<InFlight<K>> {
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(&mut s);
        }
        self.state = ConnState::Closed;
        self.out.clear();
        self.out_pos = 0;
        self.head_len = 0;
        self.body = Vec::new();
        self.body_len = 0;
        self.writable_registered = false;
        self.in_flight.drain().map(|(_, f)| f).collect()
    }

    /// Whether requests may be sent.
    pub fn is_ready(&self) -> bool {
        self.state == ConnState::Ready
    }

    /// The version to use for API `A`, if the broker supports one we do.
    pub fn version<A: Api>(&self) -> Option<i16> {
        let (lo, hi) = *self.versions.get(&A::KEY)?;
        negotiate::<A>(lo, hi)
    }

    /// Queues a request at version `v`. Returns its correlation id.
    pub fn send<A: Api>(&mut self, req: &A, v: i16, kind: K, deadline: Instant) -> i32 {
        let corr = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1).max(1);
        let frame = encode_request(req, v, corr, &self.client_id);
        log::trace!(
            "node {} -> {} v{} corr {} ({} bytes)",
            self.node_id,
            A::NAME,
            v,
            corr,
            frame.len()
        );
        self.out.push_back(frame);
        self.in_flight.insert(
            corr,
            InFlight {
                api_key: A::KEY,
                version: v,
                deadline,
                kind,
            },
        );
        corr
    }

    /// Handles readiness. Returns complete responses (to be dispatched by the caller) or an
    /// error after which the caller must close the connection.
    pub fn ready(
        &mut self,
        registry: &Registry,
        readable: bool,
        writable: bool,
        api_versions_kind: impl Fn() -> K,
        deadline: Instant,
    ) -> io::Result<Vec<ReadOutcome<K>>> {
        let mut out = Vec::new();
        if self.state == ConnState::Connecting {
            if !writable && !readable {
                return Ok(out);
            }
            let stream = self.stream.as_ref().ok_or_else(not_connected)?;
            if let Some(e) = stream.take_error()? {
                return Err(e);
            }
            match stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(out),
                Err(e) => return Err(e),
            }
            let _ = stream.set_nodelay(true);
            log::debug!(
                "connected to node {} at {}:{}",
                self.node_id,
                self.host,
                self.port
            );
            self.state = ConnState::Negotiating;
            self.send_api_versions(api_versions_kind(), deadline);
        }
        if writable || !self.out.is_empty() {
            self.flush()?;
        }
        if readable {
            self.read_frames(&mut out)?;
        }
        self.update_interest(registry)?;
        Ok(out)
    }

    fn send_api_versions(&mut self, kind: K, deadline: Instant) {
        let v = self.api_versions_version;
        let req = ApiVersionsRequest {
            client_software_name: "kafka-consumer-rs".into(),
            client_software_version: env!("CARGO_PKG_VERSION").into(),
        };
        self.send(&req, v, kind, deadline);
    }

    /// Applies an ApiVersions answer. `Ok(true)` when the connection became ready,
    /// `Ok(false)` when it retried with an older version.
    pub fn handle_api_versions(
        &mut self,
        body: &[u8],
        version: i16,
        kind: K,
        deadline: Instant,
    ) -> Result<bool, String> {
        match decode_response::<ApiVersionsRequest>(body, version) {
            Ok(resp) if resp.error_code == 0 => {
                self.versions = resp
                    .api_keys
                    .iter()
                    .map(|k| (k.api_key, (k.min_version, k.max_version)))
                    .collect();
                self.state = ConnState::Ready;
                self.failures = 0;
                log::debug!("node {} ready ({} APIs)", self.node_id, self.versions.len());
                Ok(true)
            }
            Ok(resp) if ErrorCode::from_code(resp.error_code) != ErrorCode::UNSUPPORTED_VERSION => {
                Err(format!(
                    "ApiVersions failed: {}",
                    ErrorCode::from_code(resp.error_code)
                ))
            }
            _ => {
                // UNSUPPORTED_VERSION (or an undecodable newer body): the broker answers with
                // a v0 body listing its range; retry with the highest version it offers.
                match api_versions::fallback_version(body) {
                    Some(v) if v < version => {
                        self.api_versions_version = v;
                        self.send_api_versions(kind, deadline);
                        Ok(false)
                    }
                    _ => Err("ApiVersions: no common version".into()),
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
        if self.state != ConnState::Connecting {
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

    fn read_frames(&mut self, out: &mut Vec<ReadOutcome<K>>) -> io::Result<()> {
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
                        "broker closed the connection",
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
                        self.body = self.pool.take();
                        let first = len.min(self.body.len().max(INITIAL_FRAME_BUFFER));
                        if self.body.len() < first {
                            self.body.resize(first, 0);
                        }
                        self.body_len = 0;
                    }
                }
                Ok(n) => {
                    self.body_len += n;
                    if self.body_len == self.body.len() && self.body_len < self.frame_len {
                        let grown = (self.body.len() * 2).min(self.frame_len);
                        self.body.resize(grown, 0);
                    } else if self.body_len == self.frame_len {
                        let body = self
                            .pool
                            .frame(std::mem::take(&mut self.body), self.frame_len);
                        self.head_len = 0;
                        self.body_len = 0;
                        self.complete(body, out)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn complete(&mut self, body: FrameBuf, out: &mut Vec<ReadOutcome<K>>) -> io::Result<()> {
        let corr = frame::correlation_id(&body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        match self.in_flight.remove(&corr) {
            Some(in_flight) => {
                log::trace!(
                    "node {} <- api {} corr {} ({} bytes)",
                    self.node_id,
                    in_flight.api_key,
                    corr,
                    body.len()
                );
                out.push(ReadOutcome::Response { in_flight, body });
                Ok(())
            }
            // Kafka answers in order on a connection; an unknown id means we lost sync.
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("response with unknown correlation id {corr}"),
            )),
        }
    }

    /// The earliest deadline among in-flight requests.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.in_flight.values().map(|f| f.deadline).min()
    }
}

fn not_connected() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "not connected")
}
