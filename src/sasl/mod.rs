//! SASL authentication of one connection (KIP-43 with SaslHandshake v1 and
//! SaslAuthenticate, KIP-152), sans-IO: the [`Authenticator`] makes the request bodies and
//! reads the answers; the connection frames, sends and receives them. Mechanisms: PLAIN
//! (RFC 4616), SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677; the `scram` cargo
//! feature), OAUTHBEARER (RFC 7628, KIP-255).
//!
//! ```text
//!          start()                  handshake ok                    last round accepted
//!   Idle ──────────▶ Handshaking ─────────────────▶ Authenticating ───────────────────▶ Done
//!                                                    │         ▲    (SCRAM: v= verified)
//!                                                    └─────────┘
//!                                          another round (Step::Send)
//!
//!   any state ── a refusal, a malformed answer, a misuse ──▶ Failed(error), repeated after
//! ```
//!
//! Rounds of each mechanism (each one SaslAuthenticate request and its answer):
//! - PLAIN: `\0user\0password` → accepted.
//! - SCRAM: client-first → server-first; client-final → server-final (`v=` verified).
//! - OAUTHBEARER: initial response → accepted (empty auth bytes), or a JSON error; after the
//!   JSON error one more round, `\x01` → SASL_AUTHENTICATION_FAILED, reported as Failed.
//!
//! Invariants:
//! 1. One request at a time: [`Authenticator::start`] returns the SaslHandshake request,
//!    and each [`Authenticator::handle_response`] takes the answer to the last request
//!    returned and returns at most one next request. Each answer is decoded as the API and
//!    version of that request, and nothing else.
//! 2. `Done` and `Failed` are terminal. Once an error is returned, every later call returns
//!    that same error; no call after `Done` returns a request.
//! 3. [`Step::Done`] is returned only for a final answer with error code 0 to the last round
//!    of the mechanism, and for SCRAM only after the broker's server signature verified:
//!    the broker's word alone never authenticates it.
//! 4. No secret (password, token, SCRAM salted password, keys or proof) appears in an
//!    [`AuthError`], in a log line or in a `Debug` output; texts from the broker are escaped
//!    and cut ([`broker_text`]). Logging is at trace level, step names only.
//! 5. The work and memory one answer can cause are bounded: allocations are sized by bytes
//!    already received; PBKDF2 runs at most 16384 iterations (Kafka's maximum,
//!    `scram::MAX_ITERATIONS`).
//! 6. Nothing assumes a fresh connection: an authenticator only sees its own requests and
//!    their answers, so re-authentication (KIP-368) runs a new one on a live connection,
//!    from the SaslHandshake on, exactly as the first login.
//!
//! Credentials the mechanism cannot carry (a NUL in a PLAIN password, a token or SASL
//! extension OAUTHBEARER cannot frame, a token for PLAIN) are refused by `start` as
//! [`AuthErrorKind::Unsupported`], before anything is sent.

pub(crate) mod base64;
pub(crate) mod oauthbearer;
#[cfg(feature = "scram")]
pub(crate) mod scram;

use std::fmt;
use std::time::Duration;

use crate::link::Versions;
use crate::protocol::api::sasl_authenticate::{
    AuthBytes, SaslAuthenticateRequest, SaslAuthenticateResponse,
};
use crate::protocol::api::sasl_handshake::SaslHandshakeRequest;
use crate::protocol::api::Api;
use crate::protocol::error_code::ErrorCode;
use crate::protocol::frame::{decode_response, version_of};
use crate::protocol::wire::Writer;
use crate::security::{OAuthBearerToken, SaslMechanism, Secret};
use crate::types::ApiVersion;

/// What a connection authenticates with.
#[derive(Debug, Clone)]
pub(crate) enum Credentials {
    /// PLAIN and SCRAM: a user name and password (the password's `Debug` is redacted).
    Password {
        /// The user name (SCRAM escapes `=` and `,` in it).
        username: String,
        /// The password.
        password: Secret,
    },
    /// OAUTHBEARER: a token from the token provider (its value's `Debug` is redacted).
    Token(OAuthBearerToken),
}

/// A request the connection sends on the authenticator's behalf (never routed to a
/// component): the encoded body of API `api_key` at `version`, to frame with a request
/// header (v2 when `flexible`).
pub(crate) struct SaslRequest {
    /// SaslHandshake (17) or SaslAuthenticate (36).
    pub api_key: i16,
    /// The negotiated version of that API.
    pub version: ApiVersion,
    /// Whether the request header is the flexible one (v2).
    pub flexible: bool,
    /// The encoded request body; may hold the password (PLAIN) or the token (OAUTHBEARER).
    pub body: Vec<u8>,
}

