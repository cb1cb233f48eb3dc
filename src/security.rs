//! Security settings: how a connection is secured (`security.protocol`), the SASL
//! mechanism and its credentials, the TLS trust and client identity, and the OAUTHBEARER
//! token provider. Plain data, checked when set; the TLS material is loaded (and its errors
//! reported) when the consumer is built.
//!
//! Secrets (passwords, private keys, tokens) live in [`Secret`], whose `Debug` prints
//! `[redacted]`, so no `{:?}` of the configuration shows them.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How the consumer's connections are secured (`security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecurityProtocol {
    /// No TLS, no authentication (the default).
    Plaintext,
    /// TLS; the broker may also ask for a client certificate (mutual TLS).
    Ssl,
    /// SASL authentication over a plain connection (PLAIN sends the password in clear: use
    /// it only on a trusted network).
    SaslPlaintext,
    /// SASL authentication over TLS: what managed services use.
    SaslSsl,
}

impl SecurityProtocol {
    /// Whether connections run TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether connections authenticate with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// The property value (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`).
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub(crate) fn parse(v: &str) -> Option<SecurityProtocol> {
        Some(match v.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => SecurityProtocol::Plaintext,
            "SSL" => SecurityProtocol::Ssl,
            "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
            "SASL_SSL" => SecurityProtocol::SaslSsl,
            _ => return None,
        })
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A SASL mechanism (`sasl.mechanism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN`: user name and password, sent as they are (use it over TLS).
    Plain,
    /// `SCRAM-SHA-256` (RFC 5802, RFC 7677): the password never crosses the wire. Needs the
    /// `scram` cargo feature.
    ScramSha256,
    /// `SCRAM-SHA-512`. Needs the `scram` cargo feature.
    ScramSha512,
    /// `OAUTHBEARER` (KIP-255): a bearer token from an [`OAuthBearerTokenProvider`].
    OAuthBearer,
}

impl SaslMechanism {
    /// The mechanism's name on the wire and in `sasl.mechanism`.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    pub(crate) fn parse(v: &str) -> Option<SaslMechanism> {
        Some(match v.to_ascii_uppercase().as_str() {
            "PLAIN" => SaslMechanism::Plain,
            "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
            "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
            "OAUTHBEARER" => SaslMechanism::OAuthBearer,
            _ => return None,
        })
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A secret string (a password, a private key, a token). Its `Debug` and `Display` print
/// `[redacted]`; only [`Secret::expose`] shows the value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(s.to_owned())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// PEM text, from a file or given inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pem {
    /// A file to read when the consumer is built.
    File(PathBuf),
    /// The PEM text itself (a secret when it holds a private key).
    Inline(Secret),
}

/// TLS settings (used with `SSL` and `SASL_SSL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    /// Certificates of the CAs to trust; `None`: the operating system's roots.
    pub ca: Option<Pem>,
    /// The client's certificate chain (mutual TLS), leaf first.
    pub certificate_chain: Option<Pem>,
    /// The client's private key (PKCS#8, PKCS#1 or SEC1 PEM).
    pub private_key: Option<Pem>,
    /// A file holding both the key and the chain (`ssl.keystore.location` with
    /// `ssl.keystore.type=PEM`).
    pub keystore: Option<Pem>,
    /// `ssl.key.password`: set only to be refused with a clear message (encrypted keys are
    /// not supported).
    pub key_password: Option<Secret>,
    /// `ssl.truststore.type` / `ssl.keystore.type` other than PEM, kept to be refused with
    /// a message that says how to convert.
    pub store_types: Vec<(String, String)>,
    /// Whether the broker's certificate must name the host we connected to (default true;
    /// `ssl.endpoint.identification.algorithm=` turns it off).
    pub verify_hostname: bool,
    /// Whether the broker's certificate is checked at all (librdkafka's
    /// `enable.ssl.certificate.verification`; default true).
    pub verify_certificate: bool,
}

impl Default for TlsSettings {
    fn default() -> TlsSettings {
        TlsSettings {
            ca: None,
            certificate_chain: None,
            private_key: None,
            keystore: None,
            key_password: None,
            store_types: Vec::new(),
            verify_hostname: true,
            verify_certificate: true,
        }
    }
}

/// SASL settings (used with `SASL_PLAINTEXT` and `SASL_SSL`).
#[derive(Debug, Clone, Default)]
pub(crate) struct SaslSettings {
    /// `sasl.mechanism`; `None` means the Java default, `GSSAPI`, which is refused.
    pub mechanism: Option<SaslMechanism>,
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// The OAUTHBEARER token provider.
    pub token_provider: Option<TokenProviderHandle>,
    /// The login module named by `sasl.jaas.config`, for error messages.
    pub login_module: Option<String>,
}

