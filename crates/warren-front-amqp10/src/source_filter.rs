//! A receiving link's source filters, as RabbitMQ 4 reads them: its own
//! stream filters (`rabbitmq:stream-offset-spec`, `rabbitmq:stream-filter`,
//! `rabbitmq:stream-match-unfiltered`), which become the consumer
//! arguments AMQP 0-9-1 uses for the same, and the AMQP filter
//! expressions of RabbitMQ 4.1 (`amqp:properties-filter`,
//! `amqp:application-properties-filter`) and 4.2 (`amqp:sql-filter`),
//! which a stream judges each message by. The attach answers with the
//! filters in force only (§3.5.3): one Warren does not take (a malformed
//! one, a second of a kind) is left out, which tells the client, as
//! RabbitMQ does. A SQL filter and property filters do not go together:
//! the later in the map is kept.

use std::sync::Arc;

use warren_amqp091::{FieldTable, FieldValue};
use warren_amqp10::filtex::{self, MessageFilter};
use warren_amqp10::sql_filter::SQL_FILTER;
use warren_amqp10::Value;
use warren_core::queue::RecordFilter;

/// RabbitMQ's stream filters, which [`read`] makes consumer arguments of.
const STREAM_FILTERS: [&str; 3] = [
    "rabbitmq:stream-offset-spec",
    "rabbitmq:stream-filter",
    "rabbitmq:stream-match-unfiltered",
];

/// What a source's filters come to.
pub struct SourceFilters {
    /// The stream filters as consumer arguments (x-stream-offset,
    /// x-stream-filter, x-stream-match-unfiltered).
    pub arguments: FieldTable,
    /// The filter expressions, judged on each message of a stream.
    pub expressions: Option<Arc<dyn RecordFilter>>,
    /// The source as the attach answers it: with the filters in force.
    pub source: Option<Value>,
}

/// Filter expressions as a stream consumer's judge of its records.
#[derive(Debug)]
struct Expressions(MessageFilter);

impl RecordFilter for Expressions {
    fn matches(&self, record: &[u8]) -> bool {
        self.0.matches(record)
    }
}

/// A filter's name: its descriptor when it is described (RabbitMQ reads
/// filters so; the map's key is the client's own label, "ts filter" say,
/// and a descriptor may be the spec's code), else its key.
fn filter_name<'a>(key: &'a Value, value: &'a Value) -> Option<(&'a str, &'a Value)> {
    match (key, value) {
        (_, Value::Described(d, inner)) => filtex::descriptor_name(d).map(|n| (n, &**inner)),
        (Value::Symbol(k) | Value::String(k), other) => Some((k, other)),
        _ => None,
    }
}

/// Read `source`'s filters.
pub fn read(source: Option<&Value>) -> SourceFilters {
    let mut arguments = FieldTable::new();
    let mut expressions = MessageFilter::default();
    let Some((code, Value::List(fields))) = source.and_then(Value::as_described) else {
        return SourceFilters {
            arguments,
            expressions: None,
            source: source.cloned(),
        };
    };
    let mut fields = fields.clone();
    if let Some(Value::Map(filters)) = fields.get(7) {
        // Each kept filter with what it is: a stream filter (0), a
        // property filter (1) or SQL (2).
        let mut kept: Vec<(u8, (Value, Value))> = Vec::new();
        for (k, v) in filters {
            let Some((name, inner)) = filter_name(k, v) else {
                continue;
            };
            let kind = if STREAM_FILTERS.contains(&name) {
                stream_argument(&mut arguments, name, inner);
                Some(0)
            } else if name == filtex::PROPERTIES_FILTER.0 && expressions.properties.is_empty() {
                filtex::properties_filter(inner).map(|p| {
                    expressions.properties = p;
                    1
                })
            } else if name == filtex::APPLICATION_PROPERTIES_FILTER.0
                && expressions.application_properties.is_empty()
            {
                filtex::application_properties_filter(inner).map(|p| {
                    expressions.application_properties = p;
                    1
                })
            } else if name == SQL_FILTER.0 && expressions.sql.is_none() {
                filtex::sql(inner).map(|e| {
                    expressions.sql = Some(e);
                    2
                })
            } else {
                None
            };
            // The later of SQL and property filters wins.
            match kind {
                Some(1) if expressions.sql.is_some() => {
                    expressions.sql = None;
                    kept.retain(|(k, _)| *k != 2);
                }
                Some(2)
                    if !expressions.properties.is_empty()
                        || !expressions.application_properties.is_empty() =>
                {
                    expressions.properties.clear();
                    expressions.application_properties.clear();
                    kept.retain(|(k, _)| *k != 1);
                }
                _ => {}
            }
            if let Some(kind) = kind {
                kept.push((kind, (k.clone(), v.clone())));
            }
        }
        let kept: Vec<(Value, Value)> = kept.into_iter().map(|(_, f)| f).collect();
        fields[7] = if kept.is_empty() {
            Value::Null
        } else {
            Value::Map(kept)
        };
    }
    SourceFilters {
        arguments,
        expressions: (!expressions.is_empty())
            .then(|| Arc::new(Expressions(expressions)) as Arc<dyn RecordFilter>),
        source: Some(Value::described(code, Value::List(fields))),
    }
}

/// One of RabbitMQ's stream filters as the consumer argument 0-9-1 uses:
/// `rabbitmq:stream-offset-spec` (first, last, next, an offset, a
/// timestamp, an interval such as "30m") -> x-stream-offset,
/// `rabbitmq:stream-filter` -> x-stream-filter,
/// `rabbitmq:stream-match-unfiltered` -> x-stream-match-unfiltered.
fn stream_argument(t: &mut FieldTable, name: &str, v: &Value) {
    match (name, v) {
        ("rabbitmq:stream-offset-spec", Value::String(s) | Value::Symbol(s)) => t.insert(
            "x-stream-offset",
            FieldValue::LongStr(s.clone().into_bytes().into()),
        ),
        ("rabbitmq:stream-offset-spec", Value::Timestamp(ms)) => {
            t.insert("x-stream-offset", FieldValue::Timestamp((*ms / 1000) as u64))
        }
        ("rabbitmq:stream-offset-spec", Value::Ulong(n)) => {
            t.insert("x-stream-offset", FieldValue::I64(*n as i64))
        }
        ("rabbitmq:stream-offset-spec", Value::Long(n)) => t.insert("x-stream-offset", FieldValue::I64(*n)),
        ("rabbitmq:stream-offset-spec", Value::Uint(n)) => {
            t.insert("x-stream-offset", FieldValue::I64(*n as i64))
        }
        ("rabbitmq:stream-filter", Value::String(s) | Value::Symbol(s)) => t.insert(
            "x-stream-filter",
            FieldValue::LongStr(s.clone().into_bytes().into()),
        ),
        ("rabbitmq:stream-filter", Value::List(items) | Value::Array(items)) => t.insert(
            "x-stream-filter",
            FieldValue::Array(
                items
                    .iter()
                    .filter_map(|i| match i {
                        Value::String(s) | Value::Symbol(s) => {
                            Some(FieldValue::LongStr(s.clone().into_bytes().into()))
                        }
                        _ => None,
                    })
                    .collect(),
            ),
        ),
        ("rabbitmq:stream-match-unfiltered", Value::Bool(b)) => {
            t.insert("x-stream-match-unfiltered", FieldValue::Bool(*b))
        }
        _ => {}
    }
}
