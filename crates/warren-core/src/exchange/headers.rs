//! Headers exchange (0-9-1 §3.1.3.4 and RabbitMQ's extensions): the binding's
//! arguments are matched against the message's headers table. `x-match` is
//! `all` (default), `any`, `all-with-x` or `any-with-x`; with the plain forms
//! binding arguments starting with `x-` take no part. A binding value of type
//! void matches on the key's presence alone. Values compare as RabbitMQ
//! compares terms: numbers by value whatever their width, strings by bytes.

use warren_amqp091::{FieldTable, FieldValue};

use super::binding::{Binding, Destination};

#[derive(Debug, Default)]
pub struct HeadersIndex {
    bindings: Vec<(FieldTable, Destination)>,
}

impl HeadersIndex {
    pub fn add(&mut self, b: &Binding) {
        self.bindings.push((b.arguments.clone(), b.destination.clone()));
    }

    pub fn remove(&mut self, b: &Binding) {
        if let Some(i) = self
            .bindings
            .iter()
            .position(|(a, d)| a == &b.arguments && d == &b.destination)
        {
            self.bindings.remove(i);
        }
    }

    pub fn route(&self, headers: Option<&FieldTable>, out: &mut Vec<Destination>) {
        let empty = FieldTable::new();
        let headers = headers.unwrap_or(&empty);
        for (args, dest) in &self.bindings {
            if headers_match(args, headers) {
                out.push(dest.clone());
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    All,
    Any,
}

/// Does a message with `headers` match a binding with `args`?
pub fn headers_match(args: &FieldTable, headers: &FieldTable) -> bool {
    let (mode, with_x) = match args.get("x-match").and_then(|v| v.as_bytes()) {
        Some(b"any") => (Mode::Any, false),
        Some(b"any-with-x") => (Mode::Any, true),
        Some(b"all-with-x") => (Mode::All, true),
        _ => (Mode::All, false),
    };
    for (k, want) in args.iter() {
        if k.as_bytes() == b"x-match" || (!with_x && k.starts_with("x-")) {
            continue;
        }
        let hit = match headers.get(&k.to_str_lossy()) {
            None => false,
            Some(_) if matches!(want, FieldValue::Void) => true,
            Some(have) => values_equal(want, have),
        };
        match (mode, hit) {
            (Mode::Any, true) => return true,
            (Mode::All, false) => return false,
            _ => {}
        }
    }
    // all: every considered argument matched (vacuously so when there are
    // none); any: none matched.
    mode == Mode::All
}

fn values_equal(a: &FieldValue, b: &FieldValue) -> bool {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x == y;
    }
    match (a, b) {
        (FieldValue::LongStr(x) | FieldValue::Bytes(x), FieldValue::LongStr(y) | FieldValue::Bytes(y)) => {
            x == y
        }
        (FieldValue::F32(x), FieldValue::F32(y)) => x == y,
        (FieldValue::F64(x), FieldValue::F64(y)) => x == y,
        (FieldValue::F32(x), _) => b.as_i64().map(|y| *x as f64 == y as f64).unwrap_or(false),
        (FieldValue::F64(x), _) => b.as_i64().map(|y| *x == y as f64).unwrap_or(false),
        (_, FieldValue::F32(_) | FieldValue::F64(_)) => values_equal(b, a),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(pairs: &[(&str, FieldValue)]) -> FieldTable {
        let mut t = FieldTable::new();
        for (k, v) in pairs {
            t.insert(k, v.clone());
        }
        t
    }

    #[test]
    fn all_and_any() {
        let h = t(&[("a", FieldValue::I32(1)), ("b", "x".into())]);
        assert!(headers_match(
            &t(&[("a", FieldValue::I64(1)), ("b", "x".into())]),
            &h
        ));
        assert!(!headers_match(
            &t(&[("a", FieldValue::I32(1)), ("c", "x".into())]),
            &h
        ));
        let any = |extra: (&str, FieldValue)| t(&[("x-match", "any".into()), extra]);
        assert!(headers_match(
            &any(("c", "no".into())).clone(),
            &t(&[("c", "no".into())])
        ));
        assert!(!headers_match(&any(("c", "no".into())), &h));
    }

    #[test]
    fn empty_binding_matches_all_but_not_any() {
        assert!(headers_match(&FieldTable::new(), &FieldTable::new()));
        assert!(!headers_match(
            &t(&[("x-match", "any".into())]),
            &t(&[("a", "b".into())])
        ));
    }

    #[test]
    fn x_keys_only_with_x_modes() {
        let h = t(&[("x-tenant", "t1".into())]);
        let plain = t(&[("x-match", "all".into()), ("x-tenant", "t2".into())]);
        assert!(headers_match(&plain, &h), "x- args ignored by plain all");
        let with_x = t(&[("x-match", "all-with-x".into()), ("x-tenant", "t2".into())]);
        assert!(!headers_match(&with_x, &h));
        let any_x = t(&[("x-match", "any-with-x".into()), ("x-tenant", "t1".into())]);
        assert!(headers_match(&any_x, &h));
    }

    #[test]
    fn void_matches_presence() {
        let b = t(&[("k", FieldValue::Void)]);
        assert!(headers_match(&b, &t(&[("k", "anything".into())])));
        assert!(!headers_match(&b, &t(&[("j", "anything".into())])));
    }
}
