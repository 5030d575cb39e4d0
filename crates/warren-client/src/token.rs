//! OAuth 2 access tokens, as the application's source gives them
//! (`token_source` on the connection builders of [`crate::amqp091`] and
//! [`crate::amqp`]): the first is the login's password; each protocol's
//! refresh keeps the next ones coming.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

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

/// When to fetch the next token for one good for `life`: at 80 % of it,
/// as RabbitMQ's Java client does.
pub(crate) fn refresh_after(life: Duration) -> Duration {
    life.mul_f64(0.8)
}

/// After a failed fetch or update, how long before trying again: soon,
/// but not in a busy loop.
pub(crate) const REFRESH_RETRY: Duration = Duration::from_secs(1);
