//! The SCRAM-SHA-256 / SCRAM-SHA-512 client (RFC 5802, RFC 7677) as Kafka speaks it, on
//! the RustCrypto `sha2`, `hmac` and `pbkdf2` crates (the `scram` cargo feature).
//!
//! ```text
//!   client-first   n,,n=<user>,r=<cnonce>
//!   server-first   r=<cnonce><snonce>,s=<salt>,i=<iterations>[,<extensions>]
//!   client-final   c=biws,r=<cnonce><snonce>,p=<proof>
//!   server-final   v=<server signature> | e=<error>
//! ```
//!
//! [`ScramClient`] sends the client-first message and takes the server-first one, which
//! turns it into a [`ScramFinal`] holding the client-final message and the server
//! signature it expects; that one takes the server-final message. A value moves from step
//! to step, so no step can run twice or out of order.
//!
//! Kafka's rules, stricter or looser than the RFC's:
//! - no SASLprep: the user name and password are used as UTF-8, as Kafka's
//!   `ScramFormatter` does; the user name escapes `=` as `=3D` and `,` as `=2C`;
//! - the iteration count must be at least 4096 (Kafka's `ScramMechanism` minimum) and at
//!   most 16384 (its maximum: a broker cannot store credentials with more). PBKDF2 runs on
//!   the I/O thread, once per login; 16384 iterations of HMAC-SHA-512 are about 10 ms of
//!   one core in a release build, so the bound also caps what a lying broker can make the
//!   thread spend.
//!
//! Secrets (the password, the salted password, the client key and proof) stay in this
//! module's values, which have no `Debug`; only the proof leaves, inside the client-final
//! message for the broker.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use super::{base64, broker_text, AuthError, AuthErrorKind};
use crate::security::{SaslMechanism, Secret};

/// Kafka's minimum iteration count (`ScramMechanism.minIterations`).
pub(crate) const MIN_ITERATIONS: u32 = 4096;

/// Kafka's maximum iteration count (`ScramMechanism.maxIterations`).
pub(crate) const MAX_ITERATIONS: u32 = 16384;

/// `c=` of the client-final message: base64 of the GS2 header `n,,` (no channel binding,
/// no authorization id).
const CHANNEL_BINDING: &str = "c=biws";