impl SaslRequest {
    /// Encodes `req` at `version`.
    fn new<A: Api>(req: &A, version: ApiVersion) -> SaslRequest {
        let v = version_of::<A>(version.get());
        let mut w = Writer::with_capacity(64);
        req.write(&mut w, v);
        SaslRequest {
            api_key: A::KEY,
            version,
            flexible: v.flexible,
            body: w.into_inner(),
        }
    }
}

/// Shows the body's length only: it may hold a secret.
impl fmt::Debug for SaslRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslRequest")
            .field("api_key", &self.api_key)
            .field("version", &self.version)
            .field("flexible", &self.flexible)
            .field("body", &format_args!("{} bytes", self.body.len()))
            .finish()
    }
}

/// What to do after an answer.
#[derive(Debug)]
pub(crate) enum Step {
    /// Send this request and hand its answer to [`Authenticator::handle_response`].
    Send(SaslRequest),
    /// Authenticated; `session_lifetime`: the broker's KIP-368 limit (None when 0 =
    /// unlimited, or SaslAuthenticate v0).
    Done { session_lifetime: Option<Duration> },
}

/// Why authentication failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthErrorKind {
    /// The broker refused the credentials (SASL_AUTHENTICATION_FAILED with its
    /// error_message, a SCRAM `e=` server-final, an OAUTHBEARER JSON error), or the server's
    /// SCRAM signature did not verify.
    Failed,
    /// The broker does not enable the mechanism (the message lists `enabled_mechanisms`
    /// from UNSUPPORTED_SASL_MECHANISM), or it speaks no SaslHandshake v1 / SaslAuthenticate
    /// version we do, or SCRAM is not compiled in. Also credentials the mechanism cannot
    /// carry (see the module docs).
    Unsupported,
    /// A malformed or lying answer: an undecodable body, a SCRAM server nonce that does not
    /// extend ours, an iteration count below 4096, a bad base64, an unexpected extra round,
    /// ILLEGAL_SASL_STATE.
    Protocol,
}

/// An authentication error: its kind, and a message that names the mechanism and never a
/// secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuthError {
    /// What went wrong, broadly.
    pub kind: AuthErrorKind,
    /// What went wrong, for the user: names the mechanism, never shows a secret.
    pub message: String,
}

impl AuthError {
    /// An error of `kind` saying `message`.
    pub(crate) fn new(kind: AuthErrorKind, message: String) -> AuthError {
        AuthError { kind, message }
    }
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AuthError {}

/// Longest broker text kept in an error message, in characters.
const MAX_BROKER_TEXT: usize = 300;

/// A text from the broker, fit for an error message: control characters escaped, cut to
/// [`MAX_BROKER_TEXT`] characters (with `...` when cut).
pub(crate) fn broker_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_BROKER_TEXT + 8));
    for (n, c) in text.chars().enumerate() {
        if n == MAX_BROKER_TEXT {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// One SaslAuthenticate round in flight: what its answer means.
enum Round {
    /// PLAIN's only round: accepted or refused.
    Plain,
    /// OAUTHBEARER's initial response: accepted, or a JSON error.
    OAuthBearer,
    /// OAUTHBEARER after the broker's JSON error: the `\x01` was sent, the broker's
    /// failure is expected. `status`: the JSON's status, if it had one.
    OAuthBearerRefused { status: Option<String> },
    /// SCRAM's client-first message was sent.
    #[cfg(feature = "scram")]
    ScramFirst(scram::ScramClient),
    /// SCRAM's client-final message was sent.
    #[cfg(feature = "scram")]
    ScramFinal(scram::ScramFinal),
}

impl Round {
    /// The round's name, for trace logs.
    fn name(&self) -> &'static str {
        match self {
            Round::Plain => "PLAIN message",
            Round::OAuthBearer => "OAUTHBEARER initial response",
            Round::OAuthBearerRefused { .. } => "OAUTHBEARER failure acknowledgement",
            #[cfg(feature = "scram")]
            Round::ScramFirst(_) => "SCRAM client-first message",
            #[cfg(feature = "scram")]
            Round::ScramFinal(_) => "SCRAM client-final message",
        }
    }
}

/// Where the exchange is.
enum State {
    /// Not started; the first SaslAuthenticate round, prepared by `new` (or why the
    /// credentials cannot be used).
    Idle(Result<(Round, Vec<u8>), AuthError>),
    /// The SaslHandshake was sent; then the first round with these auth bytes.
    Handshaking { first: Round, auth_bytes: Vec<u8> },
    /// A SaslAuthenticate round was sent.
    Authenticating(Round),
    /// Authenticated.
    Done,
    /// Failed with this error, returned again by every later call.
    Failed(AuthError),
}

impl State {
    /// The state's name, for `Debug`.
    fn name(&self) -> &'static str {
        match self {
            State::Idle(_) => "Idle",
            State::Handshaking { .. } => "Handshaking",
            State::Authenticating(_) => "Authenticating",
            State::Done => "Done",
            State::Failed(_) => "Failed",
        }
    }
}

