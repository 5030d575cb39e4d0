//! TLS for `amqps://` connections, with rustls: the certificate
//! authorities to trust (PEM files, or the Mozilla roots by default), a
//! client certificate for SASL EXTERNAL, or a whole `rustls::ClientConfig`
//! of the application's own.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// What is wrong with a TLS set-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(pub String);

/// How to speak TLS to the broker.
///
/// ```no_run
/// use std::path::Path;
/// use warren_client::tls::TlsOptions;
///
/// // Trust one CA, and present a certificate (for SASL EXTERNAL).
/// let tls = TlsOptions::from_pem_files(
///     Some(Path::new("ca.pem")),
///     Some((Path::new("client.pem"), Path::new("client.key"))),
/// )
/// .unwrap();
/// ```
#[derive(Clone)]
pub struct TlsOptions {
    pub(crate) config: Arc<ClientConfig>,
    /// The name to check the broker's certificate against (the host by
    /// default).
    pub(crate) server_name: Option<String>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    // Named here rather than taken from the process default, which is
    // unset (and ambiguous) when more than one provider is compiled in.
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl TlsOptions {
    /// Trust the certificate authorities in `ca` (PEM; the Mozilla roots
    /// when None) and, with `client` (certificate chain and private key,
    /// PEM), present that certificate.
    pub fn from_pem_files(ca: Option<&Path>, client: Option<(&Path, &Path)>) -> Result<TlsOptions, TlsError> {
        let mut roots = RootCertStore::empty();
        match ca {
            Some(path) => {
                for cert in CertificateDer::pem_file_iter(path)
                    .map_err(|e| TlsError(format!("{}: {e}", path.display())))?
                {
                    let cert = cert.map_err(|e| TlsError(format!("{}: {e}", path.display())))?;
                    roots
                        .add(cert)
                        .map_err(|e| TlsError(format!("{}: {e}", path.display())))?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(e.to_string()))?
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| TlsError(format!("{}: {e}", cert.display())))?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| TlsError(format!("{}: {e}", key.display())))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| TlsError(e.to_string()))?
            }
        };
        Ok(TlsOptions {
            config: Arc::new(config),
            server_name: None,
        })
    }

    /// An application's own rustls configuration.
    pub fn from_config(config: Arc<ClientConfig>) -> TlsOptions {
        TlsOptions {
            config,
            server_name: None,
        }
    }

    /// Check the broker's certificate against `name` rather than the host
    /// connected to (RabbitMQ's `server_name_indication`).
    pub fn server_name(mut self, name: &str) -> Self {
        self.server_name = Some(name.to_string());
        self
    }
}
