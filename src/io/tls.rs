//! TLS with rustls, in the I/O thread like every other socket: the client configuration
//! (crypto provider, trust, client identity, verification), messages that say what went
//! wrong, and [`TlsStream`], the TLS state of one non-blocking connection.
//!
//! [`TlsStream`] owns no socket: each call is handed the mio socket, so the connection
//! keeps treating TLS and plain sockets alike. The rules, on an edge-triggered poll:
//!
//! 1. When the TCP connect is confirmed, call [`TlsStream::flush_tls`] (it sends the
//!    ClientHello).
//! 2. On every readiness event (and after queueing output), write queued plaintext with
//!    [`TlsStream::write_plain`] until it accepts no more (`WouldBlock`), call
//!    [`TlsStream::flush_tls`], then read with [`TlsStream::read_plain`] until
//!    `WouldBlock`. Reading can finish the handshake and so let more plaintext go out:
//!    write once more after reading when output is still queued.
//! 3. Keep WRITABLE interest while [`TlsStream::wants_write`] is true or plaintext is still
//!    queued; READABLE always.
//!
//! Plaintext written during the handshake is buffered by rustls and sent when it ends.
//! Errors that come from TLS (the handshake, certificates, alerts, a peer that does not
//! speak TLS) carry an [`Error`] of kind [`ErrorKind::Tls`] inside the `io::Error`: see
//! [`tls_error`].

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct,
    InconsistentKeys, RootCertStore, SignatureScheme,
};

use crate::error::{Error, ErrorKind, Result};
use crate::security::{Pem, TlsSettings};

/// Most TLS bytes (records ready to send) or plaintext (accepted before the handshake
/// ends) rustls holds for one connection before [`TlsStream::write_plain`] stops
/// accepting: the rest stays in the connection's own queue. rustls's default, made
/// explicit. Received plaintext is bounded by rustls itself (16 KiB, and `read_plain` asks
/// the socket for more only once it is handed out).
const SEND_BUFFER_LIMIT: usize = 64 * 1024;

// ----- crypto provider ------------------------------------------------------------------

/// The processor features graviola needs that this machine lacks (empty: it can run).
/// graviola's README and its own start-up checks: x86_64 needs AES-NI, PCLMULQDQ, AVX,
/// AVX2, BMI1, BMI2, ADX and SSSE3; aarch64 needs NEON, AES, PMULL and SHA2.
#[cfg_attr(not(feature = "tls-graviola"), allow(dead_code))]
fn graviola_missing_cpu_features() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut missing = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! need {
            ($($f:tt),*) => {$(
                if !std::arch::is_x86_feature_detected!($f) {
                    missing.push($f);
                }
            )*};
        }
        need!(
            "aes",
            "pclmulqdq",
            "avx",
            "avx2",
            "bmi1",
            "bmi2",
            "adx",
            "ssse3"
        );
    }
    #[cfg(target_arch = "aarch64")]
    {
        macro_rules! need {
            ($($f:tt),*) => {$(
                if !std::arch::is_aarch64_feature_detected!($f) {
                    missing.push($f);
                }
            )*};
        }
        need!("neon", "aes", "pmull", "sha2");
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    missing.push("an x86_64 or aarch64 processor");
    missing
}

/// The error when graviola is the only provider built in and the processor lacks `missing`.
#[cfg_attr(
    not(all(feature = "tls-graviola", not(feature = "tls-ring"))),
    allow(dead_code)
)]
fn graviola_unsuitable(missing: &[&str]) -> Error {
    Error::unsupported(format!(
        "TLS: this build's only crypto provider, graviola (cargo feature `tls-graviola`), needs \
         processor features this machine lacks: {}; build kafka-consumer with the cargo feature \
         `tls-ring` (alone, or with `tls-graviola`, which then falls back to ring on machines \
         like this one)",
        missing.join(", ")
    ))
}

/// The crypto provider this build uses on this machine, and its name.
fn select_provider() -> Result<(Arc<CryptoProvider>, &'static str)> {
    #[cfg(all(feature = "tls-graviola", feature = "tls-ring"))]
    {
        let missing = graviola_missing_cpu_features();
        if missing.is_empty() {
            return Ok((Arc::new(rustls_graviola::default_provider()), "graviola"));
        }
        log::debug!(
            "TLS: graviola needs {} on this processor; using ring",
            missing.join(", ")
        );
        Ok((Arc::new(rustls::crypto::ring::default_provider()), "ring"))
    }
    #[cfg(all(feature = "tls-graviola", not(feature = "tls-ring")))]
    {
        let missing = graviola_missing_cpu_features();
        if missing.is_empty() {
            Ok((Arc::new(rustls_graviola::default_provider()), "graviola"))
        } else {
            Err(graviola_unsuitable(&missing))
        }
    }
    #[cfg(all(feature = "tls-ring", not(feature = "tls-graviola")))]
    {
        Ok((Arc::new(rustls::crypto::ring::default_provider()), "ring"))
    }
    #[cfg(not(any(feature = "tls-graviola", feature = "tls-ring")))]
    {
        Err(Error::unsupported(
            "TLS: no crypto provider is built in: enable the cargo feature `tls-graviola` \
             (no C) or `tls-ring` of kafka-consumer",
        ))
    }
}

/// The name of the crypto provider TLS connections use on this machine: `"graviola"`,
/// `"ring"`, or `"none"` when the build's only provider cannot run here.
#[allow(dead_code)] // for the benchmark's report
pub(crate) fn provider_name() -> &'static str {
    select_provider().map_or("none", |(_, name)| name)
}

// ----- where material comes from, for messages --------------------------------------------

/// What a piece of PEM is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Material {
    Trust,
    Chain,
    Key,
    Keystore,
}

impl Material {
    /// The settings that give this material, as the Java client and librdkafka name them.
    fn setting(self, pem: &Pem) -> &'static str {
        let file = matches!(pem, Pem::File(_));
        match (self, file) {
            (Material::Trust, true) => "`ssl.truststore.location` (librdkafka `ssl.ca.location`)",
            (Material::Trust, false) => "`ssl.truststore.certificates` (librdkafka `ssl.ca.pem`)",
            (Material::Chain, true) => "`ssl.certificate.location`",
            (Material::Chain, false) => {
                "`ssl.keystore.certificate.chain` (librdkafka `ssl.certificate.pem`)"
            }
            (Material::Key, true) => "`ssl.key.location`",
            (Material::Key, false) => "`ssl.keystore.key` (librdkafka `ssl.key.pem`)",
            (Material::Keystore, true) => "`ssl.keystore.location`",
            (Material::Keystore, false) => "the keystore",
        }
    }

    /// How to turn a binary store into the PEM this material needs.
    fn conversion_hint(self) -> &'static str {
        match self {
            Material::Trust => {
                "only PEM is supported: export the CA certificates with \
                 `keytool -exportcert -rfc -alias ALIAS -keystore store.jks -file ca.pem` (JKS), \
                 `openssl pkcs12 -in store.p12 -nokeys -out ca.pem` (PKCS#12) or \
                 `openssl x509 -inform der -in ca.der -out ca.pem` (one DER certificate)"
            }
            _ => {
                "only PEM is supported: convert a JKS keystore with `keytool -importkeystore \
                 -srckeystore store.jks -destkeystore store.p12 -deststoretype PKCS12`, then \
                 `openssl pkcs12 -in store.p12 -nodes -out keystore.pem` (it holds the key and \
                 the certificate chain, unencrypted: keep it readable only by the consumer's user)"
            }
        }
    }
}

/// PEM text read from a file or given inline, and where it came from (for messages; never
/// its content).
struct Loaded {
    bytes: Vec<u8>,
    origin: String,
    material: Material,
}

fn load(material: Material, pem: &Pem) -> Result<Loaded> {
    let setting = material.setting(pem);
    match pem {
        Pem::File(path) => {
            let bytes = std::fs::read(path).map_err(|e| read_error(setting, path, &e))?;
            Ok(Loaded {
                bytes,
                origin: format!("{setting} file {}", path.display()),
                material,
            })
        }
        Pem::Inline(secret) => Ok(Loaded {
            bytes: secret.expose().as_bytes().to_vec(),
            origin: format!("the PEM text of {setting}"),
            material,
        }),
    }
}

