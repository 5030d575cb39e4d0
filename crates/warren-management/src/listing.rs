//! Listings as RabbitMQ's API answers them: filtered by name, sorted by
//! any (dotted) field, and paged when asked (`sort`, `sort_reverse`,
//! `name`, `page`, `page_size`).

use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;

type ApiResult<T> = Result<T, ApiError>;

/// RabbitMQ's list query parameters: `sort`, `sort_reverse`, and
/// `page` / `page_size` (which turn the answer into a page object).
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    pub sort: Option<String>,
    pub sort_reverse: Option<bool>,
    pub page: Option<usize>,
    pub page_size: Option<usize>,
    pub name: Option<String>,
}

/// Sort and paginate a listing as RabbitMQ does.
pub fn listing(mut items: Vec<Value>, q: &ListQuery) -> ApiResult<Json<Value>> {
    if let Some(f) = &q.name {
        items.retain(|i| i["name"].as_str().is_some_and(|n| n.contains(f.as_str())));
    }
    if let Some(key) = &q.sort {
        // Each item's key looked up once, not once per comparison.
        let at = |v: &Value| {
            key.split('.')
                .try_fold(v, |v, k| v.get(k))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let mut keyed: Vec<(Value, Value)> = items.into_iter().map(|i| (at(&i), i)).collect();
        keyed.sort_by(|a, b| compare(&a.0, &b.0));
        items = keyed.into_iter().map(|(_, i)| i).collect();
    }
    if q.sort_reverse == Some(true) {
        items.reverse();
    }
    if q.page.is_none() {
        return Ok(Json(Value::Array(items)));
    }
    paginate(items, q, |i| i)
}

/// The page `q` asks for of `items` (sorted already), as RabbitMQ's page
/// object; only the page's items go through `build`.
pub fn paginate<T>(items: Vec<T>, q: &ListQuery, build: impl Fn(T) -> Value) -> ApiResult<Json<Value>> {
    let page = q.page.unwrap_or(1);
    let size = q.page_size.unwrap_or(100);
    if page == 0 || size == 0 || size > 500 {
        return Err(ApiError::BadRequest(
            "page and page_size must be positive, page_size at most 500".into(),
        ));
    }
    let total = items.len();
    let page_count = total.div_ceil(size).max(1);
    let shown: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * size)
        .take(size)
        .map(build)
        .collect();
    Ok(Json(json!({
        "filtered_count": total,
        "item_count": shown.len(),
        "items": shown,
        "page": page,
        "page_count": page_count,
        "page_size": size,
        "total_count": total,
    })))
}

fn compare(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .partial_cmp(&y.as_f64())
            .unwrap_or(std::cmp::Ordering::Equal),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Null, Value::Null) => std::cmp::Ordering::Equal,
        (Value::Null, _) => std::cmp::Ordering::Less,
        (_, Value::Null) => std::cmp::Ordering::Greater,
        _ => a.to_string().cmp(&b.to_string()),
    }
}
