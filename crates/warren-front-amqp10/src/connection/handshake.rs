//! A connection's opening (AMQP 1.0 §5.3, §2.4): the SASL layer (PLAIN,
//! EXTERNAL, ANONYMOUS as configured, each checked by the node's SASL
//! module), then the AMQP header and open, with the frame size, channel
//! limit and idle time-out agreed.

use std::time::Duration;

use warren_amqp10::frame::{write_frame, FrameType, MIN_MAX_FRAME_SIZE};
use warren_amqp10::performative::{AmqpError, Open};
use warren_amqp10::sasl::{self, Sasl};
use warren_amqp10::{Performative, Value, AMQP_HEADER, SASL_HEADER};
use warren_core::User;
use warren_node::connections::Login;
use warren_node::version::{PLATFORM, RABBITMQ_VERSION};

use super::{condition, Conn, Fatal, MAX_FRAME};

impl Conn {
    /// SASL (§5.3), then the AMQP header and open. Returns the user, or
    /// None when the peer gave up or failed to authenticate (already told).
    pub(super) async fn handshake(&mut self) -> Result<Option<User>, Fatal> {
        let Ok(h) = self.header().await else {
            return Ok(None);
        };
        let anonymous = self.ctx.config.amqp10_anonymous;
        let mut auth_mechanism = "none".to_string();
        let user = if &h == SASL_HEADER {
            self.wbuf.extend_from_slice(SASL_HEADER);
            let mechs =
                warren_node::login::offered(&self.ctx, warren_node::sasl::Proto::Amqp10, self.entry.tls());
            let m = Sasl::Mechanisms(mechs.into_iter().map(String::from).collect())
                .to_value()
                .to_bytes();
            write_frame(&mut self.wbuf, FrameType::Sasl, 0, &[&m]);
            if self.flush().await.is_err() {
                return Ok(None);
            }
            let Some(f) = self.frame(MIN_MAX_FRAME_SIZE * 8).await? else {
                return Ok(None);
            };
            let mut s = &f.body[..];
            let init = Sasl::from_value(&Value::decode(&mut s)?)?;
            let user = match init {
                Sasl::Init {
                    mechanism,
                    initial_response,
                    ..
                } => {
                    let user = self.authenticate(&mechanism, initial_response.as_deref());
                    auth_mechanism = mechanism;
                    user
                }
                _ => None,
            };
            let code = if user.is_some() { sasl::OK } else { sasl::AUTH };
            let o = Sasl::Outcome { code }.to_value().to_bytes();
            write_frame(&mut self.wbuf, FrameType::Sasl, 0, &[&o]);
            if self.flush().await.is_err() {
                return Ok(None);
            }
            let Some(user) = user else {
                return Ok(None);
            };
            let Ok(h) = self.header().await else {
                return Ok(None);
            };
            if &h != AMQP_HEADER {
                self.wbuf.extend_from_slice(AMQP_HEADER);
                let _ = self.flush().await;
                return Ok(None);
            }
            user
        } else if anonymous {
            // No SASL layer: allowed only where anonymous logins are.
            match self.authenticate("ANONYMOUS", None) {
                Some(u) => u,
                None => return Ok(None),
            }
        } else {
            // §5.3.1: a server that requires SASL answers with its header.
            self.wbuf.extend_from_slice(SASL_HEADER);
            let _ = self.flush().await;
            return Ok(None);
        };
        self.wbuf.extend_from_slice(AMQP_HEADER);
        if self.flush().await.is_err() {
            return Ok(None);
        }
        let Some(f) = self.frame(MIN_MAX_FRAME_SIZE * 8).await? else {
            return Ok(None);
        };
        let (p, _) = Performative::decode(&f.body)?;
        let Performative::Open(open) = p else {
            return Err(Fatal(AmqpError::new(condition::ILLEGAL_STATE, "expected open")));
        };
        let vhost = open
            .hostname
            .as_deref()
            .and_then(|h| h.strip_prefix("vhost:"))
            .unwrap_or(&self.ctx.config.default_vhost)
            .to_string();
        let (vh, grant) = self
            .ctx
            .broker
            .open_vhost(&user, &vhost, Some(&open.container_id))
            .map_err(|e| Fatal(AmqpError::new(condition::UNAUTHORIZED, e.to_string())))?;
        self.vhost = Some(vh);
        self.grant = Some(grant);
        self.peer_max_frame = open.max_frame_size.unwrap_or(u32::MAX).max(MIN_MAX_FRAME_SIZE);
        self.channel_max = open
            .channel_max
            .unwrap_or(u16::MAX)
            .min(self.ctx.config.channel_max);
        let user_limits = self.ctx.broker.user_limits(&user.name);
        let vhost_limits = self.vhost.as_ref().map(|v| v.limits()).unwrap_or_default();
        self.entry
            .logged_in(
                Login {
                    protocol: "AMQP 1.0",
                    user: user.name.clone(),
                    vhost: vhost.clone(),
                    auth_mechanism,
                    client_properties: open
                        .properties
                        .as_ref()
                        .map(crate::convert::json_map)
                        .unwrap_or_default(),
                    frame_max: self.peer_max_frame.min(MAX_FRAME),
                    channel_max: self.channel_max as u32,
                    timeout: self.ctx.config.heartbeat as u32,
                    container_id: Some(open.container_id.clone()),
                },
                &vhost_limits,
                &user_limits,
            )
            .map_err(|l| {
                Fatal(AmqpError::new(
                    condition::RESOURCE_LIMIT,
                    l.text(&user.name, &vhost),
                ))
            })?;
        self.entry.set_expiry(user.token.as_ref().map(|t| t.expires_at));
        self.token_login = user.token.is_some();
        self.send_idle = open
            .idle_time_out
            .filter(|&ms| ms > 0)
            .map(|ms| Duration::from_millis(ms as u64 / 2));
        let idle = self.ctx.config.heartbeat as u32 * 1000;
        self.send(
            0,
            &Performative::Open(Open {
                container_id: "warren".into(),
                max_frame_size: Some(MAX_FRAME),
                channel_max: Some(self.channel_max),
                idle_time_out: (idle > 0).then_some(idle),
                // RabbitMQ's own AMQP 1.0 clients refuse a broker whose
                // product is not "RabbitMQ" at version 4 or later: Warren
                // names the RabbitMQ version whose behaviour it follows,
                // and itself under "platform".
                properties: Some(Value::Map(vec![
                    (Value::symbol("product"), Value::string("RabbitMQ")),
                    (Value::symbol("version"), Value::string(RABBITMQ_VERSION)),
                    (Value::symbol("platform"), Value::string(PLATFORM)),
                ])),
                offered_capabilities: vec!["LINK_PAIR_V1_0".into(), "ANONYMOUS-RELAY".into()],
                ..Default::default()
            }),
        );
        if self.flush().await.is_err() {
            return Ok(None);
        }
        Ok(Some(user))
    }

    /// A SASL login (refusals are logged and counted there).
    pub(super) fn authenticate(&self, mechanism: &str, response: Option<&[u8]>) -> Option<User> {
        let proto = warren_node::sasl::Proto::Amqp10;
        let response = response.unwrap_or_default();
        warren_node::login::login(&self.ctx, proto, mechanism, response, self.peer, self.entry.tls()).ok()
    }
}
