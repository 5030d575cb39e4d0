//! What a TLS connection agreed and who the client's certificate names, in
//! the forms RabbitMQ shows them: `/api/connections`' `ssl_*` and
//! `peer_cert_*` fields, and the user name SASL EXTERNAL logs in as
//! (rabbitmq_auth_mechanism_ssl's `ssl_cert_login_from`).

use rustls::ServerConnection;
use serde::Deserialize;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

/// The TLS session as the management API shows it.
#[derive(Debug, Clone, Default)]
pub struct TlsInfo {
    /// "tlsv1.3", "tlsv1.2".
    pub protocol: String,
    pub key_exchange: String,
    pub cipher: String,
    pub hash: String,
    /// The client's (first) certificate, if it sent one.
    pub peer: Option<PeerCert>,
}

/// The parts of a client certificate RabbitMQ shows or logs in with.
#[derive(Debug, Clone, Default)]
pub struct PeerCert {
    /// RFC 4514 order (last RDN first), comma-separated, as RabbitMQ's
    /// rabbit_ssl formats it: `CN=alice,O=Warren`.
    pub subject: String,
    pub issuer: String,
    /// `not-before - not-after`, each as `YYYY-MM-DDTHH:MM:SSZ`.
    pub validity: String,
    /// Every common name in the subject.
    pub common_names: Vec<String>,
    /// Subject alternative names in certificate order.
    pub sans: Vec<(SanType, String)>,
}

/// Kinds of subject alternative name, as `ssl_cert_login_san_type` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SanType {
    #[default]
    Dns,
    Ip,
    Email,
    Uri,
    OtherName,
}

/// Where EXTERNAL takes the user name from (`ssl_cert_login_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoginFrom {
    #[default]
    DistinguishedName,
    CommonName,
    #[serde(alias = "subject_alt_name")]
    SubjectAlternativeName,
}

impl TlsInfo {
    pub fn of(conn: &ServerConnection) -> TlsInfo {
        let protocol = match conn.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "tlsv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "tlsv1.2",
            _ => "unknown",
        };
        let (key_exchange, cipher, hash) = conn
            .negotiated_cipher_suite()
            .map(|s| suite_parts(&format!("{:?}", s.suite())))
            .unwrap_or_default();
        let peer = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|der| PeerCert::parse(der));
        TlsInfo {
            protocol: protocol.into(),
            key_exchange,
            cipher,
            hash,
            peer,
        }
    }
}

/// rustls's suite names split as Erlang's ssl reports them (and RabbitMQ
/// 3.10 showed them, compared): `TLS13_AES_256_GCM_SHA384` → (any,
/// aes_256_gcm, aead); `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256` →
/// (ecdhe_rsa, aes_128_gcm, aead). The hash is the suite's MAC, which for
/// every AEAD cipher (all rustls offers) is `aead`.
fn suite_parts(name: &str) -> (String, String, String) {
    let lower = name.to_ascii_lowercase();
    let (kx, rest) = if let Some(rest) = lower.strip_prefix("tls13_") {
        ("any".to_string(), rest.to_string())
    } else if let Some((kx, rest)) = lower.strip_prefix("tls_").and_then(|r| r.split_once("_with_")) {
        (kx.to_string(), rest.to_string())
    } else {
        return ("unknown".into(), lower, "unknown".into());
    };
    match rest.rsplit_once('_') {
        Some((cipher, hash)) => {
            let aead = cipher.contains("gcm") || cipher.contains("poly1305") || cipher.contains("ccm");
            let mac = if aead { "aead" } else { hash };
            (kx, cipher.to_string(), mac.to_string())
        }
        None => (kx, rest, "unknown".into()),
    }
}

impl PeerCert {
    pub fn parse(der: &[u8]) -> Option<PeerCert> {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let v = cert.validity();
        let validity = format!(
            "{} - {}",
            utc_time(v.not_before.timestamp()),
            utc_time(v.not_after.timestamp())
        );
        let common_names = cert
            .subject()
            .iter_common_name()
            .filter_map(|a| a.as_str().ok().map(str::to_string))
            .collect();
        let mut sans = Vec::new();
        if let Ok(Some(ext)) = cert.subject_alternative_name() {
            for n in &ext.value.general_names {
                let san = match n {
                    GeneralName::DNSName(s) => (SanType::Dns, s.to_string()),
                    GeneralName::RFC822Name(s) => (SanType::Email, s.to_string()),
                    GeneralName::URI(s) => (SanType::Uri, s.to_string()),
                    GeneralName::IPAddress(b) => match ip_text(b) {
                        Some(ip) => (SanType::Ip, ip),
                        None => continue,
                    },
                    GeneralName::OtherName(_, value) => (SanType::OtherName, other_name_text(value)),
                    _ => continue,
                };
                sans.push(san);
            }
        }
        Some(PeerCert {
            subject: dn_string(cert.subject()),
            issuer: dn_string(cert.issuer()),
            validity,
            common_names,
            sans,
        })
    }

