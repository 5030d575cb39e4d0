//! AMQP URIs as RabbitMQ reads them: `amqp://user:pass@host:port/vhost`
//! (or `amqps://`, TLS, port 5671), every part percent-encoded and
//! optional (guest, guest, localhost, 5672, `/`), with the query
//! parameters `heartbeat`, `frame_max`, `channel_max`,
//! `connection_timeout` (milliseconds), and for TLS `cacertfile`,
//! `certfile`, `keyfile`, `server_name_indication` and `auth_mechanism`
//! (`external` logs in by the client certificate).

use std::time::Duration;

use percent_encoding::percent_decode_str;

/// A parsed AMQP URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpUri {
    /// Host name or address (localhost when left out).
    pub host: String,
    /// Port (5672 when left out).
    pub port: u16,
    /// User name (guest when left out).
    pub user: String,
    /// Password (guest when left out).
    pub password: String,
    /// Virtual host (`/` when the path is left out; `%2f` spells it).
    pub vhost: String,
    /// Seconds between heartbeats the client proposes (None: the broker's).
    pub heartbeat: Option<u16>,
    /// The largest frame the client proposes (None: 128 KiB).
    pub frame_max: Option<u32>,
    /// The most channels the client proposes (None: 2047).
    pub channel_max: Option<u16>,
    /// How long opening a connection may take (30 s by default).
    pub connection_timeout: Duration,
    /// `amqps://`: TLS.
    pub tls: bool,
    /// PEM file of the certificate authorities to trust (TLS; the Mozilla
    /// roots when None).
    pub cacertfile: Option<String>,
    /// PEM file of the client's certificate chain (TLS).
    pub certfile: Option<String>,
    /// PEM file of the client's private key (TLS).
    pub keyfile: Option<String>,
    /// The name to check the broker's certificate against (TLS; the host
    /// when None).
    pub server_name_indication: Option<String>,
    /// The SASL mechanism: `plain` (None) or `external`.
    pub auth_mechanism: Option<String>,
}

/// What is wrong with a URI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// It does not start with a scheme of the protocol (amqp:// or
    /// amqps://; rabbitmq-stream:// or rabbitmq-stream+tls://).
    #[error("not a URI of the protocol (amqp://..., rabbitmq-stream://...): {0}")]
    Scheme(String),
    /// The port is not a number from 0 to 65535.
    #[error("bad port in {0}")]
    Port(String),
    /// A query parameter's value does not parse.
    #[error("bad value for {0}")]
    Parameter(String),
    /// Percent-decoding gave bytes that are not UTF-8.
    #[error("not valid UTF-8 once percent-decoded: {0}")]
    Encoding(String),
}

fn decode(s: &str) -> Result<String, UriError> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| UriError::Encoding(s.to_string()))
}

impl AmqpUri {
    /// Parse `uri`.
    ///
    /// ```
    /// let u = warren_client::uri::AmqpUri::parse("amqp://bob:s%40cret@mq:5673/prod?heartbeat=10").unwrap();
    /// assert_eq!((u.user.as_str(), u.password.as_str(), u.port), ("bob", "s@cret", 5673));
    /// assert_eq!((u.vhost.as_str(), u.heartbeat), ("prod", Some(10)));
    /// ```
    pub fn parse(uri: &str) -> Result<AmqpUri, UriError> {
        AmqpUri::parse_as(uri, &[("amqp://", false, 5672), ("amqps://", true, 5671)])
    }

    /// Parse a stream protocol URI as RabbitMQ's stream clients read
    /// them: `rabbitmq-stream://user:pass@host:port/vhost` (port 5552),
    /// or `rabbitmq-stream+tls://` (TLS, port 5551), with the same parts
    /// and TLS parameters as [`Self::parse`].
    ///
    /// ```
    /// let u = warren_client::uri::AmqpUri::parse_stream("rabbitmq-stream://bob:pw@mq/%2f").unwrap();
    /// assert_eq!((u.host.as_str(), u.port, u.vhost.as_str(), u.tls), ("mq", 5552, "/", false));
    /// assert_eq!(warren_client::uri::AmqpUri::parse_stream("rabbitmq-stream+tls://mq").unwrap().port, 5551);
    /// ```
    pub fn parse_stream(uri: &str) -> Result<AmqpUri, UriError> {
        AmqpUri::parse_as(
            uri,
            &[
                ("rabbitmq-stream://", false, 5552),
                ("rabbitmq-stream+tls://", true, 5551),
            ],
        )
    }