fn read_error(setting: &str, path: &Path, e: &io::Error) -> Error {
    let why = match e.kind() {
        io::ErrorKind::NotFound => "it does not exist".to_owned(),
        io::ErrorKind::PermissionDenied => {
            "permission denied (the consumer's user must be able to read it)".to_owned()
        }
        _ => e.to_string(),
    };
    Error::config(format!("{setting}: cannot read {}: {why}", path.display()))
        .with_source(io::Error::new(e.kind(), e.to_string()))
}

impl Loaded {
    /// Refuses content that is not PEM text (a JKS or PKCS#12 store, a DER file).
    fn check_text(&self) -> Result<()> {
        let b = &self.bytes;
        let binary = b.contains(&0) || std::str::from_utf8(b).is_err();
        if !binary {
            return Ok(());
        }
        let what = if b.starts_with(&[0xFE, 0xED, 0xFE, 0xED]) {
            "a JKS keystore"
        } else if b.starts_with(&[0xCE, 0xCE, 0xCE, 0xCE]) {
            "a JCEKS keystore"
        } else if b.first() == Some(&0x30) {
            "binary DER (a PKCS#12 store or a DER certificate)"
        } else {
            "binary data"
        };
        Err(Error::config(format!(
            "{} is not PEM: it looks like {what}; {}",
            self.origin,
            self.material.conversion_hint()
        )))
    }

    /// What a keystore must hold, for its "holds no ..." errors.
    fn keystore_hint(&self) -> &'static str {
        match self.material {
            Material::Keystore => {
                "; a PEM keystore holds the private key and the certificate chain"
            }
            _ => "",
        }
    }

    fn text(&self) -> &str {
        std::str::from_utf8(&self.bytes).unwrap_or("")
    }

    /// The labels of the PEM blocks present (`PRIVATE KEY`, `CERTIFICATE`, ...).
    fn labels(&self) -> Vec<&str> {
        let mut labels: Vec<&str> = Vec::new();
        for line in self.text().lines() {
            if let Some(rest) = line.trim().strip_prefix("-----BEGIN ") {
                let label = rest.trim_end_matches('-');
                if !labels.contains(&label) {
                    labels.push(label);
                }
            }
        }
        labels
    }

    fn is_encrypted_key(&self) -> bool {
        let text = self.text();
        text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
            || text.lines().any(|l| {
                let l = l.trim();
                l.starts_with("Proc-Type:") && l.contains("ENCRYPTED")
            })
    }

    /// Every `CERTIFICATE` block; at least one.
    fn certificates(&self) -> Result<Vec<CertificateDer<'static>>> {
        self.check_text()?;
        let certs = CertificateDer::pem_slice_iter(&self.bytes)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| {
                Error::config(format!(
                    "{}: malformed PEM: {}",
                    self.origin,
                    pem_problem(&e)
                ))
            })?;
        if certs.is_empty() {
            let labels = self.labels();
            let found = if labels.is_empty() {
                "it has no PEM block at all".to_owned()
            } else {
                format!("it has only: {}", labels.join(", "))
            };
            let hint = if labels.contains(&"TRUSTED CERTIFICATE") {
                "; convert OpenSSL's trusted format with `openssl x509 -in FILE -out ca.pem`"
            } else {
                ""
            };
            return Err(Error::config(format!(
                "{} holds no certificate (no `-----BEGIN CERTIFICATE-----` block; {found}){hint}{}",
                self.origin,
                self.keystore_hint()
            )));
        }
        Ok(certs)
    }

    /// The first private key (PKCS#8, PKCS#1 or SEC1); encrypted keys are refused.
    fn private_key(&self) -> Result<PrivateKeyDer<'static>> {
        self.check_text()?;
        if self.is_encrypted_key() {
            return Err(encrypted_key_error(&format!(
                "{} holds an encrypted private key",
                self.origin
            )));
        }
        PrivateKeyDer::from_pem_slice(&self.bytes).map_err(|e| match e {
            pem::Error::NoItemsFound => Error::config(format!(
                "{} holds no private key (a `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` \
                 block){}",
                self.origin,
                self.keystore_hint()
            )),
            // Never the content: the error of a key block could quote it.
            e => Error::config(format!(
                "{}: malformed PEM: {}",
                self.origin,
                pem_problem(&e)
            )),
        })
    }
}

/// What is wrong with some PEM, without quoting it.
fn pem_problem(e: &pem::Error) -> &'static str {
    match e {
        pem::Error::MissingSectionEnd { .. } => "a block has no `-----END ...-----` line",
        pem::Error::IllegalSectionStart { .. } => "a `-----BEGIN ...` line is malformed",
        pem::Error::Base64Decode(_) => "a block's base64 does not decode",
        pem::Error::SectionTooLarge => "a block is too large",
        _ => "it cannot be parsed",
    }
}

fn encrypted_key_error(what: &str) -> Error {
    Error::config(format!(
        "{what}; encrypted private keys are not supported; decrypt it with \
         `openssl pkcs8 -topk8 -nocrypt -in key.pem -out key-plain.pem` (keep the file readable \
         only by the consumer's user)"
    ))
}

// ----- the client configuration ---------------------------------------------------------

/// The rustls client configuration for `settings`, built once when the consumer is built.
/// Errors are of kind [`ErrorKind::Config`] (the settings or the files they name) or
/// [`ErrorKind::Unsupported`] (no crypto provider can run on this machine); their messages
/// name the setting and the file and say what to do, and never quote key material.
pub(crate) fn client_config(settings: &TlsSettings) -> Result<Arc<ClientConfig>> {
    check_store_types(settings)?;
    if settings.key_password.is_some() {
        return Err(Error::config(
            "`ssl.key.password` (or `ssl.keystore.password`) is set, but encrypted private keys \
             are not supported: decrypt the key with `openssl pkcs8 -topk8 -nocrypt -in key.pem \
             -out key-plain.pem` (keep the file readable only by the consumer's user), use that \
             file and remove the password setting",
        ));
    }
    let (provider, name) = select_provider()?;
    log::debug!("TLS: crypto provider {name}");

    let roots = Arc::new(trust_roots(settings)?);
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| {
            Error::new(
                ErrorKind::Tls,
                format!("TLS: the {name} crypto provider cannot do TLS 1.2 or 1.3: {e}"),
            )
        })?;
    let builder = if !settings.verify_certificate {
        log::warn!(
            "TLS: the brokers' certificates are not verified \
             (enable.ssl.certificate.verification=false): anyone between this consumer and \
             the brokers can read and change the traffic"
        );
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate {
                algorithms: provider.signature_verification_algorithms,
            }))
    } else {
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider))
            .build()
            .map_err(|e| {
                Error::config(format!("TLS: cannot build the certificate verifier: {e}"))
            })?;
        if settings.verify_hostname {
            builder.with_webpki_verifier(webpki)
        } else {
            log::debug!(
                "TLS: the brokers' host names are not checked against their certificates \
                 (ssl.endpoint.identification.algorithm is empty); the chain still is"
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyHostName { inner: webpki }))
        }
    };
    let config = match client_identity(settings)? {
        None => builder.with_no_client_auth(),
        Some(id) => builder
            .with_client_auth_cert(id.chain, id.key)
            .map_err(|e| identity_error(&e, &id.chain_origin, &id.key_origin, name))?,
    };
    Ok(Arc::new(config))
}

/// `ssl.truststore.type` / `ssl.keystore.type` other than PEM.
fn check_store_types(settings: &TlsSettings) -> Result<()> {
    let Some((key, value)) = settings.store_types.first() else {
        return Ok(());
    };
    let how = if key.contains("truststore") {
        "export the CA certificates as PEM with `keytool -exportcert -rfc -alias ALIAS \
         -keystore truststore.jks -file ca.pem` (PKCS#12: `openssl pkcs12 -in truststore.p12 \
         -nokeys -out ca.pem`), then set `ssl.truststore.type=PEM` and point \
         `ssl.truststore.location` at ca.pem (librdkafka: `ssl.ca.location`)"
    } else {
        "convert the keystore: `keytool -importkeystore -srckeystore keystore.jks \
         -destkeystore keystore.p12 -deststoretype PKCS12` (for JKS), then `openssl pkcs12 -in \
         keystore.p12 -nodes -out keystore.pem` (the key ends up unencrypted: keep the file \
         readable only by the consumer's user); then set `ssl.keystore.type=PEM`, point \
         `ssl.keystore.location` at keystore.pem and remove `ssl.keystore.password` and \
         `ssl.key.password`"
    };
    Err(Error::config(format!(
        "`{key}={value}`: only PEM stores are supported; {how}"
    )))
}