    /// The user name EXTERNAL logs in with, or why there is none.
    pub fn login_name(&self, from: LoginFrom, san_type: SanType, san_index: usize) -> Result<String, String> {
        match from {
            LoginFrom::DistinguishedName => Ok(self.subject.clone()),
            LoginFrom::CommonName => match self.common_names.as_slice() {
                [cn] => Ok(cn.clone()),
                [] => Err("the certificate's subject has no common name".into()),
                _ => Err("the certificate's subject has more than one common name".into()),
            },
            LoginFrom::SubjectAlternativeName => self
                .sans
                .iter()
                .filter(|(t, _)| *t == san_type)
                .nth(san_index)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| {
                    format!(
                        "the certificate has no {san_type:?} subject alternative name at index {san_index}"
                    )
                }),
        }
    }
}

/// Short names for the attribute types RabbitMQ names (others by OID).
fn attr_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.4" => "SN",
        "2.5.4.5" => "serialNumber",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.12" => "title",
        "2.5.4.42" => "GN",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

/// A distinguished name as RFC 4514 writes it: RDNs last to first,
/// separated by commas, multi-valued ones joined by `+`, special
/// characters escaped.
fn dn_string(name: &X509Name) -> String {
    let mut rdns: Vec<String> = Vec::new();
    for rdn in name.iter_rdn() {
        let parts: Vec<String> = rdn
            .iter()
            .map(|a| {
                let oid = a.attr_type().to_id_string();
                let key = attr_name(&oid).map(str::to_string).unwrap_or(oid);
                let value = a
                    .as_str()
                    .map(escape_value)
                    .unwrap_or_else(|_| hex_value(a.as_slice()));
                format!("{key}={value}")
            })
            .collect();
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    rdns.join(",")
}

/// RFC 4514 §2.4 escaping of an attribute value.
fn escape_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, '"' | '+' | ',' | ';' | '<' | '>' | '\\')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex_value(bytes: &[u8]) -> String {
    let mut s = String::from("#");
    for b in bytes {
        s.push_str(&format!("{b:02X}"));
    }
    s
}

fn ip_text(b: &[u8]) -> Option<String> {
    match b.len() {
        4 => Some(std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string()),
        16 => {
            let a: [u8; 16] = b.try_into().ok()?;
            Some(std::net::Ipv6Addr::from(a).to_string())
        }
        _ => None,
    }
}

/// An otherName's value: the string inside it when it is one (UPNs are
/// UTF8String), else hex.
fn other_name_text(value: &[u8]) -> String {
    // [0] EXPLICIT wrapping a UTF8String/IA5String/PrintableString.
    fn strip(b: &[u8]) -> Option<(u8, &[u8])> {
        let (&tag, rest) = b.split_first()?;
        let (&len, rest) = rest.split_first()?;
        if len < 0x80 && rest.len() >= len as usize {
            Some((tag, &rest[..len as usize]))
        } else {
            None
        }
    }
    let inner = match strip(value) {
        Some((0xa0, inner)) => inner,
        _ => value,
    };
    match strip(inner) {
        Some((0x0c | 0x16 | 0x13, s)) => match std::str::from_utf8(s) {
            Ok(s) => s.to_string(),
            Err(_) => hex_value(value),
        },
        _ => hex_value(value),
    }
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian;
/// days to civil date after H. Hinnant's algorithm).
fn utc_time(ts: i64) -> String {
    let days = ts.div_euclid(86_400);
    let secs = ts.rem_euclid(86_400);
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
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_split_as_erlang_names_them() {
        assert_eq!(
            suite_parts("TLS13_AES_256_GCM_SHA384"),
            ("any".into(), "aes_256_gcm".into(), "aead".into())
        );
        assert_eq!(
            suite_parts("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
            ("ecdhe_rsa".into(), "chacha20_poly1305".into(), "aead".into())
        );
    }

    #[test]
    fn dates_are_utc() {
        assert_eq!(utc_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_time(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_time(1_795_000_000), "2026-11-18T11:06:40Z");
    }

    #[test]
    fn values_are_escaped() {
        assert_eq!(escape_value("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape_value(" #x "), "\\ #x\\ ");
    }
}
