//! TLS on the inter-node links (the role of RabbitMQ's
//! `inter_node_tls.config`), an option: with `[cluster.tls]` every link is
//! a TLS session before the handshake of `link.rs` starts inside it. Each
//! node presents its one certificate both ways (as the server when it
//! accepts, as the client when it dials) and requires the peer's to chain
//! to the cluster's CA; the dialler also checks the certificate names the
//! host it dialled. The shared secret is still proven inside, so TLS adds
//! privacy and a second proof of membership, and a node without TLS
//! cannot talk to one with it.
//!
//! tokio-rustls drives the sessions: links are long-lived and few, so the
//! hand-written TLS I/O of the client listeners (`tls/io.rs`, written for
//! many connections' memory) buys nothing here.

use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::cluster::LinkTlsSettings;
use crate::tls::{provider, read_certs, read_key};

/// Either end of a link: a TCP stream, or a TLS session over one.
pub trait LinkStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> LinkStream for S {}

pub struct LinkTls {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl LinkTls {
    pub fn load(s: &LinkTlsSettings) -> Result<LinkTls, String> {
        let e = |e: &dyn std::fmt::Display| format!("cluster.tls: {e}");
        let mut roots = RootCertStore::empty();
        for c in read_certs(&s.cacertfile).map_err(|x| e(&x))? {
            roots.add(c).map_err(|x| e(&x))?;
        }
        let roots = Arc::new(roots);
        let chain = read_certs(&s.certfile).map_err(|x| e(&x))?;
        let key = read_key(&s.keyfile).map_err(|x| e(&x))?;
        let provider = provider();
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|x| e(&x))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|x| e(&x))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|x| e(&x))?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|x| e(&x))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|x| e(&x))?;
        Ok(LinkTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// The server side of a link's TLS session.
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<impl LinkStream> {
        self.acceptor.accept(tcp).await
    }

    /// The client side, to the peer at `address` (host:port), whose
    /// certificate must name that host.
    pub async fn connect(&self, address: &str, tcp: TcpStream) -> std::io::Result<impl LinkStream> {
        let host = address
            .rsplit_once(':')
            .map_or(address, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        self.connector.connect(name, tcp).await
    }
}
