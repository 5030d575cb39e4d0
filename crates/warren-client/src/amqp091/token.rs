//! OAuth 2 access tokens from the application's source
//! ([`super::ConnectionBuilder::token_source`]): the first is the login's
//! password; each next one is fetched before the current one expires
//! (at 80 % of its life, as RabbitMQ's Java client does) and handed to
//! the broker with connection.update-secret, and recoveries log in with
//! the latest.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::core::Core;
use super::events::Event;

/// An access token and how long it is good for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Token {
    /// The token, sent as the password.
    pub secret: String,
    /// How long from now it is accepted.
    pub expires_in: Duration,
}

impl Token {
    /// A token good for `expires_in` from now.
    pub fn new(secret: impl Into<String>, expires_in: Duration) -> Token {
        Token {
            secret: secret.into(),
            expires_in,
        }
    }
}

type TokenFuture = Pin<Box<dyn Future<Output = Result<Token, String>> + Send>>;

/// The application's source of tokens.
#[derive(Clone)]
pub(crate) struct TokenSource(Arc<dyn Fn() -> TokenFuture + Send + Sync>);

impl TokenSource {
    pub(crate) fn new<F, Fut>(f: F) -> TokenSource
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Token, String>> + Send + 'static,
    {
        TokenSource(Arc::new(move || Box::pin(f())))
    }

    pub(crate) async fn fetch(&self) -> Result<Token, String> {
        (self.0)().await
    }
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSource")
    }
}

/// When to fetch the next token for one good for `life`.
fn refresh_after(life: Duration) -> Duration {
    life.mul_f64(0.8)
}

/// After a failed fetch or update, how long before trying again: soon,
/// but not in a busy loop.
const RETRY: Duration = Duration::from_secs(1);

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
                RETRY
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