/// A shared token provider, comparable by identity for the configuration's `PartialEq`.
#[derive(Clone)]
pub(crate) struct TokenProviderHandle(pub Arc<dyn OAuthBearerTokenProvider>);

impl fmt::Debug for TokenProviderHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OAuthBearerTokenProvider")
    }
}

/// An OAUTHBEARER token and what the broker needs with it.
#[derive(Clone)]
pub struct OAuthBearerToken {
    /// The token (a JWS compact serialization, usually). Secret.
    pub value: Secret,
    /// When it expires.
    pub expires_at: SystemTime,
    /// The principal it names (for logs).
    pub principal: String,
    /// SASL extensions (KIP-342) sent with it, as `key=value` pairs.
    pub extensions: Vec<(String, String)>,
}

impl fmt::Debug for OAuthBearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthBearerToken")
            .field("value", &self.value)
            .field("expires_at", &self.expires_at)
            .field("principal", &self.principal)
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// Supplies OAUTHBEARER tokens (KIP-255): your code that talks to your identity provider.
///
/// It never runs on the consumer's I/O thread: a helper thread of the consumer calls it when
/// the consumer is built and again before each token expires (at 80 % of its lifetime, as the
/// Java client's `sasl.login.refresh.window.factor`), and hands the token to the I/O thread.
/// A call may block (an HTTP request to the identity provider is fine). An error is reported
/// from `poll` as an [`ErrorKind::Authentication`](crate::ErrorKind::Authentication) error,
/// and the call is retried with a growing backoff.
pub trait OAuthBearerTokenProvider: Send + Sync + 'static {
    /// A fresh token.
    fn token(
        &self,
    ) -> std::result::Result<OAuthBearerToken, Box<dyn std::error::Error + Send + Sync>>;
}

/// A provider of unsecured JWS tokens (`{"alg":"none"}`, no signature), which only a broker
/// running Kafka's unsecured validator accepts: for tests and local brokers, never for
/// production. The Java client makes the same tokens from
/// `OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";`.
#[derive(Debug, Clone)]
pub struct UnsecuredJwsProvider {
    principal: String,
    lifetime: Duration,
    scope: Vec<String>,
}

impl UnsecuredJwsProvider {
    /// Tokens for `principal` (the `sub` claim), valid for one hour.
    pub fn new(principal: &str) -> UnsecuredJwsProvider {
        UnsecuredJwsProvider {
            principal: principal.to_owned(),
            lifetime: Duration::from_secs(3600),
            scope: Vec::new(),
        }
    }

    /// Sets how long each token is valid (at least one second).
    pub fn lifetime(mut self, lifetime: Duration) -> UnsecuredJwsProvider {
        self.lifetime = lifetime.max(Duration::from_secs(1));
        self
    }