/// Authenticates one connection with one mechanism, once (see the module docs).
pub(crate) struct Authenticator {
    mechanism: SaslMechanism,
    state: State,
    /// The SaslAuthenticate version, picked by `start` from the broker's ApiVersions.
    authenticate_version: ApiVersion,
}

/// Shows the mechanism and the state's name only.
impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("mechanism", &self.mechanism)
            .field("state", &self.state.name())
            .field("authenticate_version", &self.authenticate_version)
            .finish()
    }
}

impl Authenticator {
    /// An authenticator for `mechanism` with `credentials`. `nonce`: random bytes from the
    /// I/O layer (SCRAM's client nonce is made from them: printable, no ',').
    pub fn new(
        mechanism: SaslMechanism,
        credentials: Credentials,
        nonce: [u8; 24],
    ) -> Authenticator {
        Authenticator {
            mechanism,
            state: State::Idle(first_round(mechanism, &credentials, nonce)),
            authenticate_version: ApiVersion(SaslAuthenticateRequest::MIN_VERSION),
        }
    }

    /// The mechanism.
    pub fn mechanism(&self) -> SaslMechanism {
        self.mechanism
    }

    /// The SaslHandshake request; `versions` is this connection's ApiVersions answer.
    pub fn start(&mut self, versions: &Versions) -> Result<SaslRequest, AuthError> {
        let state = std::mem::replace(&mut self.state, State::Done);
        let result = self.begin(state, versions);
        self.settle(result)
    }

    /// The answer to the last request: the frame after its 4-byte length (what
    /// `decode_response` takes).
    pub fn handle_response(&mut self, body: &[u8]) -> Result<Step, AuthError> {
        let state = std::mem::replace(&mut self.state, State::Done);
        let result = self.advance(state, body);
        self.settle(result)
    }

    /// Stores the next state, or the error as `Failed`; returns the caller's part.
    fn settle<T>(&mut self, result: Result<(State, T), AuthError>) -> Result<T, AuthError> {
        match result {
            Ok((state, out)) => {
                self.state = state;
                Ok(out)
            }
            Err(e) => {
                log::trace!("SASL {}: failed", self.mechanism);
                self.state = State::Failed(e.clone());
                Err(e)
            }
        }
    }

    /// An error of `kind` whose message starts with the mechanism.
    fn error(&self, kind: AuthErrorKind, detail: impl fmt::Display) -> AuthError {
        AuthError::new(kind, format!("SASL {}: {detail}", self.mechanism))
    }

    /// `start` from `state`.
    fn begin(
        &mut self,
        state: State,
        versions: &Versions,
    ) -> Result<(State, SaslRequest), AuthError> {
        let (first, auth_bytes) = match state {
            State::Idle(prepared) => prepared?,
            State::Failed(e) => return Err(e),
            _ => {
                return Err(self.error(
                    AuthErrorKind::Protocol,
                    "the exchange was already started (an authenticator runs once)",
                ))
            }
        };
        if versions.pick::<SaslHandshakeRequest>().is_none() {
            return Err(self.error(
                AuthErrorKind::Unsupported,
                unsupported::<SaslHandshakeRequest>(versions),
            ));
        }
        let Some(v) = versions.pick::<SaslAuthenticateRequest>() else {
            return Err(self.error(
                AuthErrorKind::Unsupported,
                unsupported::<SaslAuthenticateRequest>(versions),
            ));
        };
        self.authenticate_version = v;
        let req = SaslHandshakeRequest {
            mechanism: self.mechanism.name().to_owned(),
        };
        log::trace!("SASL {}: SaslHandshake", self.mechanism);
        Ok((
            State::Handshaking { first, auth_bytes },
            SaslRequest::new(&req, ApiVersion(SaslHandshakeRequest::MAX_VERSION)),
        ))
    }

