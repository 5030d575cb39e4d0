//! What an OAuth 2 access token lets its bearer do, in RabbitMQ's scope
//! format (rabbitmq_auth_backend_oauth2): `read:VHOST/NAME`,
//! `write:VHOST/NAME`, `configure:VHOST/NAME` (a third `/KEY` part, the
//! routing key of topic authorisation, is accepted and read as "any") and
//! `tag:TAG`, the resource server's prefix already taken off. VHOST and
//! NAME are wildcard patterns where `*` matches any run of characters and
//! everything else matches itself.
//!
//! Verifying the token (signature, expiry, audience) is the server's job;
//! this module only turns its scopes into the permissions and tags the
//! rest of the broker checks.

use regex::escape;

use crate::permissions::{Access, Permission};

/// One `ACCESS:VHOST/NAME` scope.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Scope {
    access: Access,
    vhost: String,
    name: String,
}

/// A verified token's grants.
#[derive(Debug, Clone, Default)]
pub struct TokenGrants {
    scopes: Vec<Scope>,
    tags: Vec<String>,
    /// The token's `exp`, in seconds since the Unix epoch.
    pub expires_at: u64,
}

impl TokenGrants {
    /// Read `scopes` (prefix removed); scopes of another shape are
    /// ignored, as RabbitMQ ignores them.
    pub fn new<'a>(scopes: impl IntoIterator<Item = &'a str>, expires_at: u64) -> TokenGrants {
        let mut g = TokenGrants {
            expires_at,
            ..Default::default()
        };
        for s in scopes {
            let Some((kind, rest)) = s.split_once(':') else {
                continue;
            };
            let access = match kind {
                "configure" => Access::Configure,
                "write" => Access::Write,
                "read" => Access::Read,
                "tag" => {
                    g.tags.push(rest.to_string());
                    continue;
                }
                _ => continue,
            };
            let mut parts = rest.splitn(3, '/');
            let (Some(vhost), Some(name)) = (parts.next(), parts.next()) else {
                continue;
            };
            g.scopes.push(Scope {
                access,
                vhost: vhost.to_string(),
                name: name.to_string(),
            });
        }
        g
    }

    /// The tags the token's `tag:` scopes give (`administrator`, ...).
    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// May the bearer use `vhost` at all? Any scope naming it will do.
    pub fn allows_vhost(&self, vhost: &str) -> bool {
        self.scopes.iter().any(|s| wildcard_match(&s.vhost, vhost))
    }

    /// The permissions the scopes give in `vhost`, as the regular
    /// expressions internal users have; None when no scope names it.
    pub fn permission_in(&self, vhost: &str) -> Option<Permission> {
        if !self.allows_vhost(vhost) {
            return None;
        }
        let pattern = |access: Access| {
            let names: Vec<&str> = self
                .scopes
                .iter()
                .filter(|s| s.access == access && wildcard_match(&s.vhost, vhost))
                .map(|s| s.name.as_str())
                .collect();
            if names.contains(&"*") {
                ".*".to_string()
            } else if names.is_empty() {
                String::new()
            } else {
                let alternatives: Vec<String> = names.iter().map(|n| wildcard_regex(n)).collect();
                format!("^(?:{})$", alternatives.join("|"))
            }
        };
        Permission::new(
            &pattern(Access::Configure),
            &pattern(Access::Write),
            &pattern(Access::Read),
        )
        .ok()
    }
}

/// A wildcard pattern as the body of a regular expression.
fn wildcard_regex(p: &str) -> String {
    p.split('*').map(escape).collect::<Vec<_>>().join(".*")
}

/// Does the wildcard pattern `p` match all of `s`?
fn wildcard_match(p: &str, s: &str) -> bool {
    let mut parts = p.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = s.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole string.
        return rest.is_empty();
    };
    for m in middle {
        match rest.find(m) {
            Some(i) => rest = &rest[i + m.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_whole_names() {
        assert!(wildcard_match("*", ""));
        assert!(wildcard_match("*", "anything"));
        assert!(wildcard_match("/", "/"));
        assert!(!wildcard_match("/", "/x"));
        assert!(wildcard_match("q-*", "q-1"));
        assert!(!wildcard_match("q-*", "xq-1"));
        assert!(wildcard_match("*-log", "app-log"));
        assert!(wildcard_match("a*b*c", "a-b-c"));
        assert!(!wildcard_match("a*b*c", "a-c-b"));
        assert!(!wildcard_match("ab*ba", "aba"));
    }

    #[test]
    fn scopes_become_permissions_per_vhost() {
        let g = TokenGrants::new(
            [
                "read:*/*",
                "write:prod/orders.*",
                "write:prod/audit",
                "configure:dev/*",
                "tag:administrator",
                "bogus",
                "read:novhost",
            ],
            0,
        );
        assert_eq!(g.tags(), ["administrator"]);
        let prod = g.permission_in("prod").unwrap();
        assert!(prod.allows(Access::Read, "anything"));
        assert!(prod.allows(Access::Write, "orders.eu"));
        assert!(prod.allows(Access::Write, "audit"));
        assert!(!prod.allows(Access::Write, "audit2"));
        assert!(!prod.allows(Access::Write, "xorders.eu"));
        assert!(!prod.allows(Access::Configure, "q"));
        let dev = g.permission_in("dev").unwrap();
        assert!(dev.allows(Access::Configure, "q"));
        assert!(!dev.allows(Access::Write, "q"));
        let ro = TokenGrants::new(["read:prod/*"], 0);
        assert!(ro.permission_in("dev").is_none());
        assert!(ro.allows_vhost("prod"));
    }
}