/// The hash a SCRAM mechanism is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScramHash {
    /// SCRAM-SHA-256.
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl ScramHash {
    /// The hash of `mechanism`, if it is a SCRAM one.
    pub(crate) fn of(mechanism: SaslMechanism) -> Option<ScramHash> {
        match mechanism {
            SaslMechanism::ScramSha256 => Some(ScramHash::Sha256),
            SaslMechanism::ScramSha512 => Some(ScramHash::Sha512),
            _ => None,
        }
    }

    /// The mechanism built on this hash.
    pub(crate) fn mechanism(self) -> SaslMechanism {
        match self {
            ScramHash::Sha256 => SaslMechanism::ScramSha256,
            ScramHash::Sha512 => SaslMechanism::ScramSha512,
        }
    }

    /// `H(data)`.
    fn h(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `HMAC(key, data)`.
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length (longer ones are hashed), so `new_from_slice`
        // cannot fail; the keys here are our own derived values, never broker data.
        const ANY_KEY: &str = "HMAC accepts keys of any length";
        match self {
            ScramHash::Sha256 => {
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect(ANY_KEY);
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            ScramHash::Sha512 => {
                let mut mac = <Hmac<Sha512> as Mac>::new_from_slice(key).expect(ANY_KEY);
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with HMAC, one hash output long.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut out = vec![0; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out
            }
            ScramHash::Sha512 => {
                let mut out = vec![0; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out
            }
        }
    }
}

/// A SCRAM client that sent (or is about to send) its client-first message.
pub(crate) struct ScramClient {
    hash: ScramHash,
    password: Secret,
    nonce: String,
    /// `n=<user>,r=<cnonce>`: the client-first message without its GS2 header.
    client_first_bare: String,
}

impl ScramClient {
    /// A client for `username` and `password`, with the client nonce `nonce` (printable
    /// ASCII without `,`: [`nonce_from`] makes one from random bytes; the tests pass the
    /// RFC's).
    pub(crate) fn new(hash: ScramHash, username: &str, password: &Secret, nonce: String) -> Self {
        let client_first_bare = format!("n={},r={nonce}", escape_username(username));
        ScramClient {
            hash,
            password: password.clone(),
            nonce,
            client_first_bare,
        }
    }

    /// The client-first message: `n,,` (no channel binding, no authorization id), then
    /// the bare message.
    pub(crate) fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Takes the server-first message; the client-final message to send, inside the
    /// [`ScramFinal`] that checks the answer to it.
    pub(crate) fn server_first(self, message: &[u8]) -> Result<ScramFinal, AuthError> {
        let mechanism = self.hash.mechanism();
        let protocol = |detail: String| {
            AuthError::new(
                AuthErrorKind::Protocol,
                format!("SASL {mechanism}: {detail}"),
            )
        };
        let text = std::str::from_utf8(message)
            .map_err(|_| protocol("the server-first message is not UTF-8".into()))?;
        let first = parse_server_first(text, &self.nonce).map_err(protocol)?;
        let salted = self.hash.salted_password(
            self.password.expose().as_bytes(),
            &first.salt,
            first.iterations,
        );
        let without_proof = format!("{CHANNEL_BINDING},r={}", first.nonce);
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let client_key = self.hash.hmac(&salted, b"Client Key");
        let stored_key = self.hash.h(&client_key);
        let client_signature = self.hash.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = self.hash.hmac(&salted, b"Server Key");
        let server_signature = self.hash.hmac(&server_key, auth_message.as_bytes());
        let client_final = format!("{without_proof},p={}", base64::encode(&proof)).into_bytes();
        Ok(ScramFinal {
            hash: self.hash,
            client_final,
            server_signature,
        })
    }
}

/// A SCRAM client that computed its client-final message and waits for the server-final
/// one.
pub(crate) struct ScramFinal {
    hash: ScramHash,
    client_final: Vec<u8>,
    server_signature: Vec<u8>,
}

impl ScramFinal {
    /// The client-final message (`c=biws,r=<nonce>,p=<proof>`).
    pub(crate) fn client_final(&self) -> &[u8] {
        &self.client_final
    }

    /// Takes the server-final message: `Ok` only if it is `v=` with the signature that
    /// proves the server knows the salted password.
    pub(crate) fn server_final(&self, message: &[u8]) -> Result<(), AuthError> {
        let mechanism = self.hash.mechanism();
        let protocol = |detail: &str| {
            AuthError::new(
                AuthErrorKind::Protocol,
                format!("SASL {mechanism}: {detail}"),
            )
        };
        let text = std::str::from_utf8(message)
            .map_err(|_| protocol("the server-final message is not UTF-8"))?;
        // server-final-message = (server-error / verifier) ["," extensions]
        let first = text.split(',').next().unwrap_or("");
        if let Some(error) = first.strip_prefix("e=") {
            return Err(AuthError::new(
                AuthErrorKind::Failed,
                format!(
                    "SASL {mechanism} authentication failed: the broker answered e={}",
                    broker_text(error)
                ),
            ));
        }
        let Some(signature) = first.strip_prefix("v=") else {
            return Err(protocol(
                "the server-final message has neither a signature (v=) nor an error (e=)",
            ));
        };
        let signature = base64::decode(signature.as_bytes()).map_err(|e| {
            protocol(&format!(
                "the server signature (v=) is not valid base64: {e}"
            ))
        })?;
        if !equal_in_constant_time(&signature, &self.server_signature) {
            return Err(AuthError::new(
                AuthErrorKind::Failed,
                format!(
                    "SASL {mechanism}: the broker's server signature does not verify (it does \
                     not know this user's SCRAM credentials, or the exchange was altered)"
                ),
            ));
        }
        Ok(())
    }
}

/// The client nonce made from the I/O layer's random bytes: their standard base64, 32
/// characters of `A-Za-z0-9+/` (printable, no `,`, no `=` since 24 bytes need no
/// padding), carrying all 192 bits.
pub(crate) fn nonce_from(random: &[u8; 24]) -> String {
    base64::encode(random)
}

/// The user name as a SCRAM `saslname`: `=` as `=3D`, `,` as `=2C` (no SASLprep, as
/// Kafka's `ScramFormatter.saslName`).
fn escape_username(username: &str) -> String {
    username.replace('=', "=3D").replace(',', "=2C")
}

/// What the server-first message says.
#[derive(Debug)]
struct ServerFirst<'a> {
    /// The whole nonce: ours, then the server's part.
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: u32,
}

/// Parses `server-first-message = [reserved-mext ","] nonce "," salt "," iteration-count
/// ["," extensions]` (RFC 5802 section 7), checking the nonce against ours and the
/// iteration count against Kafka's bounds. Unknown extensions after the iteration count
/// are ignored, as the RFC allows; a mandatory extension (`m=`) is refused, as it requires.
fn parse_server_first<'a>(text: &'a str, client_nonce: &str) -> Result<ServerFirst<'a>, String> {
    if text.starts_with("m=") {
        return Err(
            "the broker requires a mandatory SCRAM extension (m=) this client does not know".into(),
        );
    }
    let mut parts = text.split(',');
    let mut attribute = |name: &str, what: &str| {
        parts
            .next()
            .and_then(|p| p.strip_prefix(name))
            .ok_or_else(|| {
                format!("the server-first message has no {what} ({name}) where the RFC puts it")
            })
    };
    let nonce = attribute("r=", "nonce")?;
    let salt = attribute("s=", "salt")?;
    let iterations = attribute("i=", "iteration count")?;
    if !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err("the server nonce (r=) holds characters outside printable ASCII".into());
    }
    if !nonce.starts_with(client_nonce) || nonce.len() <= client_nonce.len() {
        return Err("the server nonce (r=) does not extend the client nonce".into());
    }
    let salt = base64::decode(salt.as_bytes())
        .map_err(|e| format!("the salt (s=) is not valid base64: {e}"))?;
    if salt.is_empty() {
        return Err("the salt (s=) is empty".into());
    }
    let iterations = parse_iterations(iterations)?;
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

