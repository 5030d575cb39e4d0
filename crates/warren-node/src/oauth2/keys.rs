//! The keys tokens are checked against: PEM files named by key id
//! (`signing_keys`), a JWKS file, a JWKS URL fetched when the broker
//! starts and on each TLS/key reload. A key from a JWK is bound to the
//! algorithm the JWK names, if it names one; any key is bound to its
//! family (an RSA key never checks an HS256 token, so a public key cannot
//! be used as an HMAC secret).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey};

use super::{OAuth2Settings, TokenError};

/// One verification key.
#[derive(Clone)]
pub struct Key {
    pub decoding: DecodingKey,
    /// The one algorithm this key verifies, when its JWK said.
    pub algorithm: Option<Algorithm>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key").field("algorithm", &self.algorithm).finish()
    }
}

/// Keys by key id (`kid`).
pub type Keys = BTreeMap<String, Key>;

/// Read every configured key source. A source that cannot be read is an
/// error (at start and on reload, so a broken file is seen at once).
pub fn load(s: &OAuth2Settings) -> Result<Keys, TokenError> {
    let mut keys = Keys::new();
    for (kid, path) in &s.signing_keys {
        keys.insert(kid.clone(), pem_key(path)?);
    }
    if let Some(path) = &s.jwks_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| TokenError::Keys(format!("{}: {e}", path.display())))?;
        add_jwks(&mut keys, &text, &path.display().to_string())?;
    }
    if let Some(url) = &s.jwks_url {
        let text = fetch(url)?;
        add_jwks(&mut keys, &text, url)?;
    }
    Ok(keys)
}

/// A public key (RSA, EC or Ed25519; SPKI or PKCS#1) in a PEM file.
fn pem_key(path: &Path) -> Result<Key, TokenError> {
    let pem = std::fs::read(path).map_err(|e| TokenError::Keys(format!("{}: {e}", path.display())))?;
    let decoding = DecodingKey::from_rsa_pem(&pem)
        .or_else(|_| DecodingKey::from_ec_pem(&pem))
        .or_else(|_| DecodingKey::from_ed_pem(&pem))
        .map_err(|e| TokenError::Keys(format!("{}: not a public key in PEM: {e}", path.display())))?;
    Ok(Key {
        decoding,
        algorithm: None,
    })
}

fn add_jwks(keys: &mut Keys, text: &str, source: &str) -> Result<(), TokenError> {
    let set: JwkSet =
        serde_json::from_str(text).map_err(|e| TokenError::Keys(format!("{source}: not a JWKS: {e}")))?;
    for jwk in &set.keys {
        let Some(kid) = jwk.common.key_id.clone() else {
            tracing::warn!(%source, "JWKS key without a kid skipped");
            continue;
        };
        let decoding = DecodingKey::from_jwk(jwk)
            .map_err(|e| TokenError::Keys(format!("{source}: key '{kid}': {e}")))?;
        let algorithm = jwk
            .common
            .key_algorithm
            .and_then(|a| a.to_string().parse::<Algorithm>().ok());
        keys.insert(kid, Key { decoding, algorithm });
    }
    Ok(())
}

/// GET a JWKS over HTTP(S), with the web PKI's roots and aws-lc-rs.
fn fetch(url: &str) -> Result<String, TokenError> {
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .root_certs(ureq::tls::RootCerts::WebPki)
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut resp = agent
        .get(url)
        .call()
        .map_err(|e| TokenError::Keys(format!("{url}: {e}")))?;
    resp.body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .map_err(|e| TokenError::Keys(format!("{url}: {e}")))
}
