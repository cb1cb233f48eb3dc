//! What secures a connection: the TLS client configuration (built once, when the consumer
//! is), the SASL login (its mechanism and credentials; an OAUTHBEARER token arrives from
//! the token thread), and the byte transport a connection reads and writes through, plain
//! or TLS.

use std::io::{self, Read, Write};
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

use crate::config::ConsumerConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::sasl::{Authenticator, Credentials};
use crate::security::{OAuthBearerToken, SaslMechanism};

/// How every connection of one consumer is secured.
pub(crate) struct Security {
    #[cfg(feature = "tls")]
    tls: Option<Arc<rustls::ClientConfig>>,
    sasl: Option<SaslLogin>,
}

/// The SASL mechanism and what it logs in with.
struct SaslLogin {
    mechanism: SaslMechanism,
    /// `None` until the token provider's first token arrives (OAUTHBEARER).
    credentials: Option<Credentials>,
}

impl Security {
    /// From the configuration: loads the TLS material (errors name the setting and file).
    pub fn new(cfg: &ConsumerConfig) -> Result<Security> {
        let protocol = cfg.security_protocol;
        #[cfg(feature = "tls")]
        let tls = if protocol.uses_tls() {
            Some(super::tls::client_config(&cfg.tls)?)
        } else {
            None
        };
        let sasl = if protocol.uses_sasl() {
            let mechanism = cfg
                .sasl
                .mechanism
                .ok_or_else(|| Error::config("sasl.mechanism is required"))?;
            let credentials = match mechanism {
                SaslMechanism::OAuthBearer => None,
                _ => Some(Credentials::Password {
                    username: cfg.sasl.username.clone().unwrap_or_default(),
                    password: cfg.sasl.password.clone().unwrap_or_default(),
                }),
            };
            Some(SaslLogin {
                mechanism,
                credentials,
            })
        } else {
            None
        };
        Ok(Security {
            #[cfg(feature = "tls")]
            tls,
            sasl,
        })
    }

    /// Whether connections authenticate with SASL.
    pub fn uses_sasl(&self) -> bool {
        self.sasl.is_some()
    }

    /// A new OAUTHBEARER token from the token thread: later logins (and re-authentications)
    /// use it.
    pub fn set_token(&mut self, token: OAuthBearerToken) {
        if let Some(s) = &mut self.sasl {
            s.credentials = Some(Credentials::Token(token));
        }
    }

    /// An authenticator for one login; `None` while no token has arrived yet.
    pub fn authenticator(&self) -> Option<Authenticator> {
        let s = self.sasl.as_ref()?;
        let credentials = s.credentials.clone()?;
        Some(Authenticator::new(s.mechanism, credentials, nonce()))
    }

    /// Wraps a newly connected socket: in TLS when the protocol says so.
    pub fn transport(&self, sock: TcpStream, host: &str) -> Result<Transport> {
        #[cfg(feature = "tls")]
        if let Some(cfg) = &self.tls {
            let tls = super::tls::TlsStream::new(cfg, host)?;
            return Ok(Transport::Tls(sock, Box::new(tls)));
        }
        let _ = host;
        Ok(Transport::Plain(sock))
    }
}

/// 24 unpredictable bytes for a SCRAM client nonce: the standard library's per-process
/// random hash keys (seeded from the operating system) over a counter and the clock.
fn nonce() -> [u8; 24] {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut out = [0u8; 24];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = state.build_hasher();
        h.write_usize(i);
        h.write_u128(nanos);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}

/// When to re-authenticate a session that the broker limited to `lifetime` (KIP-368): at
/// 85-95 % of it, as the Java client, so the sessions of many connections do not end
/// together. `jitter` is in `0.0..1.0`.
pub(crate) fn reauth_after(lifetime: Duration, jitter: f64) -> Duration {
    lifetime.mul_f64(0.85 + 0.10 * jitter.clamp(0.0, 1.0))
}

/// A connected socket, plain or inside TLS: reads and writes plaintext.
pub(crate) enum Transport {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(TcpStream, Box<super::tls::TlsStream>),
}

impl Transport {
    /// The socket, for registration.
    pub fn socket(&mut self) -> &mut TcpStream {
        match self {
            Transport::Plain(s) => s,
            #[cfg(feature = "tls")]
            Transport::Tls(s, _) => s,
        }
    }

    /// Whether this is TLS.
    pub fn is_tls(&self) -> bool {
        !matches!(self, Transport::Plain(_))
    }

    /// Whether the TLS handshake is still running.
    pub fn is_handshaking(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            #[cfg(feature = "tls")]
            Transport::Tls(_, t) => t.is_handshaking(),
        }
    }

    /// Whether TLS bytes wait for the socket (WRITABLE interest stays on while they do).
    pub fn wants_write(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            #[cfg(feature = "tls")]
            Transport::Tls(_, t) => t.wants_write(),
        }
    }

    /// Plaintext in; `WouldBlock` when none is available.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Transport::Tls(s, t) => t.read_plain(s, buf),
        }
    }

    /// Plaintext out.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Transport::Tls(s, t) => t.write_plain(s, buf),
        }
    }

    /// Writes pending TLS records until the socket would block.
    pub fn flush_tls(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(_) => Ok(()),
            #[cfg(feature = "tls")]
            Transport::Tls(s, t) => t.flush_tls(s),
        }
    }
}

/// The error of a connection that failed for a reason the user must hear about (a login
/// refused, a certificate not trusted), carried through `io::Error` to the loop.
pub(crate) fn user_error(kind: ErrorKind, message: String) -> io::Error {
    io::Error::other(Error::new(kind, message))
}

/// The user-facing error inside `e`, if it carries one.
pub(crate) fn as_user_error(e: &io::Error) -> Option<Error> {
    e.get_ref()?.downcast_ref::<Error>().cloned()
}

/// Re-authentication state of a ready connection (KIP-368).
#[derive(Debug, Default)]
pub(crate) struct Reauth {
    /// When the current session should be renewed.
    pub due_at: Option<Instant>,
    /// Renewal is due: new requests are held until the ones in flight are answered and
    /// the exchange is done.
    pub pending: bool,
}