/// The iteration count: decimal digits only, within Kafka's bounds.
fn parse_iterations(text: &str) -> Result<u32, String> {
    let shown = broker_text(text);
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("the iteration count (i={shown}) is not a number"));
    }
    // Ten digits always fit a u64; more are above the maximum anyway.
    let n: u64 = if text.len() > 10 {
        u64::MAX
    } else {
        text.parse().unwrap_or(u64::MAX)
    };
    if n < u64::from(MIN_ITERATIONS) {
        return Err(format!(
            "the iteration count {n} is below Kafka's minimum of {MIN_ITERATIONS}"
        ));
    }
    if n > u64::from(MAX_ITERATIONS) {
        return Err(format!(
            "the iteration count {shown} is above Kafka's maximum of {MAX_ITERATIONS} \
             (refused: no Kafka broker stores such credentials, and PBKDF2 would run that \
             long on the I/O thread)"
        ));
    }
    Ok(n as u32)
}

/// Whether `a == b`, looking at every byte whatever the first difference (the lengths are
/// not secret).
fn equal_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A SCRAM server for tests and fuzz seeds: the answers a broker that stores `password`
/// with `salt` and `iterations` gives.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// The server's side of one exchange.
    pub(crate) struct FakeServer {
        pub hash: ScramHash,
        pub password: &'static str,
        pub salt: Vec<u8>,
        pub iterations: u32,
        /// Appended to the client's nonce.
        pub server_nonce: &'static str,
    }

    impl FakeServer {
        /// The server-first message answering `client_first` (`n,,n=...,r=...`).
        pub(crate) fn server_first(&self, client_first: &[u8]) -> Vec<u8> {
            let text = std::str::from_utf8(client_first).unwrap();
            let nonce = text.split(",r=").nth(1).unwrap();
            format!(
                "r={nonce}{},s={},i={}",
                self.server_nonce,
                base64::encode(&self.salt),
                self.iterations
            )
            .into_bytes()
        }

        /// The server-final message (`v=`) for the exchange so far, after checking the
        /// client's proof.
        pub(crate) fn server_final(
            &self,
            client_first: &[u8],
            server_first: &[u8],
            client_final: &[u8],
        ) -> Vec<u8> {
            let bare = std::str::from_utf8(&client_first[3..]).unwrap();
            let client_final = std::str::from_utf8(client_final).unwrap();
            let (without_proof, proof) = client_final.rsplit_once(",p=").unwrap();
            let auth = format!(
                "{bare},{},{without_proof}",
                std::str::from_utf8(server_first).unwrap()
            );
            let h = self.hash;
            let salted = h.salted_password(self.password.as_bytes(), &self.salt, self.iterations);
            let client_key = h.hmac(&salted, b"Client Key");
            let signature = h.hmac(&h.h(&client_key), auth.as_bytes());
            let want: Vec<u8> = client_key
                .iter()
                .zip(&signature)
                .map(|(a, b)| a ^ b)
                .collect();
            assert_eq!(
                base64::decode(proof.as_bytes()).unwrap(),
                want,
                "client proof"
            );
            let server_key = h.hmac(&salted, b"Server Key");
            format!(
                "v={}",
                base64::encode(&h.hmac(&server_key, auth.as_bytes()))
            )
            .into_bytes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RFC_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";

    fn client(hash: ScramHash) -> ScramClient {
        ScramClient::new(hash, "user", &Secret::from("pencil"), RFC_NONCE.into())
    }

    fn error_of<T>(r: Result<T, AuthError>) -> AuthError {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => e,
        }
    }

    #[test]
    fn sha256_follows_the_rfc_7677_example_exactly() {
        let c = client(ScramHash::Sha256);
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let f = c.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(
            std::str::from_utf8(f.client_final()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        f.server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
    }

    /// The RFC 7677 exchange with SHA-512, computed independently with Python's standard
    /// library (the same script with sha256 reproduces the RFC's values):
    ///
    /// ```python
    /// import base64, hashlib, hmac
    /// h = hashlib.sha512
    /// server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    /// salted = hashlib.pbkdf2_hmac("sha512", b"pencil", base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096)
    /// client_key = hmac.new(salted, b"Client Key", h).digest()
    /// without_proof = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    /// auth = ",".join(["n=user,r=rOprNGfwEbeRWgbNEkqO", server_first, without_proof]).encode()
    /// sig = hmac.new(h(client_key).digest(), auth, h).digest()
    /// proof = bytes(a ^ b for a, b in zip(client_key, sig))
    /// server_sig = hmac.new(hmac.new(salted, b"Server Key", h).digest(), auth, h).digest()
    /// print(without_proof + ",p=" + base64.b64encode(proof).decode())
    /// print("v=" + base64.b64encode(server_sig).decode())
    /// ```
    #[test]
    fn sha512_matches_an_independently_computed_exchange() {
        let c = client(ScramHash::Sha512);
        let f = c.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(
            std::str::from_utf8(f.client_final()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=gMGXRcevScNtxZ6/8lQYpGtnsNAc3mGcmNomv+xnoOMw+3R2xNJdMNnzMlTN8PPC6wdp6dybEmDYXYTxwnYPJQ=="
        );
        f.server_final(
            b"v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0vSVlKDanekLtifDSeVGT4+5ZxXnJq199RVG2rR7N7Zw==",
        )
        .unwrap();
    }

    #[test]
    fn a_tampered_server_signature_fails_the_login() {
        let f = client(ScramHash::Sha256)
            .server_first(RFC_SERVER_FIRST.as_bytes())
            .unwrap();
        // One bit off (first and last significant bits), too short, too long, empty.
        for bad in [
            "v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G8=",
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl9",
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4A",
            "v=",
        ] {
            let e = f.server_final(bad.as_bytes()).unwrap_err();
            assert_eq!(e.kind, AuthErrorKind::Failed, "{bad}: {e}");
            assert!(e.message.contains("SCRAM-SHA-256"), "{e}");
            assert!(e.message.contains("signature does not verify"), "{e}");
        }
        // Bits past the last byte are not part of the signature (see base64's docs): the
        // same signature, written non-canonically, verifies.
        f.server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G5=")
            .unwrap();
    }

    #[test]
    fn a_server_final_error_fails_with_the_servers_text() {
        let f = client(ScramHash::Sha512)
            .server_first(RFC_SERVER_FIRST.as_bytes())
            .unwrap();
        let e = f.server_final(b"e=invalid-proof").unwrap_err();
        assert_eq!(e.kind, AuthErrorKind::Failed);
        assert_eq!(
            e.message,
            "SASL SCRAM-SHA-512 authentication failed: the broker answered e=invalid-proof"
        );
        // Extensions after the error are allowed and ignored.
        let e = f.server_final(b"e=other-error,x=1").unwrap_err();
        assert!(e.message.ends_with("e=other-error"), "{e}");
    }

    #[test]
    fn a_malformed_server_final_is_a_protocol_error() {
        let f = client(ScramHash::Sha256)
            .server_first(RFC_SERVER_FIRST.as_bytes())
            .unwrap();
        for bad in [
            &b""[..],
            b"x=1",
            b"V=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4",
            b"v=6rriTRBi23WpRR_wtup+mMhUZUn/dB5nLTJRsjl95G4=",
            b"v=\xff\xfe==",
        ] {
            let e = f.server_final(bad).unwrap_err();
            assert_eq!(e.kind, AuthErrorKind::Protocol, "{bad:?}: {e}");
        }
        // Extensions after a valid signature are ignored.
        f.server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=,x=y")
            .unwrap();
    }

    fn server_first_error(server_first: &str) -> AuthError {
        error_of(client(ScramHash::Sha256).server_first(server_first.as_bytes()))
    }

    #[test]
    fn a_server_nonce_that_does_not_extend_ours_is_a_protocol_error() {
        for nonce in [
            "rOprNGfwEbeRWgbNEkqO",         // not longer
            "rOprNGfwEbeRWgbNEkq",          // shorter
            "XOprNGfwEbeRWgbNEkqO%hvYDpWU", // another prefix
            "%hvYDpWUrOprNGfwEbeRWgbNEkqO", // ours, not first
            "rOprNGfwEbeRWgbNEkqO%hv YD",   // a space
            "rOprNGfwEbeRWgbNEkqO\u{e9}",   // not ASCII
        ] {
            let e = server_first_error(&format!("r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"));
            assert_eq!(e.kind, AuthErrorKind::Protocol, "{nonce}: {e}");
            assert!(e.message.contains("nonce"), "{e}");
        }
    }

    #[test]
    fn iteration_counts_outside_kafkas_bounds_are_protocol_errors() {
        let at = |i: &str| format!("r={RFC_NONCE}x,s=W22ZaJ0SNY7soEsUEjb6gQ==,i={i}");
        let e = server_first_error(&at("4095"));
        assert_eq!(e.kind, AuthErrorKind::Protocol);
        assert!(e.message.contains("below Kafka's minimum of 4096"), "{e}");
        for big in [
            "16385",
            "1000000000",
            "4294967296",
            "99999999999999999999999",
        ] {
            let e = server_first_error(&at(big));
            assert_eq!(e.kind, AuthErrorKind::Protocol, "{big}");
            assert!(e.message.contains("above Kafka's maximum of 16384"), "{e}");
        }
        for junk in ["", "+4096", "-4096", "4096 ", "0x1000", "1e9", "４０９６"] {
            let e = server_first_error(&at(junk));
            assert_eq!(e.kind, AuthErrorKind::Protocol, "{junk:?}");
            assert!(e.message.contains("is not a number"), "{e}");
        }
        // Both bounds themselves are accepted.
        for ok in ["4096", "16384"] {
            client(ScramHash::Sha256)
                .server_first(at(ok).as_bytes())
                .unwrap();
        }
    }

    #[test]
    fn missing_or_misplaced_attributes_are_protocol_errors() {
        for (bad, what) in [
            ("", "nonce (r=)"),
            ("s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce (r=)"),
            ("r=rOprNGfwEbeRWgbNEkqOx", "salt (s=)"),
            ("r=rOprNGfwEbeRWgbNEkqOx,i=4096", "salt (s=)"),
            (
                "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==",
                "iteration count (i=)",
            ),
            (
                "r=rOprNGfwEbeRWgbNEkqOx,i=4096,s=W22ZaJ0SNY7soEsUEjb6gQ==",
                "salt (s=)",
            ),
        ] {
            let e = server_first_error(bad);
            assert_eq!(e.kind, AuthErrorKind::Protocol, "{bad}");
            assert!(e.message.contains(what), "{bad}: {e}");
        }
    }

    #[test]
    fn a_mandatory_extension_bad_salt_or_non_utf8_is_a_protocol_error() {
        let e =
            server_first_error("m=ext,r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
        assert!(e.message.contains("mandatory SCRAM extension (m=)"), "{e}");
        for salt in ["W22ZaJ0SNY7soEsUEjb6gQ=", "W22ZaJ0SNY7soEsUEjb6g-==", ""] {
            let e = server_first_error(&format!("r={RFC_NONCE}x,s={salt},i=4096"));
            assert_eq!(e.kind, AuthErrorKind::Protocol, "{salt}");
            assert!(e.message.contains("salt (s=)"), "{e}");
        }
        let e = error_of(client(ScramHash::Sha256).server_first(b"r=rOprNGfwEbeRWgbNEkqO\xff"));
        assert_eq!(e.kind, AuthErrorKind::Protocol);
        assert!(e.message.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn unknown_extensions_after_the_iteration_count_are_ignored() {
        let f = client(ScramHash::Sha256)
            .server_first(format!("{RFC_SERVER_FIRST},x=whatever,y=").as_bytes())
            .unwrap();
        // The extensions are part of the AuthMessage, so the RFC's proof no longer holds.
        assert!(!f
            .client_final()
            .ends_with(b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="));
    }

    #[test]
    fn usernames_escape_equals_and_comma_without_saslprep() {
        let c = ScramClient::new(
            ScramHash::Sha256,
            "a=b,c\u{2168}",
            &Secret::from("p"),
            "n".into(),
        );
        assert_eq!(c.client_first(), "n,,n=a=3Db=2Cc\u{2168},r=n".as_bytes());
    }

    #[test]
    fn the_client_nonce_is_printable_without_commas_and_carries_every_byte() {
        let a = nonce_from(&[0xff; 24]);
        let b = nonce_from(&[0xfe; 24]);
        assert_ne!(a, b);
        for random in [
            [0u8; 24],
            [0xff; 24],
            core::array::from_fn(|i| (i * 37) as u8),
        ] {
            let n = nonce_from(&random);
            assert_eq!(n.len(), 32);
            assert!(
                n.bytes().all(|c| (0x21..=0x7e).contains(&c) && c != b','),
                "{n}"
            );
            assert_eq!(base64::decode(n.as_bytes()).unwrap(), random);
        }
    }

    #[test]
    fn the_fake_server_agrees_with_the_client_for_both_hashes() {
        for hash in [ScramHash::Sha256, ScramHash::Sha512] {
            let server = testing::FakeServer {
                hash,
                password: "pencil",
                salt: b"salty".to_vec(),
                iterations: 4096,
                server_nonce: "srv",
            };
            let c = client(hash);
            let first = c.client_first();
            let server_first = server.server_first(&first);
            let f = c.server_first(&server_first).unwrap();
            let server_final = server.server_final(&first, &server_first, f.client_final());
            f.server_final(&server_final).unwrap();
        }
    }

    #[test]
    fn equality_looks_at_lengths_and_every_byte() {
        assert!(equal_in_constant_time(b"", b""));
        assert!(equal_in_constant_time(b"abc", b"abc"));
        assert!(!equal_in_constant_time(b"abc", b"abd"));
        assert!(!equal_in_constant_time(b"xbc", b"abc"));
        assert!(!equal_in_constant_time(b"abc", b"ab"));
    }
}