    /// `handle_response` from `state`.
    fn advance(&mut self, state: State, body: &[u8]) -> Result<(State, Step), AuthError> {
        match state {
            State::Handshaking { first, auth_bytes } => {
                self.handshake_answer(body)?;
                Ok(self.send(first, auth_bytes))
            }
            State::Authenticating(round) => self.authenticate_answer(round, body),
            State::Failed(e) => Err(e),
            State::Idle(_) => Err(self.error(
                AuthErrorKind::Protocol,
                "an answer came before the exchange started",
            )),
            State::Done => Err(self.error(
                AuthErrorKind::Protocol,
                "an answer came after authentication completed",
            )),
        }
    }

    /// The next SaslAuthenticate round: `round` with these bytes.
    fn send(&self, round: Round, auth_bytes: Vec<u8>) -> (State, Step) {
        log::trace!("SASL {}: {}", self.mechanism, round.name());
        let req = SaslAuthenticateRequest {
            auth_bytes: AuthBytes(auth_bytes),
        };
        let req = SaslRequest::new(&req, self.authenticate_version);
        (State::Authenticating(round), Step::Send(req))
    }

    /// Checks the SaslHandshake answer.
    fn handshake_answer(&self, body: &[u8]) -> Result<(), AuthError> {
        let resp = decode_response::<SaslHandshakeRequest>(body, SaslHandshakeRequest::MAX_VERSION)
            .map_err(|e| {
                self.error(
                    AuthErrorKind::Protocol,
                    format_args!("undecodable SaslHandshake answer: {e}"),
                )
            })?;
        match ErrorCode::from_code(resp.error_code) {
            ErrorCode::None => Ok(()),
            ErrorCode::UNSUPPORTED_SASL_MECHANISM => {
                let offered = if resp.mechanisms.is_empty() {
                    "none".to_owned()
                } else {
                    broker_text(&resp.mechanisms.join(", "))
                };
                Err(AuthError::new(
                    AuthErrorKind::Unsupported,
                    format!(
                        "the broker does not enable SASL mechanism {}; it offers {offered}",
                        self.mechanism
                    ),
                ))
            }
            code => Err(self.error(
                AuthErrorKind::Protocol,
                format_args!("the broker answered SaslHandshake with {code}"),
            )),
        }
    }

    /// Handles the answer to SaslAuthenticate round `round`.
    fn authenticate_answer(
        &mut self,
        round: Round,
        body: &[u8],
    ) -> Result<(State, Step), AuthError> {
        let resp =
            decode_response::<SaslAuthenticateRequest>(body, self.authenticate_version.get())
                .map_err(|e| {
                    self.error(
                        AuthErrorKind::Protocol,
                        format_args!("undecodable SaslAuthenticate answer: {e}"),
                    )
                })?;
        let auth_bytes = &resp.auth_bytes.0;
        match round {
            // PLAIN accepts with empty auth bytes; anything there carries no meaning.
            Round::Plain => {
                self.accepted(&resp)?;
                Ok(self.done(&resp))
            }
            Round::OAuthBearer => {
                self.accepted(&resp)?;
                if auth_bytes.is_empty() {
                    return Ok(self.done(&resp));
                }
                log::trace!("SASL {}: the broker refused the token", self.mechanism);
                let status = oauthbearer::error_status(auth_bytes);
                Ok(self.send(
                    Round::OAuthBearerRefused { status },
                    vec![oauthbearer::KVSEP],
                ))
            }
            Round::OAuthBearerRefused { status } => {
                // Whatever the broker says now, it has refused the token (RFC 7628 3.2.3).
                let status = status.map_or_else(
                    || "the broker's error names no status".to_owned(),
                    |s| format!("status {}", broker_text(&s)),
                );
                let reason = resp
                    .error_message
                    .as_deref()
                    .map_or_else(String::new, |r| format!(": {}", broker_text(r)));
                Err(AuthError::new(
                    AuthErrorKind::Failed,
                    format!(
                        "SASL {} authentication failed: the broker refused the token \
                         ({status}){reason}",
                        self.mechanism
                    ),
                ))
            }
            #[cfg(feature = "scram")]
            Round::ScramFirst(client) => {
                self.accepted(&resp)?;
                let last = client.server_first(auth_bytes)?;
                let client_final = last.client_final().to_vec();
                Ok(self.send(Round::ScramFinal(last), client_final))
            }
            #[cfg(feature = "scram")]
            Round::ScramFinal(last) => {
                self.accepted(&resp)?;
                last.server_final(auth_bytes)?;
                Ok(self.done(&resp))
            }
        }
    }

