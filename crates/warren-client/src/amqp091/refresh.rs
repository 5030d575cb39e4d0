//! Keeping a connection's OAuth 2 token fresh: each next token is
//! fetched from the application's source before the current one expires
//! (at 80 % of its life, as RabbitMQ's Java client does) and handed to
//! the broker with connection.update-secret; recoveries log in with the
//! latest.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::core::Core;
use super::events::Event;
use crate::token::{refresh_after, TokenSource, REFRESH_RETRY};

/// Keep the connection's token fresh until the connection is closed for
/// good (or dropped).
pub(crate) async fn keep_fresh(core: Weak<Core>, source: TokenSource, first: Duration) {
    let mut wait = refresh_after(first);
    loop {
        tokio::time::sleep(wait).await;
        let Some(core) = core.upgrade() else { return };
        if core.closed().is_some() {
            return;
        }
        wait = match refresh(&core, &source).await {
            Ok(life) => refresh_after(life),
            Err(error) => {
                tracing::warn!("OAuth 2 token refresh failed: {error}");
                core.signals.emit(Event::TokenRefreshFailed { error });
                REFRESH_RETRY
            }
        };
    }
}

/// Fetch a token and hand it to the broker; how long it is good for.
async fn refresh(core: &Arc<Core>, source: &TokenSource) -> Result<Duration, String> {
    let token = source.fetch().await?;
    // Recoveries from now on log in with it, whether or not the update
    // below reaches the broker (a connection lost meanwhile comes back
    // with it).
    *core.secret.lock() = Some(token.secret.clone());
    core.update_secret(&token.secret, "token refreshed")
        .await
        .map_err(|e| e.to_string())?;
    Ok(token.expires_in)
}
