//! TLS for every listener: the settings (RabbitMQ's `ssl_options`), the
//! rustls server configuration built from PEM files, and its reload.
//!
//! The configuration in force sits behind a lock as an `Arc`: each
//! handshake takes the current one, and a reload (SIGHUP, or
//! `POST /api/tls/reload` which `warrenctl reload_tls` calls) swaps in a
//! new one built from the files as they are now. Connections already open
//! keep the session they have.

pub mod io;
pub mod peer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};
use serde::Deserialize;

/// RabbitMQ's `ssl_options.*`, shared by every TLS listener.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SslOptions {
    /// The server's certificate chain (PEM, leaf first).
    pub certfile: Option<PathBuf>,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub keyfile: Option<PathBuf>,
    /// The CAs client certificates must chain to (PEM bundle).
    pub cacertfile: Option<PathBuf>,
    /// `verify_peer` asks clients for a certificate and checks it against
    /// `cacertfile`; `verify_none` asks for none.
    pub verify: Verify,
    /// With `verify_peer`: refuse a client that sends no certificate.
    pub fail_if_no_peer_cert: bool,
    /// Protocol versions offered: `tlsv1.3`, `tlsv1.2`.
    pub versions: Vec<String>,
}

impl Default for SslOptions {
    fn default() -> Self {
        SslOptions {
            certfile: None,
            keyfile: None,
            cacertfile: None,
            verify: Verify::VerifyNone,
            fail_if_no_peer_cert: false,
            versions: vec!["tlsv1.3".into(), "tlsv1.2".into()],
        }
    }
}

impl SslOptions {
    /// TLS listeners start only when the server has a certificate and key.
    pub fn enabled(&self) -> bool {
        self.certfile.is_some() && self.keyfile.is_some()
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verify {
    VerifyNone,
    VerifyPeer,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: no PEM certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no PEM private key in it ({detail})")]
    NoKey { path: PathBuf, detail: String },
    #[error("ssl_options.certfile and ssl_options.keyfile are both needed for TLS")]
    Missing,
    #[error("ssl_options.verify = verify_peer needs ssl_options.cacertfile")]
    NoCa,
    #[error("unknown TLS version {0:?} (tlsv1.3 and tlsv1.2 are offered)")]
    Version(String),
    #[error("TLS configuration refused: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client certificate verifier: {0}")]
    Verifier(String),
}

pub(crate) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.into(),
        source,
    })?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&bytes)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.into() });
    }
    Ok(certs)
}

pub(crate) fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.into(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::NoKey {
        path: path.into(),
        detail: e.to_string(),
    })
}

/// The crypto underneath every TLS session (aws-lc-rs, rustls's default).
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A rustls server configuration from the files `opts` names.
pub fn server_config(opts: &SslOptions) -> Result<ServerConfig, TlsError> {
    let (Some(certfile), Some(keyfile)) = (&opts.certfile, &opts.keyfile) else {
        return Err(TlsError::Missing);
    };
    let mut versions = Vec::new();
    for v in &opts.versions {
        versions.push(match v.as_str() {
            "tlsv1.3" => &rustls::version::TLS13,
            "tlsv1.2" => &rustls::version::TLS12,
            other => return Err(TlsError::Version(other.into())),
        });
    }
    let certs = read_certs(certfile)?;
    let key = read_key(keyfile)?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;
    let builder = match opts.verify {
        Verify::VerifyNone => builder.with_no_client_auth(),
        Verify::VerifyPeer => {
            let ca = opts.cacertfile.as_ref().ok_or(TlsError::NoCa)?;
            let mut roots = RootCertStore::empty();
            for c in read_certs(ca)? {
                roots.add(c)?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if opts.fail_if_no_peer_cert {
                v
            } else {
                v.allow_unauthenticated()
            };
            builder.with_client_cert_verifier(v.build().map_err(|e| TlsError::Verifier(e.to_string()))?)
        }
    };
    Ok(builder.with_single_cert(certs, key)?)
}

/// The TLS configuration in force, and the settings to rebuild it from.
pub struct Tls {
    pub opts: SslOptions,
    current: RwLock<Current>,
}

struct Current {
    config: Arc<ServerConfig>,
    /// The server certificate's not-after, seconds since the epoch.
    not_after: i64,
}

fn load_current(opts: &SslOptions) -> Result<Current, TlsError> {
    let config = Arc::new(server_config(opts)?);
    let leaf = opts.certfile.as_deref().map(read_certs).transpose()?;
    let not_after = leaf
        .as_ref()
        .and_then(|c| c.first())
        .and_then(|c| {
            use x509_parser::prelude::FromDer;
            x509_parser::prelude::X509Certificate::from_der(c).ok()
        })
        .map(|(_, c)| c.validity().not_after.timestamp())
        .unwrap_or(i64::MAX);
    Ok(Current { config, not_after })
}

impl Tls {
    pub fn load(opts: &SslOptions) -> Result<Tls, TlsError> {
        Ok(Tls {
            opts: opts.clone(),
            current: RwLock::new(load_current(opts)?),
        })
    }

    /// Read the files again; new handshakes use them from now on. On an
    /// error the configuration in force stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = load_current(&self.opts)?;
        *self.current.write() = fresh;
        Ok(())
    }

    /// When the server certificate in force stops being valid (seconds
    /// since the epoch).
    pub fn not_after(&self) -> i64 {
        self.current.read().not_after
    }

    /// A new server-side session for one accepted connection.
    pub fn session(&self) -> Result<ServerConnection, rustls::Error> {
        let cfg = self.current.read().config.clone();
        ServerConnection::new(cfg)
    }
}