    /// Parse `uri` if it starts with one of `schemes`: (prefix, TLS,
    /// default port).
    fn parse_as(uri: &str, schemes: &[(&str, bool, u16)]) -> Result<AmqpUri, UriError> {
        let Some((rest, tls, default_port)) = schemes
            .iter()
            .find_map(|(prefix, tls, port)| uri.strip_prefix(prefix).map(|r| (r, *tls, *port)))
        else {
            return Err(UriError::Scheme(uri.to_string()));
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (rest, None),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((n, p)) => (decode(n)?, decode(p)?),
                None => (decode(u)?, String::new()),
            },
            None => ("guest".to_string(), "guest".to_string()),
        };
        // Digits only (Rust's parser would take "+5672"), and never 0.
        let port_of = |p: &str| match p.bytes().all(|b| b.is_ascii_digit()) {
            true => p
                .parse::<u16>()
                .ok()
                .filter(|&n| n != 0)
                .ok_or_else(|| UriError::Port(uri.to_string())),
            false => Err(UriError::Port(uri.to_string())),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| UriError::Port(uri.to_string()))?;
            match after.strip_prefix(':') {
                Some(p) => (h, port_of(p)?),
                None => (h, default_port),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, port_of(p)?),
                None => (hostport, default_port),
            }
        };
        let host = if host.is_empty() {
            "localhost".to_string()
        } else {
            decode(host)?
        };
        let vhost = match path {
            None => "/".to_string(),
            Some(p) => decode(p)?,
        };
        let mut u = AmqpUri {
            host,
            port,
            user,
            password,
            vhost,
            heartbeat: None,
            frame_max: None,
            channel_max: None,
            connection_timeout: Duration::from_secs(30),
            tls,
            cacertfile: None,
            certfile: None,
            keyfile: None,
            server_name_indication: None,
            auth_mechanism: None,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = || UriError::Parameter(k.to_string());
            match k {
                "heartbeat" => u.heartbeat = Some(v.parse().map_err(|_| bad())?),
                "frame_max" => u.frame_max = Some(v.parse().map_err(|_| bad())?),
                "channel_max" => u.channel_max = Some(v.parse().map_err(|_| bad())?),
                "connection_timeout" => {
                    u.connection_timeout = Duration::from_millis(v.parse().map_err(|_| bad())?)
                }
                "cacertfile" => u.cacertfile = Some(decode(v)?),
                "certfile" => u.certfile = Some(decode(v)?),
                "keyfile" => u.keyfile = Some(decode(v)?),
                "server_name_indication" => u.server_name_indication = Some(decode(v)?),
                "auth_mechanism" => match decode(v)?.to_ascii_lowercase().as_str() {
                    m @ ("plain" | "external") => u.auth_mechanism = Some(m.to_string()),
                    _ => return Err(bad()),
                },
                // RabbitMQ's clients ignore parameters they do not know.
                _ => {}
            }
        }
        Ok(u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_what_the_uri_leaves_out() {
        let u = AmqpUri::parse("amqp://").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.user.as_str()),
            ("localhost", 5672, "guest")
        );
        assert_eq!(u.vhost, "/");
        let u = AmqpUri::parse("amqp://h/").unwrap();
        assert_eq!(u.vhost, "");
        let u = AmqpUri::parse("amqp://h/%2f").unwrap();
        assert_eq!(u.vhost, "/");
    }

    #[test]
    fn amqps_takes_port_5671_and_the_tls_parameters() {
        let u = AmqpUri::parse(
            "amqps://h/%2f?cacertfile=%2Fetc%2Fca.pem&certfile=c.pem&keyfile=k.pem&auth_mechanism=EXTERNAL&server_name_indication=mq",
        )
        .unwrap();
        assert!(u.tls);
        assert_eq!(u.port, 5671);
        assert_eq!(u.cacertfile.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(
            (u.certfile.as_deref(), u.keyfile.as_deref()),
            (Some("c.pem"), Some("k.pem"))
        );
        assert_eq!(u.auth_mechanism.as_deref(), Some("external"));
        assert_eq!(u.server_name_indication.as_deref(), Some("mq"));
    }

    #[test]
    fn bad_uris_are_refused() {
        assert!(matches!(AmqpUri::parse("http://x"), Err(UriError::Scheme(_))));
        assert!(matches!(AmqpUri::parse("amqp://h:port/"), Err(UriError::Port(_))));
        // Found by fuzzing: "+0" parsed as port 0. Signs, 0 and
        // overflows are no port.
        for bad in [
            "amqps://[]:+0/[]:+0::?!(5",
            "amqp://h:+5672/",
            "amqp://h:0/",
            "amqp://[::1]:0/",
            "amqp://h:65536/",
        ] {
            assert!(matches!(AmqpUri::parse(bad), Err(UriError::Port(_))), "{bad}");
        }
        assert!(matches!(
            AmqpUri::parse("amqp://h/?heartbeat=x"),
            Err(UriError::Parameter(_))
        ));
        assert!(matches!(
            AmqpUri::parse("amqps://h/?auth_mechanism=kerberos"),
            Err(UriError::Parameter(_))
        ));
    }
}