/// The CAs to trust: the configured PEM, or the operating system's roots.
fn trust_roots(settings: &TlsSettings) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    match &settings.ca {
        Some(pem) => {
            let loaded = load(Material::Trust, pem)?;
            let certs = loaded.certificates()?;
            let count = certs.len();
            for (i, cert) in certs.into_iter().enumerate() {
                roots.add(cert).map_err(|e| {
                    Error::config(format!(
                        "{}: certificate {} of {count} cannot be used as a trust anchor: {e}",
                        loaded.origin,
                        i + 1
                    ))
                })?;
            }
            log::debug!(
                "TLS: trusting {count} CA certificate(s) from {}",
                loaded.origin
            );
        }
        None if !settings.verify_certificate => {}
        None => {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                log::debug!("TLS: loading the system's CA certificates: {e}");
            }
            let (added, ignored) = roots.add_parsable_certificates(found.certs);
            log::debug!(
                "TLS: trusting {added} CA certificates of the operating system ({ignored} \
                 unusable, {} errors)",
                found.errors.len()
            );
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                return Err(Error::config(format!(
                    "TLS: no CA certificate of the operating system could be loaded{why}; set \
                     `ssl.truststore.location` (librdkafka `ssl.ca.location`) to a PEM file of \
                     the CA that signed the brokers' certificates"
                )));
            }
        }
    }
    Ok(roots)
}

/// The client's certificate chain and key, for mutual TLS.
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    chain_origin: String,
    key_origin: String,
}

fn client_identity(settings: &TlsSettings) -> Result<Option<Identity>> {
    let chain_setting = "`ssl.keystore.certificate.chain` (librdkafka `ssl.certificate.pem` or \
                         `ssl.certificate.location`)";
    let key_setting = "`ssl.keystore.key` (librdkafka `ssl.key.pem` or `ssl.key.location`)";
    match (
        &settings.keystore,
        &settings.certificate_chain,
        &settings.private_key,
    ) {
        (None, None, None) => Ok(None),
        (Some(store), None, None) => {
            let loaded = load(Material::Keystore, store)?;
            let key = loaded.private_key()?;
            let chain = loaded.certificates()?;
            Ok(Some(Identity {
                chain,
                key,
                chain_origin: loaded.origin.clone(),
                key_origin: loaded.origin,
            }))
        }
        (Some(store), _, _) => Err(Error::config(format!(
            "{} and a separate certificate chain or key are both set: set either the keystore, \
             or {chain_setting} with {key_setting}",
            Material::Keystore.setting(store)
        ))),
        (None, Some(chain), Some(key)) => {
            let chain_loaded = load(Material::Chain, chain)?;
            let key_loaded = load(Material::Key, key)?;
            Ok(Some(Identity {
                chain: chain_loaded.certificates()?,
                key: key_loaded.private_key()?,
                chain_origin: chain_loaded.origin,
                key_origin: key_loaded.origin,
            }))
        }
        (None, Some(chain), None) => Err(Error::config(format!(
            "{} is set but no private key is: set {key_setting} too (or put both in one PEM \
             file for `ssl.keystore.location`)",
            Material::Chain.setting(chain)
        ))),
        (None, None, Some(key)) => Err(Error::config(format!(
            "{} is set but no certificate chain is: set {chain_setting} too (or put both in one \
             PEM file for `ssl.keystore.location`)",
            Material::Key.setting(key)
        ))),
    }
}

/// rustls refused the client's certificate and key.
fn identity_error(e: &rustls::Error, chain: &str, key: &str, provider: &str) -> Error {
    let message = match e {
        rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch) => format!(
            "the private key in {key} does not belong to the first certificate in {chain} (the \
             chain must start with the client's own certificate)"
        ),
        rustls::Error::General(_) => format!(
            "the private key in {key} cannot be used with the {provider} crypto provider (use an \
             RSA, ECDSA P-256/P-384 or Ed25519 key): {e}"
        ),
        e => format!("the client certificate in {chain} cannot be used: {e}"),
    };
    Error::config(message)
}

// ----- verifiers ------------------------------------------------------------------------

/// `ssl.endpoint.identification.algorithm=` (empty): the WebPKI verification without its
/// host name check. The chain, validity and signatures are still verified: rustls checks
/// the name last, after the chain, so a name error means everything else passed.
#[derive(Debug)]
struct AnyHostName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `enable.ssl.certificate.verification=false`: any certificate is accepted, but the
/// handshake signatures are still verified (the peer holds the key of the certificate it
/// shows).
#[derive(Debug)]
struct AcceptAnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

// ----- messages -------------------------------------------------------------------------

/// What a connection knew when an error happened, to phrase it better.
#[derive(Debug, Clone, Copy, Default)]
struct Context {
    /// Whether the handshake had completed.
    established: bool,
    /// Whether a client certificate is configured (`None`: not known).
    client_cert: Option<bool>,
}

/// A rustls error as a user understands it: what happened and what to do. The caller adds
/// the broker's name.
pub(crate) fn describe(err: &rustls::Error) -> String {
    describe_in(err, Context::default())
}

/// An I/O error from [`TlsStream`]: the message of its TLS failure, or [`describe`] of a
/// rustls error inside it, or its own text.
#[allow(dead_code)] // for the connection's error messages
pub(crate) fn describe_io(err: &io::Error) -> String {
    if let Some(t) = tls_error(err) {
        return t.to_string();
    }
    match err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        Some(e) => describe(e),
        None => err.to_string(),
    }
}

const CLIENT_CERT_SETTINGS: &str = "set `ssl.keystore.location` (a PEM with the key and the \
     chain) or `ssl.keystore.certificate.chain` with `ssl.keystore.key` (librdkafka: \
     `ssl.certificate.location` with `ssl.key.location`)";

const TRUST_SETTINGS: &str = "set `ssl.truststore.location` (librdkafka: `ssl.ca.location`) to \
     a PEM file of the CA that signed the brokers' certificates";

fn describe_in(err: &rustls::Error, cx: Context) -> String {
    use rustls::Error as E;
    match err {
        E::InvalidCertificate(e) => describe_certificate(e),
        E::NoCertificatesPresented => "the broker presented no certificate".to_owned(),
        E::AlertReceived(alert) => describe_alert(*alert, cx),
        E::InvalidMessage(m) if !cx.established => format!(
            "the peer does not speak TLS: it sent something that is not a TLS record ({m:?}); \
             check that this port is the broker's SSL or SASL_SSL listener and that \
             security.protocol matches it"
        ),
        E::InvalidMessage(m) => format!("the broker sent a malformed TLS message ({m:?})"),
        E::InappropriateMessage { .. } | E::InappropriateHandshakeMessage { .. } => {
            format!("the broker sent a TLS message out of turn ({err})")
        }
        E::PeerIncompatible(p) => format!(
            "the broker and this client have no TLS version, cipher suite or key exchange in \
             common ({p:?}); this client speaks TLS 1.2 and 1.3 with ECDHE key exchange and \
             AES-GCM or ChaCha20-Poly1305"
        ),
        E::PeerMisbehaved(p) => format!("the broker broke the TLS protocol ({p:?})"),
        E::DecryptError => {
            "a TLS record did not decrypt (the data was corrupted or the peer is broken)".to_owned()
        }
        E::PeerSentOversizedRecord => "the broker sent an oversized TLS record".to_owned(),
        E::FailedToGetCurrentTime => {
            "this machine's clock could not be read (needed to check certificates)".to_owned()
        }
        E::FailedToGetRandomBytes => "no random numbers could be had from the system".to_owned(),
        E::InconsistentKeys(_) => {
            "the client's private key does not belong to its certificate".to_owned()
        }
        E::UnsupportedNameType => "this host name type cannot be verified".to_owned(),
        other => format!("TLS failed: {other}"),
    }
}