    /// Sets the `scope` claim.
    pub fn scope(mut self, scope: &[&str]) -> UnsecuredJwsProvider {
        self.scope = scope.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// The token for `now` (the provider's work, without the clock).
    pub(crate) fn token_at(&self, now: SystemTime) -> OAuthBearerToken {
        let iat = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let exp = iat + self.lifetime.as_secs().max(1);
        let mut claims = format!(
            "{{\"sub\":{},\"iat\":{iat},\"exp\":{exp}",
            json_string(&self.principal)
        );
        if !self.scope.is_empty() {
            claims.push_str(",\"scope\":");
            claims.push_str(&json_string(&self.scope.join(" ")));
        }
        claims.push('}');
        let value = format!(
            "{}.{}.",
            crate::sasl::base64::encode_url(br#"{"alg":"none"}"#),
            crate::sasl::base64::encode_url(claims.as_bytes())
        );
        OAuthBearerToken {
            value: Secret(value),
            expires_at: SystemTime::UNIX_EPOCH + Duration::from_secs(exp),
            principal: self.principal.clone(),
            extensions: Vec::new(),
        }
    }
}

impl OAuthBearerTokenProvider for UnsecuredJwsProvider {
    fn token(
        &self,
    ) -> std::result::Result<OAuthBearerToken, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.token_at(SystemTime::now()))
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A parsed `sasl.jaas.config`: `<LoginModule class> <flag> key="value" ...;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JaasConfig {
    /// The login module's class name (last dotted component kept whole).
    pub module: String,
    /// The options, in order. Values may be secrets: never log them.
    pub options: Vec<(String, String)>,
}

impl JaasConfig {
    /// The value of option `key`.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The login module's simple name (`PlainLoginModule`).
    pub fn simple_name(&self) -> &str {
        self.module.rsplit('.').next().unwrap_or(&self.module)
    }
}

/// Parses one JAAS login-module entry as the Java client accepts it in `sasl.jaas.config`:
/// a class name, a control flag (`required`, `requisite`, `sufficient`, `optional`), then
/// `key=value` options (values double-quoted, `\"` and `\\` escaped, or bare words) and a
/// closing `;`. Errors say what was expected, never an option's value.
pub(crate) fn parse_jaas(text: &str) -> std::result::Result<JaasConfig, String> {
    let mut rest = text.trim();
    let word_end = |s: &str| {
        s.find(|c: char| c.is_whitespace() || c == ';' || c == '=')
            .unwrap_or(s.len())
    };
    let end = word_end(rest);
    let module = &rest[..end];
    if module.is_empty() {
        return Err("expected a login module class name first".to_owned());
    }
    rest = rest[end..].trim_start();
    let end = word_end(rest);
    let flag = &rest[..end];
    if !matches!(
        flag.to_ascii_lowercase().as_str(),
        "required" | "requisite" | "sufficient" | "optional"
    ) {
        return Err(format!(
            "expected a control flag (required, requisite, sufficient or optional) after {module}"
        ));
    }
    rest = rest[end..].trim_start();
    let mut options = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix(';') {
            if !after.trim().is_empty() {
                return Err(
                    "only one login module entry is supported (text after the first `;`)"
                        .to_owned(),
                );
            }
            break;
        }
        if rest.is_empty() {
            return Err("the entry must end with `;`".to_owned());
        }
        let end = word_end(rest);
        let key = &rest[..end];
        if key.is_empty() {
            return Err("expected an option name".to_owned());
        }
        rest = rest[end..].trim_start();
        let Some(after_eq) = rest.strip_prefix('=') else {
            return Err(format!("expected `=` after option {key}"));
        };
        rest = after_eq.trim_start();
        let value;
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = quoted.char_indices();
            let mut closed = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, e)) => v.push(e),
                        None => break,
                    },
                    '"' => {
                        closed = Some(i);
                        break;
                    }
                    c => v.push(c),
                }
            }
            let Some(i) = closed else {
                return Err(format!("the value of option {key} has no closing quote"));
            };
            value = v;
            rest = quoted[i + 1..].trim_start();
        } else {
            let end = word_end(rest);
            value = rest[..end].to_owned();
            rest = rest[end..].trim_start();
        }
        options.push((key.to_owned(), value));
    }
    Ok(JaasConfig {
        module: module.to_owned(),
        options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaas_entries_as_the_java_client_writes_them_parse() {
        let j = parse_jaas(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="p\"w;d";"#,
        )
        .unwrap();
        assert_eq!(j.simple_name(), "ScramLoginModule");
        assert_eq!(j.option("username"), Some("alice"));
        assert_eq!(j.option("password"), Some("p\"w;d"));
        let j = parse_jaas(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required\n  unsecuredLoginStringClaim_sub=alice ;",
        )
        .unwrap();
        assert_eq!(j.option("unsecuredLoginStringClaim_sub"), Some("alice"));
    }

    #[test]
    fn malformed_jaas_entries_are_refused_without_echoing_values() {
        for (text, says) in [
            ("", "class name"),
            ("PlainLoginModule", "control flag"),
            ("PlainLoginModule must;", "control flag"),
            (r#"PlainLoginModule required username="a""#, "end with `;`"),
            (
                r#"PlainLoginModule required password="secret"#,
                "closing quote",
            ),
            (r#"PlainLoginModule required password "x";"#, "`=`"),
            (r#"A required; B required;"#, "only one"),
        ] {
            let e = parse_jaas(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn secrets_and_tokens_do_not_show_in_debug() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "[redacted] [redacted]");
        let t = UnsecuredJwsProvider::new("alice").token_at(SystemTime::UNIX_EPOCH);
        assert!(!format!("{t:?}").contains(t.value.expose()));
    }

    #[test]
    fn unsecured_tokens_are_alg_none_jws_with_sub_iat_exp() {
        let p = UnsecuredJwsProvider::new("alice")
            .lifetime(Duration::from_secs(60))
            .scope(&["read", "write"]);
        let t = p.token_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1000));
        let parts: Vec<&str> = t.value.expose().split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], "eyJhbGciOiJub25lIn0");
        assert_eq!(parts[2], "");
        assert_eq!(
            t.expires_at,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1060)
        );
        assert_eq!(t.principal, "alice");
    }
}
