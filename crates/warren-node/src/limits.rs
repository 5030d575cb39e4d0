//! Vhost and user limits as JSON: what `/api/vhost-limits`,
//! `/api/user-limits`, definitions files and warrenctl send, checked the
//! way rabbit_parameter_validation checks them, with its error texts
//! (3.10's, compared), and the shape listings and exports give them.

use serde_json::{json, Map, Value};
use warren_core::limits::{Limits, LimitsOf};

/// A whole set of limits (`{"max-connections": 10, ...}`).
pub fn parse(of: LimitsOf, value: &Value) -> Result<Limits, String> {
    let Some(m) = value.as_object() else {
        return Err(format!(
            "Validation failed\n\n{} should be a JSON object, actually was {}\n",
            of.component(),
            erlang_term(value)
        ));
    };
    let unknown: Vec<String> = m
        .iter()
        .filter(|(k, _)| !of.names().contains(&k.as_str()))
        .map(|(k, v)| format!("{{<<\"{k}\">>,{}}}", erlang_term(v)))
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "Unrecognised terms [{}] in {}",
            unknown.join(","),
            of.component()
        ));
    }
    m.iter().map(|(k, v)| Ok((k.clone(), number(k, v)?))).collect()
}

/// One limit's value (`PUT /api/vhost-limits/V/NAME {"value": N}`).
pub fn parse_one(of: LimitsOf, name: &str, value: &Value) -> Result<i64, String> {
    let mut m = Map::new();
    m.insert(name.to_string(), value.clone());
    let limits = parse(of, &Value::Object(m))?;
    Ok(limits.get(name).unwrap_or(-1))
}

/// RabbitMQ takes any number; a fraction is rounded down (a count is
/// compared with it).
fn number(name: &str, v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => Ok(n
            .as_i64()
            .unwrap_or_else(|| n.as_f64().map_or(-1, |f| f.floor() as i64))),
        other => Err(format!(
            "Validation failed\n\n{name} should be a number, actually was {}\n",
            erlang_term(other)
        )),
    }
}

/// A JSON value as RabbitMQ prints the Erlang term it decoded to.
fn erlang_term(v: &Value) -> String {
    match v {
        Value::String(s) => format!("<<\"{s}\">>"),
        Value::Array(a) => format!("[{}]", a.iter().map(erlang_term).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

pub fn to_json(limits: &Limits) -> Value {
    Value::Object(limits.iter().map(|(k, v)| (k.to_string(), json!(v))).collect())
}

/// A vhost's limits as a runtime parameter, the way definitions files
/// carry them.
pub fn vhost_parameter(vhost: &str, limits: &Limits) -> Value {
    json!({
        "vhost": vhost,
        "component": LimitsOf::VHost.component(),
        "name": "limits",
        "value": to_json(limits),
    })
}

/// The vhost and limits of a `vhost-limits` runtime parameter; None for
/// any other component's.
pub fn from_vhost_parameter(p: &Value) -> Option<(String, Result<Limits, String>)> {
    if p["component"] != LimitsOf::VHost.component() {
        return None;
    }
    let vhost = p["vhost"].as_str().unwrap_or("/").to_string();
    Some((vhost, parse(LimitsOf::VHost, &p["value"])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_rabbitmq_writes_them() {
        assert_eq!(
            parse(LimitsOf::User, &json!({"bogus": 1})).unwrap_err(),
            "Unrecognised terms [{<<\"bogus\">>,1}] in user-limits"
        );
        assert_eq!(
            parse_one(LimitsOf::VHost, "max-queues", &json!("x")).unwrap_err(),
            "Validation failed\n\nmax-queues should be a number, actually was <<\"x\">>\n"
        );
        assert!(parse(LimitsOf::VHost, &json!({"max-channels": 1})).is_err());
        let l = parse(LimitsOf::VHost, &json!({"max-queues": 2, "max-connections": -1})).unwrap();
        assert_eq!(l.get("max-queues"), Some(2));
        assert_eq!(to_json(&l), json!({"max-connections": -1, "max-queues": 2}));
    }
}