fn describe_certificate(e: &CertificateError) -> String {
    use CertificateError as C;
    let hostname = "see `ssl.endpoint.identification.algorithm`: connect with a name the \
                    certificate lists (the broker's advertised listener / bootstrap.servers), \
                    or set it empty to skip the host name check";
    match e {
        C::UnknownIssuer => format!(
            "the broker's certificate is not signed by a trusted CA (UnknownIssuer); \
             {TRUST_SETTINGS}"
        ),
        C::NotValidForName => {
            format!("the broker's certificate does not name the host connected to ({hostname})")
        }
        C::NotValidForNameContext {
            expected,
            presented,
        } => {
            let names = if presented.is_empty() {
                "it names no host in its subjectAltName extension".to_owned()
            } else {
                let names: Vec<&str> = presented.iter().map(|n| bare_name(n)).collect();
                format!("it is valid for {}", names.join(", "))
            };
            format!(
                "the broker's certificate does not name {} ({names}; {hostname})",
                expected.to_str()
            )
        }
        C::Expired => {
            "the broker's certificate has expired (or this machine's clock is wrong)".to_owned()
        }
        C::ExpiredContext { not_after, .. } => format!(
            "the broker's certificate has expired: it was valid until {} (or this machine's \
             clock is wrong)",
            utc(not_after.as_secs())
        ),
        C::NotValidYet => {
            "the broker's certificate is not yet valid (check this machine's clock)".to_owned()
        }
        C::NotValidYetContext { not_before, .. } => format!(
            "the broker's certificate is not yet valid: it is valid from {} (check this \
             machine's clock)",
            utc(not_before.as_secs())
        ),
        C::Revoked => "the broker's certificate has been revoked".to_owned(),
        C::BadSignature => "the broker's certificate chain has a bad signature".to_owned(),
        C::BadEncoding => "the broker's certificate is malformed".to_owned(),
        C::UnhandledCriticalExtension => {
            "the broker's certificate has a critical extension this client does not know".to_owned()
        }
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "the broker's certificate is not meant for TLS servers (its extended key usage)"
                .to_owned()
        }
        C::UnsupportedSignatureAlgorithmContext { .. }
        | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
            "the broker's certificate is signed with an algorithm this client does not support"
                .to_owned()
        }
        other => format!("the broker's certificate was refused: {other}"),
    }
}

fn describe_alert(alert: AlertDescription, cx: Context) -> String {
    use AlertDescription as A;
    let name = alert_name(alert);
    match alert {
        A::CertificateRequired => match cx.client_cert {
            Some(true) => {
                format!("the broker did not accept our client certificate (TLS alert {name})")
            }
            _ => format!(
                "the broker requires a client certificate and none is configured (TLS alert \
                 {name}); {CLIENT_CERT_SETTINGS}"
            ),
        },
        A::BadCertificate
        | A::UnsupportedCertificate
        | A::CertificateRevoked
        | A::CertificateExpired
        | A::CertificateUnknown
        | A::UnknownCA
        | A::AccessDenied => match cx.client_cert {
            Some(true) => format!(
                "the broker refused our client certificate (TLS alert {name}): the broker must \
                 trust the CA that signed it, and it must be valid and meant for client \
                 authentication"
            ),
            Some(false) => format!(
                "the broker refused the connection (TLS alert {name}): it asked for a client \
                 certificate and none is configured; {CLIENT_CERT_SETTINGS}"
            ),
            None => format!(
                "the broker refused our client certificate, or requires one and none is \
                 configured (TLS alert {name})"
            ),
        },
        A::HandshakeFailure => {
            let cert = match cx.client_cert {
                Some(false) => "or it requires a client certificate and none is configured",
                Some(true) => "or it refused our client certificate",
                None => "or it requires a client certificate",
            };
            format!(
                "the broker refused the TLS handshake (TLS alert {name}): no TLS version or \
                 cipher suite in common, {cert}"
            )
        }
        A::ProtocolVersion => format!(
            "the broker does not accept TLS 1.2 or 1.3 (TLS alert {name}); older versions are \
             not supported"
        ),
        A::InsufficientSecurity => format!(
            "the broker wants stronger cipher suites than this client offers (TLS alert {name})"
        ),
        A::UnrecognisedName => format!(
            "the broker does not know the host name this client asked for (TLS alert {name}); \
             connect with a name the broker serves"
        ),
        A::DecodeError | A::IllegalParameter | A::UnexpectedMessage | A::DecryptError => {
            format!("the broker could not make sense of this client's TLS (TLS alert {name})")
        }
        _ => format!("the broker ended the TLS connection with alert {name}"),
    }
}

/// A name as rustls presents it (`DnsName("a.example")`, `IpAddress(10.0.0.1)`), bare.
fn bare_name(presented: &str) -> &str {
    for prefix in ["DnsName(", "IpAddress(", "UriName("] {
        if let Some(inner) = presented
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(')'))
        {
            return inner.trim_matches('"');
        }
    }
    presented
}

/// The RFC name of a TLS alert.
fn alert_name(alert: AlertDescription) -> String {
    use AlertDescription as A;
    let name = match alert {
        A::CloseNotify => "close_notify",
        A::UnexpectedMessage => "unexpected_message",
        A::BadRecordMac => "bad_record_mac",
        A::RecordOverflow => "record_overflow",
        A::HandshakeFailure => "handshake_failure",
        A::BadCertificate => "bad_certificate",
        A::UnsupportedCertificate => "unsupported_certificate",
        A::CertificateRevoked => "certificate_revoked",
        A::CertificateExpired => "certificate_expired",
        A::CertificateUnknown => "certificate_unknown",
        A::IllegalParameter => "illegal_parameter",
        A::UnknownCA => "unknown_ca",
        A::AccessDenied => "access_denied",
        A::DecodeError => "decode_error",
        A::DecryptError => "decrypt_error",
        A::ProtocolVersion => "protocol_version",
        A::InsufficientSecurity => "insufficient_security",
        A::InternalError => "internal_error",
        A::InappropriateFallback => "inappropriate_fallback",
        A::UserCanceled => "user_canceled",
        A::NoRenegotiation => "no_renegotiation",
        A::MissingExtension => "missing_extension",
        A::UnsupportedExtension => "unsupported_extension",
        A::UnrecognisedName => "unrecognized_name",
        A::BadCertificateStatusResponse => "bad_certificate_status_response",
        A::UnknownPSKIdentity => "unknown_psk_identity",
        A::CertificateRequired => "certificate_required",
        A::NoApplicationProtocol => "no_application_protocol",
        other => return format!("{other:?}"),
    };
    name.to_owned()
}

/// `secs` since the epoch as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The TLS failure inside an `io::Error` from [`TlsStream`], if it is one: an [`Error`] of
/// kind [`ErrorKind::Tls`] whose message is already phrased for the user (the caller adds
/// the broker's name) and whose `source()` is the `rustls::Error` when one caused it (see
/// [`rustls_cause`]). The other I/O errors of a TLS connection are ordinary socket errors.
#[allow(dead_code)] // for the connection's error handling
pub(crate) fn tls_error(e: &io::Error) -> Option<&Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<Error>())
        .filter(|e| e.kind() == ErrorKind::Tls)
}

/// The rustls error that caused a TLS failure, if one did.
#[allow(dead_code)] // for the connection's error handling
pub(crate) fn rustls_cause(e: &Error) -> Option<&rustls::Error> {
    std::error::Error::source(e).and_then(|s| s.downcast_ref::<rustls::Error>())
}

fn tls_io_error(kind: io::ErrorKind, message: String, cause: Option<rustls::Error>) -> io::Error {
    let mut err = Error::new(ErrorKind::Tls, message);
    if let Some(cause) = cause {
        err = err.with_source(cause);
    }
    io::Error::new(kind, err)
}

// ----- the transport --------------------------------------------------------------------

/// The TLS state of one client connection over a non-blocking socket it does not own.
pub(crate) struct TlsStream {
    conn: ClientConnection,
    /// The host name (for logs).
    host: String,
    client_cert: bool,
    /// Whether any byte came from the peer (to tell "closed at once" from later).
    received_any: bool,
    established_logged: bool,
}

