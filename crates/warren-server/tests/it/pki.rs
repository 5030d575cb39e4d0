//! Test certificates, made when the tests run (no key is committed): a CA,
//! a server certificate for localhost / 127.0.0.1, client certificates
//! signed by the CA, one by another CA, an expired one and a self-signed
//! one, written as PEM files into a temporary directory.

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

pub struct Ca {
    pub cert: Certificate,
    pub key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.distinguished_name
            .push(DnType::OrganizationName, "Warren tests");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    fn sign(&self, p: CertificateParams) -> (Certificate, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert, key)
    }
}

/// A certificate and its key as PEM files.
#[derive(Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub cert_pem: String,
    pub key_pem: String,
}

pub struct Pki {
    pub dir: PathBuf,
    pub ca: Ca,
    pub ca_file: PathBuf,
    pub server: Pair,
}

fn client_params(cn: &str) -> CertificateParams {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.distinguished_name
        .push(DnType::OrganizationName, "Warren tests");
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p
}

impl Pki {
    pub fn new() -> Pki {
        // Client crates build their rustls configurations with the
        // process's default provider; with two compiled in, one must be
        // chosen.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = super::common::temp_dir("pki");
        std::fs::create_dir_all(&dir).unwrap();
        let ca = Ca::new("Warren test CA");
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca.cert.pem()).unwrap();
        let mut pki = Pki {
            server: Pair {
                cert: PathBuf::new(),
                key: PathBuf::new(),
                cert_pem: String::new(),
                key_pem: String::new(),
            },
            dir,
            ca,
            ca_file,
        };
        pki.server = pki.server_pair("server", "warren-server");
        pki
    }

    /// A server certificate for localhost and 127.0.0.1 named `cn`.
    pub fn server_pair(&self, file: &str, cn: &str) -> Pair {
        let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.subject_alt_names
            .push(SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])));
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let (cert, key) = self.ca.sign(p);
        self.write(file, &cert, &key)
    }

    /// A cluster node's certificate: localhost and 127.0.0.1, for server
    /// and client auth (a node is both on its links); signed by `ca`, or
    /// by this PKI's CA.
    pub fn node_pair(&self, file: &str, cn: &str, ca: Option<&Ca>) -> Pair {
        let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.subject_alt_names
            .push(SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])));
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let (cert, key) = ca.unwrap_or(&self.ca).sign(p);
        self.write(file, &cert, &key)
    }

    /// A client certificate for `cn`, signed by the CA.
    pub fn client(&self, cn: &str) -> Pair {
        let (cert, key) = self.ca.sign(client_params(cn));
        self.write(&format!("client-{cn}"), &cert, &key)
    }

    /// A client certificate with extra subject alternative names.
    pub fn client_with_sans(&self, cn: &str, sans: Vec<SanType>) -> Pair {
        let mut p = client_params(cn);
        p.subject_alt_names = sans;
        let (cert, key) = self.ca.sign(p);
        self.write(&format!("client-san-{cn}"), &cert, &key)
    }

    /// Signed by the CA, but its validity ended in 2021.
    pub fn expired_client(&self, cn: &str) -> Pair {
        let mut p = client_params(cn);
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let (cert, key) = self.ca.sign(p);
        self.write(&format!("expired-{cn}"), &cert, &key)
    }

    /// Signed by a CA the broker does not know.
    pub fn foreign_client(&self, cn: &str) -> Pair {
        let other = Ca::new("Another CA");
        let (cert, key) = other.sign(client_params(cn));
        self.write(&format!("foreign-{cn}"), &cert, &key)
    }

    /// Self-signed.
    pub fn self_signed_client(&self, cn: &str) -> Pair {
        let key = KeyPair::generate().unwrap();
        let cert = client_params(cn).self_signed(&key).unwrap();
        self.write(&format!("self-{cn}"), &cert, &key)
    }

    fn write(&self, name: &str, cert: &Certificate, key: &KeyPair) -> Pair {
        let (cert_pem, key_pem) = (cert.pem(), key.serialize_pem());
        let c = self.dir.join(format!("{name}.crt"));
        let k = self.dir.join(format!("{name}.key"));
        std::fs::write(&c, &cert_pem).unwrap();
        std::fs::write(&k, &key_pem).unwrap();
        Pair {
            cert: c,
            key: k,
            cert_pem,
            key_pem,
        }
    }

    /// A rustls client configuration trusting the CA, with `client` as its
    /// certificate if given.
    pub fn client_config(&self, client: Option<&Pair>) -> Arc<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.ca.cert.der().to_vec()))
            .unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let b = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        Arc::new(match client {
            None => b.with_no_client_auth(),
            Some(p) => {
                let chain = vec![CertificateDer::from_pem_slice(p.cert_pem.as_bytes()).unwrap()];
                let key = PrivateKeyDer::from_pem_slice(p.key_pem.as_bytes()).unwrap();
                b.with_client_auth_cert(chain, key).unwrap()
            }
        })
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