    /// `Ok` if the SaslAuthenticate answer has no error code; else the error it means.
    fn accepted(&self, resp: &SaslAuthenticateResponse) -> Result<(), AuthError> {
        let reason = resp.error_message.as_deref().map(broker_text);
        match ErrorCode::from_code(resp.error_code) {
            ErrorCode::None => Ok(()),
            ErrorCode::SASL_AUTHENTICATION_FAILED => {
                let reason = reason.unwrap_or_else(|| "the broker gave no reason".into());
                Err(AuthError::new(
                    AuthErrorKind::Failed,
                    format!("SASL {} authentication failed: {reason}", self.mechanism),
                ))
            }
            code => {
                let reason = reason.map_or_else(String::new, |r| format!(": {r}"));
                Err(self.error(
                    AuthErrorKind::Protocol,
                    format_args!("the broker answered SaslAuthenticate with {code}{reason}"),
                ))
            }
        }
    }

    /// Authenticated by the final answer `resp`.
    fn done(&self, resp: &SaslAuthenticateResponse) -> (State, Step) {
        log::trace!("SASL {}: authenticated", self.mechanism);
        // v0 has no lifetime (it reads as 0); 0 means none, and a negative one is no limit
        // we could honour either.
        let session_lifetime = (resp.session_lifetime_ms > 0)
            .then(|| Duration::from_millis(resp.session_lifetime_ms as u64));
        (State::Done, Step::Done { session_lifetime })
    }
}

/// The text for a broker that speaks no version of `A` we do.
fn unsupported<A: Api>(versions: &Versions) -> String {
    match versions.range::<A>() {
        Some((lo, hi)) => format!(
            "the broker speaks {} v{lo}-v{hi}, this client needs v{}-v{} (Kafka 1.0 or later)",
            A::NAME,
            A::MIN_VERSION,
            A::MAX_VERSION
        ),
        None => format!(
            "the broker does not support the {} API (Kafka 1.0 or later is needed)",
            A::NAME
        ),
    }
}

/// The first SaslAuthenticate round of `mechanism`, and its auth bytes; or why these
/// credentials cannot be used with it.
fn first_round(
    mechanism: SaslMechanism,
    credentials: &Credentials,
    nonce: [u8; 24],
) -> Result<(Round, Vec<u8>), AuthError> {
    let unsupported = |detail: &str| {
        AuthError::new(
            AuthErrorKind::Unsupported,
            format!("SASL {mechanism}: {detail}"),
        )
    };
    match (mechanism, credentials) {
        (SaslMechanism::Plain, Credentials::Password { username, password }) => {
            // RFC 4616: message = [authzid] NUL authcid NUL passwd, none holding a NUL.
            if username.contains('\0') || password.expose().contains('\0') {
                return Err(unsupported(
                    "the user name or password contains a NUL character, which PLAIN cannot carry",
                ));
            }
            let mut m = Vec::with_capacity(2 + username.len() + password.expose().len());
            m.push(0);
            m.extend_from_slice(username.as_bytes());
            m.push(0);
            m.extend_from_slice(password.expose().as_bytes());
            Ok((Round::Plain, m))
        }
        (SaslMechanism::OAuthBearer, Credentials::Token(token)) => {
            let m = oauthbearer::client_message(token).map_err(|e| unsupported(&e))?;
            Ok((Round::OAuthBearer, m))
        }
        #[cfg(feature = "scram")]
        (
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512,
            Credentials::Password { username, password },
        ) => {
            let hash = scram::ScramHash::of(mechanism)
                .ok_or_else(|| unsupported("not a SCRAM mechanism"))?;
            let client =
                scram::ScramClient::new(hash, username, password, scram::nonce_from(&nonce));
            let m = client.client_first();
            Ok((Round::ScramFirst(client), m))
        }
        #[cfg(not(feature = "scram"))]
        (SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512, _) => {
            let _ = nonce;
            Err(unsupported(
                "SCRAM needs the `scram` cargo feature of kafka-consumer",
            ))
        }
        (SaslMechanism::OAuthBearer, Credentials::Password { .. }) => Err(unsupported(
            "needs a token from an OAuthBearerTokenProvider, not a user name and password",
        )),
        (_, Credentials::Token(_)) => Err(unsupported(
            "needs a user name and password, not an OAUTHBEARER token",
        )),
    }
}

#[cfg(test)]
mod tests;
