//! Keeping a connection's OAuth 2 token fresh: each next token is fetched
//! from the application's source at 80 % of the current one's life and
//! handed to the broker with `PUT /auth/tokens` on a management link
//! pair of the refresh's own (RabbitMQ 4; Warren); recoveries log in
//! with the latest.

use std::sync::{Arc, Weak};
use std::time::Duration;

use warren_amqp10::Value;

use super::connection::Shared;
use super::events::Event;
use super::Management;
use crate::token::{refresh_after, TokenSource, REFRESH_RETRY};

/// Keep the connection's token fresh until it is closed (or dropped).
pub(crate) async fn keep_fresh(shared: Weak<Shared>, source: TokenSource, first: Duration) {
    let mut wait = refresh_after(first);
    let mut management: Option<Management> = None;
    loop {
        tokio::time::sleep(wait).await;
        let Some(shared) = shared.upgrade() else { return };
        if shared.is_closing() || shared.session.lock().ended.is_some() {
            return;
        }
        wait = match refresh(&shared, &source, &mut management).await {
            Ok(life) => refresh_after(life),
            Err(error) => {
                tracing::warn!("OAuth 2 token refresh failed: {error}");
                shared.emit(Event::TokenRefreshFailed { error });
                REFRESH_RETRY
            }
        };
    }
}

/// Fetch a token and hand it to the broker; how long it is good for.
async fn refresh(
    shared: &Arc<Shared>,
    source: &TokenSource,
    management: &mut Option<Management>,
) -> Result<Duration, String> {
    let token = source.fetch().await?;
    // Recoveries from now on log in with it, whether or not the update
    // reaches the broker.
    *shared.secret.lock() = Some(token.secret.clone());
    if management.is_none() {
        let m = Management::open(shared.clone(), false)
            .await
            .map_err(|e| e.to_string())?;
        *management = Some(m.unrecorded());
    }
    let m = management.as_ref().expect("opened above");
    let body = Value::Binary(token.secret.clone().into_bytes().into());
    m.request("PUT", "/auth/tokens", body, &[200, 204])
        .await
        .map_err(|e| e.to_string())?;
    Ok(token.expires_in)
}
