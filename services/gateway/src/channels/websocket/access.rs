//! Who may use a chat, and who a client is.
//!
//! - A chat belongs to the client that used it first ([`keys::websocket_owner`], kept as long
//!   as the chat's log): every replica refuses another `client_id`'s attach, history read and
//!   message. The claim is one script, so two clients racing for a new chat id get one owner.
//! - Tokens issued on `tokenIssuePath` are bound to one `client_id` ([`keys::websocket_token`],
//!   by the token's SHA-256, with its TTL), so a client presenting one is that client on every
//!   replica and cannot name another.
//!
//! Both live in Redis only: a gateway SIGKILLed at any point leaves a claim or a token either
//! whole or absent (one command each), and a restarted or other replica reads the same.

use std::sync::LazyLock;

use base64::Engine as _;
use redis::Script;
use sha2::{Digest as _, Sha256};

use nanobot_proto::keys;
use nanobot_runtime::store::Store;

use super::log::RETENTION_SECS;

/// Prefix of an issued token, as upstream.
pub const TOKEN_PREFIX: &str = "nbwt_";

/// Claims the chat for ARGV[2] unless another client owns it; refreshes the claim's TTL when
/// it is the owner's; returns the owner.
const CLAIM: &str = r"
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[2] then return owner end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[1])
return ARGV[2]
";
static CLAIM_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CLAIM));

/// Whose a chat is, seen by one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The client's own (claimed now or before).
    Mine,
    /// Another client's.
    Theirs,
}

/// The chat owners and issued tokens of one bot.
#[derive(Debug, Clone)]
pub struct Access {
    redis: Store,
    bot: String,
}

impl Access {
    /// Returns the owners and tokens of `bot` in `redis`.
    pub fn new(redis: Store, bot: &str) -> Self {
        Self {
            redis,
            bot: bot.to_string(),
        }
    }

    /// Claims `chat` for `client` unless another client owns it.
    pub async fn claim(&self, chat: &str, client: &str) -> redis::RedisResult<Claim> {
        let mut conn = self.redis.clone();
        let owner: String = CLAIM_SCRIPT
            .key(keys::websocket_owner(&self.bot, chat))
            .arg(RETENTION_SECS)
            .arg(client)
            .invoke_async(&mut conn)
            .await?;
        Ok(if owner == client {
            Claim::Mine
        } else {
            Claim::Theirs
        })
    }

    /// Returns the owner of `chat` (none: nobody used it yet).
    pub async fn owner(&self, chat: &str) -> redis::RedisResult<Option<String>> {
        let mut conn = self.redis.clone();
        redis::cmd("GET")
            .arg(keys::websocket_owner(&self.bot, chat))
            .query_async(&mut conn)
            .await
    }

    /// Issues a token bound to `client` for `ttl_secs`; returns it (never stored in clear).
    pub async fn issue(&self, client: &str, ttl_secs: u64) -> redis::RedisResult<String> {
        let mut random = [0u8; 32];
        random[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        random[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        let token = format!(
            "{TOKEN_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random)
        );
        let mut conn = self.redis.clone();
        redis::cmd("SET")
            .arg(keys::websocket_token(&self.bot, &sha256_hex(&token)))
            .arg(client)
            .arg("EX")
            .arg(ttl_secs)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(token)
    }

    /// Returns the client an unexpired issued `token` is bound to.
    pub async fn client_of(&self, token: &str) -> redis::RedisResult<Option<String>> {
        if !token.starts_with(TOKEN_PREFIX) {
            return Ok(None);
        }
        let mut conn = self.redis.clone();
        redis::cmd("GET")
            .arg(keys::websocket_token(&self.bot, &sha256_hex(token)))
            .query_async(&mut conn)
            .await
    }
}

/// Returns a short tag of `client_id` (hex of its SHA-256, 16 digits): safe in ids and keys
/// whatever the client named itself.
pub fn client_tag(client_id: &str) -> String {
    sha256_hex(client_id)[..16].to_string()
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_tags_are_short_hex_and_tell_clients_apart() {
        let a = client_tag("alice 🌸 客户");
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, client_tag("alice"));
        assert_eq!(a, client_tag("alice 🌸 客户"));
    }
}