#[allow(dead_code)] // the connection uses what it needs
impl TlsStream {
    /// A client connection to `host` (a DNS name or an IP address; sent as SNI when it is a
    /// name, and checked against the broker's certificate). A host that is neither is an
    /// error of kind [`ErrorKind::Config`].
    pub fn new(config: &Arc<ClientConfig>, host: &str) -> Result<TlsStream> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let name = ServerName::try_from(bare.to_owned()).map_err(|_| {
            Error::config(format!(
                "`{host}` is not a valid host name or IP address for TLS (check \
                 bootstrap.servers and the brokers' advertised listeners)"
            ))
        })?;
        let mut conn = ClientConnection::new(Arc::clone(config), name).map_err(|e| {
            Error::new(ErrorKind::Tls, format!("TLS with {host}: {}", describe(&e))).with_source(e)
        })?;
        conn.set_buffer_limit(Some(SEND_BUFFER_LIMIT));
        Ok(TlsStream {
            conn,
            host: host.to_owned(),
            client_cert: config.client_auth_cert_resolver.has_certs(),
            received_any: false,
            established_logged: false,
        })
    }

    /// Whether the handshake is still under way.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Whether TLS bytes wait to go to the socket: keep WRITABLE interest while true.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Reads TLS records from `sock` and hands out the plaintext in them.
    ///
    /// `Ok(n > 0)`: plaintext bytes. `Err(WouldBlock)`: no plaintext, and the socket was
    /// read until it would block (mio is edge-triggered: call until this). `Ok(0)`: the
    /// broker closed the TLS session cleanly (close_notify), or `buf` is empty. A TCP EOF
    /// without close_notify is `Err(UnexpectedEof)`; a TLS failure is an `io::Error`
    /// carrying an [`Error`] of kind [`ErrorKind::Tls`] (see [`tls_error`]). Handshake
    /// messages due in answer are written to `sock` on the way, as far as it takes them; the
    /// rest waits for [`TlsStream::flush_tls`] ([`TlsStream::wants_write`] is true).
    pub fn read_plain(
        &mut self,
        sock: &mut (impl Read + Write),
        buf: &mut [u8],
    ) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(self.unexpected_eof())
                }
                Err(e) => return Err(e),
            }
            // No plaintext buffered: more records from the socket.
            match self.conn.read_tls(sock) {
                Ok(n) => self.received_any |= n > 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e),
                Err(e) => return Err(self.socket_error(e, "reading")),
            }
            if let Err(e) = self.conn.process_new_packets() {
                // rustls queued an alert for the broker: send it if the socket takes it.
                let _ = self.flush_tls(sock);
                return Err(self.failure(e));
            }
            if !self.established_logged && !self.conn.is_handshaking() {
                self.established_logged = true;
                log::debug!(
                    "TLS with {}: {:?}, {:?}",
                    self.host,
                    self.conn.protocol_version(),
                    self.conn.negotiated_cipher_suite().map(|s| s.suite())
                );
            }
            if self.conn.wants_write() {
                // Handshake answers (and plaintext released by its end). A write error here
                // is left for the next flush_tls to report: reading on may explain it (an
                // alert from the broker).
                if let Err(e) = self.flush_tls(sock) {
                    log::trace!("TLS with {}: writing while reading: {e}", self.host);
                }
            }
        }
    }

    /// Hands plaintext to rustls, then writes TLS records to `sock` until it would block.
    /// Returns how many bytes rustls took (it keeps them: they are sent by this call or a
    /// later [`TlsStream::flush_tls`]); `Err(WouldBlock)` only when it took none, because
    /// its buffers are full (then the socket would block, or the handshake has not ended).
    pub fn write_plain(&mut self, sock: &mut (impl Read + Write), buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let n = self.conn.writer().write(buf)?;
            if n > 0 {
                self.flush_tls(sock)?;
                return Ok(n);
            }
            // Full. Make room by writing, if the socket takes anything.
            if !self.conn.wants_write() || !self.write_some(sock)? {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
    }

    /// Writes pending TLS records (handshake messages, alerts, data) until the socket would
    /// block or none is left.
    pub fn flush_tls(&mut self, sock: &mut impl Write) -> io::Result<()> {
        while self.conn.wants_write() {
            if !self.write_some(sock)? {
                break;
            }
        }
        Ok(())
    }

    /// Queues a close_notify alert and writes what the socket takes (best effort, before
    /// closing the socket).
    pub fn close_notify(&mut self, sock: &mut impl Write) {
        self.conn.send_close_notify();
        let _ = self.flush_tls(sock);
    }

    /// One `write_tls`: whether it wrote anything (false: the socket would block).
    fn write_some(&mut self, sock: &mut impl Write) -> io::Result<bool> {
        loop {
            match self.conn.write_tls(sock) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the socket took no TLS bytes",
                    ))
                }
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(self.socket_error(e, "writing")),
            }
        }
    }

    fn context(&self) -> Context {
        Context {
            established: !self.conn.is_handshaking(),
            client_cert: Some(self.client_cert),
        }
    }

    /// A fatal TLS error from rustls.
    fn failure(&self, e: rustls::Error) -> io::Error {
        let message = describe_in(&e, self.context());
        log::debug!("TLS with {}: {e}", self.host);
        tls_io_error(io::ErrorKind::InvalidData, message, Some(e))
    }

    /// TCP EOF without close_notify.
    fn unexpected_eof(&self) -> io::Error {
        if !self.conn.is_handshaking() {
            return io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the broker closed the connection (without a TLS close_notify)",
            );
        }
        let message = if self.received_any {
            "the broker closed the connection during the TLS handshake (without a TLS alert): \
             it may not speak TLS on this port, or it may have refused our client certificate"
        } else {
            "the broker closed the connection without answering the TLS handshake: it does \
             not seem to speak TLS on this port (a PLAINTEXT or SASL_PLAINTEXT listener closes \
             on a TLS hello); check security.protocol and the port"
        };
        tls_io_error(io::ErrorKind::UnexpectedEof, message.to_owned(), None)
    }

    /// A socket error; during the handshake it most likely means the broker does not speak
    /// TLS, and says so.
    fn socket_error(&self, e: io::Error, doing: &str) -> io::Error {
        if !self.conn.is_handshaking() || tls_error(&e).is_some() {
            return e;
        }
        tls_io_error(
            e.kind(),
            format!(
                "{doing} failed during the TLS handshake ({e}): the broker may not speak TLS \
                 on this port (check security.protocol and the port), or it refused our \
                 client certificate"
            ),
            None,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::Secret;
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    const CA: &str = include_str!("../../tests/data/tls/ca.pem");
    const OTHER_CA: &str = include_str!("../../tests/data/tls/other-ca.pem");
    const SERVER_CERT: &str = include_str!("../../tests/data/tls/server.pem");
    const SERVER_KEY: &str = include_str!("../../tests/data/tls/server.key");
    const CLIENT_CERT: &str = include_str!("../../tests/data/tls/client.pem");
    const CLIENT_KEY: &str = include_str!("../../tests/data/tls/client.key");
    const CLIENT_SEC1_KEY: &str = include_str!("../../tests/data/tls/client-sec1.key");
    const CLIENT_KEYSTORE: &str = include_str!("../../tests/data/tls/client-keystore.pem");
    const CLIENT_RSA_CERT: &str = include_str!("../../tests/data/tls/client-rsa.pem");
    const CLIENT_RSA_KEY: &str = include_str!("../../tests/data/tls/client-rsa.key");
    const ENCRYPTED_KEY: &str = include_str!("../../tests/data/tls/client-encrypted.key");
    const LEGACY_ENCRYPTED_KEY: &str =
        include_str!("../../tests/data/tls/client-legacy-encrypted.key");

    /// A file in the temporary directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, content: &[u8]) -> TempFile {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "kafka-consumer-tls-{}-{}-{name}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&path, content).unwrap();
            TempFile(path)
        }

        fn pem(&self) -> Pem {
            Pem::File(self.0.clone())
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn inline(s: &str) -> Pem {
        Pem::Inline(Secret::new(s))
    }

    fn trusting(ca: &str) -> TlsSettings {
        TlsSettings {
            ca: Some(inline(ca)),
            ..TlsSettings::default()
        }
    }

    fn config_error(settings: &TlsSettings) -> Error {
        match client_config(settings) {
            Ok(_) => panic!("expected an error for {settings:?}"),
            Err(e) => e,
        }
    }

    fn assert_contains(message: &str, parts: &[&str]) {
        for p in parts {
            assert!(message.contains(p), "`{p}` not in: {message}");
        }
    }

    // ----- configuration ---------------------------------------------------------------

    #[test]
    fn provider_is_chosen() {
        let name = provider_name();
        if cfg!(feature = "tls-graviola") && graviola_missing_cpu_features().is_empty() {
            assert_eq!(name, "graviola");
        } else if cfg!(feature = "tls-ring") {
            assert_eq!(name, "ring");
        }
        let e = graviola_unsuitable(&["adx", "bmi2"]);
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert_contains(&e.to_string(), &["adx, bmi2", "`tls-ring`"]);
    }

    #[test]
    fn good_configurations_build() {
        client_config(&trusting(CA)).unwrap();
        let file = TempFile::new("ca.pem", CA.as_bytes());
        client_config(&TlsSettings {
            ca: Some(file.pem()),
            ..TlsSettings::default()
        })
        .unwrap();
        // Client identities: PKCS#8, SEC1, PKCS#1 (RSA), a keystore file, files.
        for (chain, key) in [
            (CLIENT_CERT, CLIENT_KEY),
            (CLIENT_CERT, CLIENT_SEC1_KEY),
            (CLIENT_RSA_CERT, CLIENT_RSA_KEY),
        ] {
            let config = client_config(&TlsSettings {
                certificate_chain: Some(inline(chain)),
                private_key: Some(inline(key)),
                ..trusting(CA)
            })
            .unwrap();
            assert!(config.client_auth_cert_resolver.has_certs());
        }
        let store = TempFile::new("keystore.pem", CLIENT_KEYSTORE.as_bytes());
        client_config(&TlsSettings {
            keystore: Some(store.pem()),
            ..trusting(CA)
        })
        .unwrap();
        let chain = TempFile::new("client.pem", CLIENT_CERT.as_bytes());
        let key = TempFile::new("client.key", CLIENT_KEY.as_bytes());
        client_config(&TlsSettings {
            certificate_chain: Some(chain.pem()),
            private_key: Some(key.pem()),
            ..trusting(CA)
        })
        .unwrap();
        client_config(&TlsSettings {
            verify_hostname: false,
            ..trusting(CA)
        })
        .unwrap();
        client_config(&TlsSettings {
            verify_certificate: false,
            ..TlsSettings::default()
        })
        .unwrap();
    }

    #[test]
    fn os_roots_load_or_say_what_to_set() {
        match client_config(&TlsSettings::default()) {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Config);
                assert_contains(
                    &e.to_string(),
                    &["ssl.truststore.location", "ssl.ca.location"],
                );
            }
        }
    }

    #[test]
    fn missing_and_unreadable_files_are_named() {
        let missing = std::env::temp_dir().join("kafka-consumer-tls-no-such-file.pem");
        let e = config_error(&TlsSettings {
            ca: Some(Pem::File(missing.clone())),
            ..TlsSettings::default()
        });
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_contains(
            &e.to_string(),
            &[
                "ssl.truststore.location",
                "ssl.ca.location",
                &missing.display().to_string(),
                "does not exist",
            ],
        );
        // A directory cannot be read as a file.
        let e = config_error(&TlsSettings {
            private_key: Some(Pem::File(std::env::temp_dir())),
            certificate_chain: Some(inline(CLIENT_CERT)),
            ..trusting(CA)
        });
        assert_contains(&e.to_string(), &["ssl.key.location", "cannot read"]);
    }

    #[test]
    fn binary_stores_are_refused_with_how_to_convert() {
        let jks = TempFile::new(
            "truststore.jks",
            &[0xFE, 0xED, 0xFE, 0xED, 0, 0, 0, 2, 0, 0],
        );
        let e = config_error(&TlsSettings {
            ca: Some(jks.pem()),
            ..TlsSettings::default()
        });
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_contains(
            &e.to_string(),
            &[
                "ssl.truststore.location",
                "is not PEM",
                "JKS",
                "only PEM is supported",
                "keytool -exportcert -rfc",
                "openssl pkcs12 -in store.p12 -nokeys -out ca.pem",
            ],
        );
        let p12 = TempFile::new("keystore.p12", &[0x30, 0x82, 0x0A, 0x1B, 0x02, 0x01, 0x03]);
        let e = config_error(&TlsSettings {
            keystore: Some(p12.pem()),
            ..trusting(CA)
        });
        assert_contains(
            &e.to_string(),
            &[
                "ssl.keystore.location",
                "PKCS#12",
                "keytool -importkeystore",
                "-nodes",
            ],
        );
    }

    #[test]
    fn pem_without_certificates_is_refused() {
        let e = config_error(&trusting(CLIENT_KEY));
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_contains(
            &e.to_string(),
            &[
                "ssl.truststore.certificates",
                "ssl.ca.pem",
                "no certificate",
                "PRIVATE KEY",
            ],
        );
        let empty = TempFile::new("empty.pem", b"");
        let e = config_error(&TlsSettings {
            ca: Some(empty.pem()),
            ..TlsSettings::default()
        });
        assert_contains(&e.to_string(), &["no certificate", "no PEM block"]);
        let e = config_error(&TlsSettings {
            keystore: Some(inline(CLIENT_KEY)),
            ..trusting(CA)
        });
        assert_contains(
            &e.to_string(),
            &["no certificate", "holds the private key and the"],
        );
        let e = config_error(&TlsSettings {
            keystore: Some(inline(CLIENT_CERT)),
            ..trusting(CA)
        });
        assert_contains(
            &e.to_string(),
            &["no private key", "holds the private key and the"],
        );
        let truncated = &CA[..CA.len() - 30];
        let e = config_error(&trusting(truncated));
        assert_contains(&e.to_string(), &["malformed PEM"]);
    }

    #[test]
    fn encrypted_keys_are_refused() {
        for key in [ENCRYPTED_KEY, LEGACY_ENCRYPTED_KEY] {
            let e = config_error(&TlsSettings {
                certificate_chain: Some(inline(CLIENT_CERT)),
                private_key: Some(inline(key)),
                ..trusting(CA)
            });
            assert_eq!(e.kind(), ErrorKind::Config);
            assert_contains(
                &e.to_string(),
                &[
                    "ssl.keystore.key",
                    "ssl.key.pem",
                    "encrypted private keys are not supported",
                    "openssl pkcs8 -topk8 -nocrypt -in key.pem -out key-plain.pem",
                    "readable only by the consumer's user",
                ],
            );
            // No key material in the message.
            assert!(!e.to_string().contains(&key[40..60]));
        }
        let store = TempFile::new(
            "keystore.pem",
            format!("{ENCRYPTED_KEY}{CLIENT_CERT}").as_bytes(),
        );
        let e = config_error(&TlsSettings {
            keystore: Some(store.pem()),
            ..trusting(CA)
        });
        assert_contains(&e.to_string(), &["ssl.keystore.location", "encrypted"]);
    }

    #[test]
    fn a_key_password_is_refused() {
        let e = config_error(&TlsSettings {
            key_password: Some(Secret::new("hunter2")),
            certificate_chain: Some(inline(CLIENT_CERT)),
            private_key: Some(inline(CLIENT_KEY)),
            ..trusting(CA)
        });
        assert_eq!(e.kind(), ErrorKind::Config);
        let m = e.to_string();
        assert_contains(
            &m,
            &[
                "ssl.key.password",
                "encrypted private keys are not supported",
                "openssl pkcs8",
            ],
        );
        assert!(!m.contains("hunter2"));
    }

    #[test]
    fn half_an_identity_is_refused() {
        let e = config_error(&TlsSettings {
            certificate_chain: Some(inline(CLIENT_CERT)),
            ..trusting(CA)
        });
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_contains(
            &e.to_string(),
            &[
                "ssl.keystore.certificate.chain",
                "no private key",
                "ssl.keystore.key",
                "ssl.key.location",
            ],
        );
        let key = TempFile::new("client.key", CLIENT_KEY.as_bytes());
        let e = config_error(&TlsSettings {
            private_key: Some(key.pem()),
            ..trusting(CA)
        });
        assert_contains(
            &e.to_string(),
            &[
                "ssl.key.location",
                "no certificate chain",
                "ssl.certificate.location",
            ],
        );
        // A key that is not the certificate's.
        let e = config_error(&TlsSettings {
            certificate_chain: Some(inline(CLIENT_RSA_CERT)),
            private_key: Some(inline(CLIENT_KEY)),
            ..trusting(CA)
        });
        assert_contains(&e.to_string(), &["does not belong"]);
        let e = config_error(&TlsSettings {
            keystore: Some(inline(CLIENT_KEYSTORE)),
            private_key: Some(inline(CLIENT_KEY)),
            ..trusting(CA)
        });
        assert_contains(&e.to_string(), &["both set"]);
    }

    #[test]
    fn jks_and_pkcs12_store_types_are_refused() {
        let e = config_error(&TlsSettings {
            store_types: vec![("ssl.truststore.type".into(), "JKS".into())],
            ..trusting(CA)
        });
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_contains(
            &e.to_string(),
            &[
                "ssl.truststore.type=JKS",
                "only PEM",
                "keytool -exportcert -rfc",
                "ssl.ca.location",
            ],
        );
        let e = config_error(&TlsSettings {
            store_types: vec![("ssl.keystore.type".into(), "PKCS12".into())],
            ..trusting(CA)
        });
        assert_contains(
            &e.to_string(),
            &[
                "ssl.keystore.type=PKCS12",
                "only PEM",
                "keytool -importkeystore",
                "openssl pkcs12 -in keystore.p12 -nodes",
            ],
        );
    }

    #[test]
    fn bad_host_names_are_config_errors() {
        let config = client_config(&trusting(CA)).unwrap();
        TlsStream::new(&config, "broker.test").unwrap();
        TlsStream::new(&config, "127.0.0.1").unwrap();
        TlsStream::new(&config, "[::1]").unwrap();
        let e = TlsStream::new(&config, "no such host!").err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_contains(&e.to_string(), &["no such host!"]);
    }

    // ----- messages --------------------------------------------------------------------

    #[test]
    fn describe_says_what_happened() {
        use rustls::Error as E;
        let m = describe(&E::InvalidCertificate(CertificateError::UnknownIssuer));
        assert_contains(
            &m,
            &[
                "not signed by a trusted CA",
                "ssl.truststore.location",
                "ssl.ca.location",
            ],
        );
        let m = describe(&E::InvalidCertificate(
            CertificateError::NotValidForNameContext {
                expected: ServerName::try_from("kafka-1.example").unwrap(),
                presented: vec![
                    "DnsName(\"localhost\")".into(),
                    "DnsName(\"broker.test\")".into(),
                ],
            },
        ));
        assert_contains(
            &m,
            &[
                "does not name kafka-1.example",
                "valid for",
                "broker.test",
                "ssl.endpoint.identification.algorithm",
            ],
        );
        let m = describe(&E::InvalidCertificate(CertificateError::ExpiredContext {
            time: UnixTime::since_unix_epoch(Duration::from_secs(1_800_000_000)),
            not_after: UnixTime::since_unix_epoch(Duration::from_secs(1_700_000_000)),
        }));
        assert_contains(&m, &["has expired", "2023-11-14 22:13:20 UTC"]);
        let m = describe(&E::InvalidCertificate(CertificateError::NotValidYet));
        assert_contains(&m, &["not yet valid", "clock"]);
        let m = describe(&E::AlertReceived(AlertDescription::BadCertificate));
        assert_contains(&m, &["refused our client certificate", "bad_certificate"]);
        let m = describe_in(
            &E::AlertReceived(AlertDescription::CertificateRequired),
            Context {
                established: false,
                client_cert: Some(false),
            },
        );
        assert_contains(
            &m,
            &[
                "requires a client certificate and none is configured",
                "ssl.keystore.location",
            ],
        );
        let m = describe_in(
            &E::AlertReceived(AlertDescription::UnknownCA),
            Context {
                established: false,
                client_cert: Some(true),
            },
        );
        assert_contains(&m, &["refused our client certificate", "unknown_ca"]);
        let m = describe(&E::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        ));
        assert_contains(&m, &["does not speak TLS", "security.protocol"]);
        let m = describe(&E::PeerIncompatible(
            rustls::PeerIncompatible::NoCipherSuitesInCommon,
        ));
        assert_contains(&m, &["in common"]);
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(4_102_444_800), "2100-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    }

    /// The verifiers, called directly: the name check can be turned off alone; an expired
    /// chain is reported as such.
    #[test]
    fn verifiers_check_what_they_should() {
        let server: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(SERVER_CERT.as_bytes())
                .collect::<std::result::Result<_, _>>()
                .unwrap();
        let (provider, _) = select_provider().unwrap();
        let roots = |ca: &str| {
            let mut r = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                r.add(c.unwrap()).unwrap();
            }
            Arc::new(r)
        };
        let webpki = WebPkiServerVerifier::builder_with_provider(roots(CA), Arc::clone(&provider))
            .build()
            .unwrap();
        let now = UnixTime::now();
        let wrong = ServerName::try_from("wrong.example").unwrap();
        let right = ServerName::try_from("broker.test").unwrap();
        let e = webpki
            .verify_server_cert(&server[0], &[], &wrong, &[], now)
            .unwrap_err();
        assert_contains(
            &describe(&e),
            &["does not name wrong.example", "broker.test"],
        );
        let any_name = AnyHostName {
            inner: Arc::clone(&webpki),
        };
        any_name
            .verify_server_cert(&server[0], &[], &wrong, &[], now)
            .unwrap();
        // ... but not a certificate of an unknown CA, nor an expired one.
        let other = AnyHostName {
            inner: WebPkiServerVerifier::builder_with_provider(
                roots(OTHER_CA),
                Arc::clone(&provider),
            )
            .build()
            .unwrap(),
        };
        let e = other
            .verify_server_cert(&server[0], &[], &wrong, &[], now)
            .unwrap_err();
        assert_contains(&describe(&e), &["not signed by a trusted CA"]);
        let in_2200 = UnixTime::since_unix_epoch(Duration::from_secs(7_258_118_400));
        let e = any_name
            .verify_server_cert(&server[0], &[], &right, &[], in_2200)
            .unwrap_err();
        assert_contains(&describe(&e), &["has expired", "2120-01-01 00:00:00 UTC"]);
        let in_2000 = UnixTime::since_unix_epoch(Duration::from_secs(946_684_800));
        let e = webpki
            .verify_server_cert(&server[0], &[], &right, &[], in_2000)
            .unwrap_err();
        assert_contains(&describe(&e), &["not yet valid", "2020-01-01"]);
    }

    // ----- the transport over loopback -------------------------------------------------

    fn server_config(client_auth: bool) -> Arc<rustls::ServerConfig> {
        server_config_with(client_auth, rustls::DEFAULT_VERSIONS)
    }

    fn server_config_with(
        client_auth: bool,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<rustls::ServerConfig> {
        let (provider, _) = select_provider().unwrap();
        let certs = CertificateDer::pem_slice_iter(SERVER_CERT.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(SERVER_KEY.as_bytes()).unwrap();
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(versions)
            .unwrap();
        let builder = if client_auth {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(CA.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        Arc::new(builder.with_single_cert(certs, key).unwrap())
    }

    /// A server on 127.0.0.1 that runs `script` on the first connection, in a thread.
    fn serve<F>(script: F) -> (SocketAddr, JoinHandle<std::result::Result<(), String>>)
    where
        F: FnOnce(TcpStream) -> std::result::Result<(), String> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = std::thread::spawn(move || {
            let (sock, _) = listener.accept().map_err(|e| e.to_string())?;
            sock.set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            sock.set_write_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            script(sock)
        });
        (addr, handle)
    }

    fn pattern(len: usize, seed: u32) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    const MIB: usize = 1024 * 1024;

    /// The TLS server of the round trip: sends 1 MiB, reads 1 MiB and checks it, sends
    /// `ok`, and closes with close_notify.
    fn tls_server(
        config: Arc<rustls::ServerConfig>,
    ) -> impl FnOnce(TcpStream) -> std::result::Result<(), String> {
        move |sock| {
            let conn = rustls::ServerConnection::new(config).map_err(|e| e.to_string())?;
            let mut tls = rustls::StreamOwned::new(conn, sock);
            tls.write_all(&pattern(MIB, 1)).map_err(|e| e.to_string())?;
            let mut got = vec![0; MIB];
            tls.read_exact(&mut got).map_err(|e| e.to_string())?;
            if got != pattern(MIB, 2) {
                return Err("the server got other bytes than sent".into());
            }
            tls.write_all(b"ok").map_err(|e| e.to_string())?;
            tls.conn.send_close_notify();
            tls.flush().map_err(|e| e.to_string())?;
            Ok(())
        }
    }

    /// The client side as the connection drives it: a non-blocking mio socket, an
    /// edge-triggered poll, WRITABLE interest only while something waits to be written.
    /// Sends `payload`, reads until the TLS session closes; returns what it read or the
    /// first error. Panics if no event comes for 20 s (a lost wake-up: a hang).
    fn run_client(
        addr: SocketAddr,
        config: &Arc<ClientConfig>,
        host: &str,
        payload: &[u8],
    ) -> io::Result<Vec<u8>> {
        use mio::{Events, Interest, Poll, Token};
        let mut poll = Poll::new()?;
        let mut events = Events::with_capacity(8);
        let mut sock = mio::net::TcpStream::connect(addr)?;
        poll.registry()
            .register(&mut sock, Token(1), Interest::READABLE | Interest::WRITABLE)?;
        let mut writable = true;
        let mut connected = false;
        let mut tls = TlsStream::new(config, host).map_err(io::Error::other)?;
        let mut sent = 0;
        let mut received = Vec::new();
        // Odd read sizes, as the connection reads frame heads and bodies.
        let sizes = [4usize, 7919, 65536, 1];
        let mut buf = vec![0u8; 65536];
        let mut reads = 0usize;
        loop {
            poll.poll(&mut events, Some(Duration::from_secs(20)))?;
            if events.is_empty() {
                panic!(
                    "no event for 20 s: the client hung (sent {sent}, received {}, \
                     handshaking {}, wants_write {})",
                    received.len(),
                    tls.is_handshaking(),
                    tls.wants_write()
                );
            }
            if !connected {
                if let Some(e) = sock.take_error()? {
                    return Err(e);
                }
                match sock.peer_addr() {
                    Ok(_) => connected = true,
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => continue,
                    Err(e) => return Err(e),
                }
                tls.flush_tls(&mut sock)?;
            }
            for round in 0..2 {
                while sent < payload.len() {
                    match tls.write_plain(&mut sock, &payload[sent..]) {
                        Ok(n) => sent += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
                tls.flush_tls(&mut sock)?;
                if round == 1 {
                    break;
                }
                loop {
                    let size = sizes[reads % sizes.len()];
                    reads += 1;
                    match tls.read_plain(&mut sock, &mut buf[..size]) {
                        Ok(0) => return Ok(received),
                        Ok(n) => received.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            let want = sent < payload.len() || tls.wants_write();
            if want != writable {
                let interest = if want {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                poll.registry().reregister(&mut sock, Token(1), interest)?;
                writable = want;
            }
        }
    }

    fn expect_tls_error(result: io::Result<Vec<u8>>) -> String {
        match result {
            Ok(got) => panic!("expected an error, got {} bytes", got.len()),
            Err(e) => {
                assert!(tls_error(&e).is_some(), "not a TLS error: {e:?}");
                describe_io(&e)
            }
        }
    }

    #[test]
    fn a_mebibyte_each_way_over_tls() {
        let (addr, server) = serve(tls_server(server_config(false)));
        let config = client_config(&trusting(CA)).unwrap();
        let got = run_client(addr, &config, "localhost", &pattern(MIB, 2)).unwrap();
        assert_eq!(got.len(), MIB + 2);
        assert!(
            got[..MIB] == pattern(MIB, 1)[..],
            "the client got other bytes than sent"
        );
        assert_eq!(&got[MIB..], b"ok");
        server.join().unwrap().unwrap();
    }

    #[test]
    fn a_mebibyte_each_way_over_tls12_with_client_certificate() {
        let (addr, server) = serve(tls_server(server_config_with(
            true,
            &[&rustls::version::TLS12],
        )));
        let config = client_config(&TlsSettings {
            certificate_chain: Some(inline(CLIENT_RSA_CERT)),
            private_key: Some(inline(CLIENT_RSA_KEY)),
            ..trusting(CA)
        })
        .unwrap();
        let got = run_client(addr, &config, "broker.test", &pattern(MIB, 2)).unwrap();
        assert_eq!(got.len(), MIB + 2);
        assert!(
            got[..MIB] == pattern(MIB, 1)[..],
            "the client got other bytes than sent"
        );
        server.join().unwrap().unwrap();

        // TLS 1.2 without a client certificate: the broker's alert names no reason.
        let (addr, server) = serve(tls_server(server_config_with(
            true,
            &[&rustls::version::TLS12],
        )));
        let config = client_config(&trusting(CA)).unwrap();
        let m = expect_tls_error(run_client(addr, &config, "broker.test", b"hello"));
        assert_contains(&m, &["client certificate", "none is configured"]);
        assert!(server.join().unwrap().is_err());
    }

    #[test]
    fn mutual_tls_round_trip_and_missing_client_certificate() {
        let (addr, server) = serve(tls_server(server_config(true)));
        let config = client_config(&TlsSettings {
            keystore: Some(inline(CLIENT_KEYSTORE)),
            ..trusting(CA)
        })
        .unwrap();
        // By IP address: no SNI, the certificate names 127.0.0.1.
        let got = run_client(addr, &config, "127.0.0.1", &pattern(MIB, 2)).unwrap();
        assert_eq!(got.len(), MIB + 2);
        server.join().unwrap().unwrap();

        let (addr, server) = serve(tls_server(server_config(true)));
        let config = client_config(&trusting(CA)).unwrap();
        let m = expect_tls_error(run_client(addr, &config, "localhost", b"hello"));
        assert_contains(
            &m,
            &[
                "client certificate",
                "none is configured",
                "ssl.keystore.location",
            ],
        );
        assert!(server.join().unwrap().is_err());
    }

    #[test]
    fn host_name_mismatch_and_unknown_ca_are_named() {
        let (addr, server) = serve(tls_server(server_config(false)));
        let config = client_config(&trusting(CA)).unwrap();
        let m = expect_tls_error(run_client(addr, &config, "kafka-9.example", b"hello"));
        assert_contains(
            &m,
            &[
                "does not name kafka-9.example",
                "valid for localhost, broker.test, 127.0.0.1;",
                "ssl.endpoint.identification.algorithm",
            ],
        );
        assert!(server.join().unwrap().is_err());

        // The same server with the name check off.
        let (addr, server) = serve(tls_server(server_config(false)));
        let config = client_config(&TlsSettings {
            verify_hostname: false,
            ..trusting(CA)
        })
        .unwrap();
        let got = run_client(addr, &config, "kafka-9.example", &pattern(MIB, 2)).unwrap();
        assert_eq!(got.len(), MIB + 2);
        server.join().unwrap().unwrap();

        let (addr, server) = serve(tls_server(server_config(false)));
        let config = client_config(&trusting(OTHER_CA)).unwrap();
        let m = expect_tls_error(run_client(addr, &config, "localhost", b"hello"));
        assert_contains(
            &m,
            &["not signed by a trusted CA", "ssl.truststore.location"],
        );
        assert!(server.join().unwrap().is_err());

        // Verification off: any certificate.
        let (addr, server) = serve(tls_server(server_config(false)));
        let config = client_config(&TlsSettings {
            verify_certificate: false,
            ..trusting(OTHER_CA)
        })
        .unwrap();
        let got = run_client(addr, &config, "kafka-9.example", &pattern(MIB, 2)).unwrap();
        assert_eq!(got.len(), MIB + 2);
        server.join().unwrap().unwrap();
    }

    #[test]
    fn a_plaintext_server_gives_a_clear_error() {
        let config = client_config(&trusting(CA)).unwrap();
        // Answers the hello with a Kafka-looking frame.
        let (addr, server) = serve(|mut sock| {
            let mut hello = [0u8; 4096];
            let _ = sock.read(&mut hello);
            let _ = sock.write_all(&[0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0]);
            let _ = sock.shutdown(std::net::Shutdown::Write);
            let _ = sock.read(&mut hello);
            Ok(())
        });
        let m = expect_tls_error(run_client(addr, &config, "localhost", b"hello"));
        assert_contains(&m, &["does not speak TLS", "security.protocol"]);
        server.join().unwrap().unwrap();

        // Reads the hello and closes, as a PLAINTEXT Kafka listener does.
        let (addr, server) = serve(|mut sock| {
            let mut hello = [0u8; 4096];
            let _ = sock.read(&mut hello);
            Ok(())
        });
        let m = expect_tls_error(run_client(addr, &config, "localhost", b"hello"));
        assert_contains(&m, &["TLS handshake", "security.protocol"]);
        server.join().unwrap().unwrap();

        // Closes at once.
        let (addr, server) = serve(|_| Ok(()));
        let started = Instant::now();
        let m = expect_tls_error(run_client(addr, &config, "localhost", b"hello"));
        assert_contains(&m, &["TLS handshake"]);
        assert!(started.elapsed() < Duration::from_secs(10));
        server.join().unwrap().unwrap();
    }

    /// A TCP close without close_notify after the handshake is an unexpected EOF, not a
    /// clean close.
    #[test]
    fn eof_without_close_notify_is_unexpected() {
        let config_s = server_config(false);
        let (addr, server) = serve(move |sock| {
            let conn = rustls::ServerConnection::new(config_s).map_err(|e| e.to_string())?;
            let mut tls = rustls::StreamOwned::new(conn, sock);
            tls.write_all(b"bye").map_err(|e| e.to_string())?;
            tls.flush().map_err(|e| e.to_string())?;
            let _ = tls.sock.shutdown(std::net::Shutdown::Both);
            Ok(())
        });
        let config = client_config(&trusting(CA)).unwrap();
        let e = run_client(addr, &config, "localhost", b"").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        server.join().unwrap().unwrap();
    }
}
