//! Pairing: unknown private senders of a chat channel get an 8-character code (TTL 600 s); the
//! owner approves it (`nanobot pairing approve CODE`) and the sender is allowed from then on.
//! Stored in Redis per bot, so every gateway replica and the CLI see the same state.

use std::time::Duration;

use rand::Rng as _;
use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};

use nanobot_proto::keys;
use nanobot_runtime::store::Store;

/// How long a pairing code stays valid, as upstream.
pub const CODE_TTL: Duration = Duration::from_secs(600);
/// Code length, as upstream.
pub const CODE_LEN: usize = 8;
const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// A pending request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingPairing {
    /// The code.
    pub code: String,
    /// Bot id.
    pub bot: String,
    /// Channel name (`telegram`).
    pub channel: String,
    /// The sender id as the channel spells it (`42|alice`).
    pub sender_id: String,
    /// Unix seconds of the request.
    pub created_at: i64,
}

/// Pairing state of one bot.
#[derive(Clone)]
pub struct PairingStore {
    redis: Store,
    bot: String,
}

impl std::fmt::Debug for PairingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairingStore")
            .field("bot", &self.bot)
            .finish_non_exhaustive()
    }
}

/// Returns upstream's reply to an unknown private sender.
pub fn format_pairing_reply(code: &str) -> String {
    format!(
        "Hi there! This assistant only responds to approved users.\n\n\
         Your pairing code is: `{code}`\n\n\
         To get access, ask the owner to approve this code:\n\
         - In this chat: send `/pairing approve {code}`"
    )
}

/// Returns a fresh random code of [`CODE_LEN`] characters from A-Z and 0-9.
pub fn new_code() -> String {
    let mut rng = rand::rng();
    (0..CODE_LEN)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

impl PairingStore {
    /// Returns the store of `bot`.
    pub fn new(redis: Store, bot: &str) -> Self {
        Self {
            redis,
            bot: bot.to_string(),
        }
    }

    /// Returns whether `sender_id` of `channel` was approved.
    pub async fn is_approved(&self, channel: &str, sender_id: &str) -> redis::RedisResult<bool> {
        let mut conn = self.redis.clone();
        conn.sismember(keys::pairing_approved(&self.bot, channel), sender_id)
            .await
    }

    /// Returns the sender's pending code, creating one when there is none (a sender asking
    /// again within the TTL gets the same code).
    pub async fn code_for(&self, channel: &str, sender_id: &str) -> redis::RedisResult<String> {
        let mut conn = self.redis.clone();
        let sender_key = keys::pairing_sender(&self.bot, channel, sender_id);
        let ttl = CODE_TTL.as_secs();
        loop {
            let existing: Option<String> = conn.get(&sender_key).await?;
            if let Some(code) = existing {
                let alive: bool = conn.exists(keys::pairing_code(&self.bot, &code)).await?;
                if alive {
                    return Ok(code);
                }
            }
            let code = new_code();
            let pending = PendingPairing {
                code: code.clone(),
                bot: self.bot.clone(),
                channel: channel.to_string(),
                sender_id: sender_id.to_string(),
                created_at: chrono::Utc::now().timestamp(),
            };
            let json = serde_json::to_string(&pending).unwrap_or_default();
            let created: bool = redis::cmd("SET")
                .arg(keys::pairing_code(&self.bot, &code))
                .arg(json)
                .arg("NX")
                .arg("EX")
                .arg(ttl)
                .query_async::<Option<String>>(&mut conn)
                .await?
                .is_some();
            if created {
                let _: () = conn.sadd(keys::pairing_index(&self.bot), &code).await?;
                let _: () = conn.set_ex(&sender_key, &code, ttl).await?;
                return Ok(code);
            }
        }
    }

    /// Returns every pending request, oldest first (expired codes leave the index here).
    pub async fn pending(&self) -> redis::RedisResult<Vec<PendingPairing>> {
        let mut conn = self.redis.clone();
        let index = keys::pairing_index(&self.bot);
        let codes: Vec<String> = conn.smembers(&index).await?;
        let mut out = Vec::new();
        for code in codes {
            let json: Option<String> = conn.get(keys::pairing_code(&self.bot, &code)).await?;
            match json.and_then(|j| serde_json::from_str(&j).ok()) {
                Some(p) => out.push(p),
                None => {
                    let _: () = conn.srem(&index, &code).await?;
                }
            }
        }
        out.sort_by_key(|p: &PendingPairing| p.created_at);
        Ok(out)
    }

    /// Approves `code`: the sender is allowed from now on. Returns the request, or `None` for
    /// an unknown or expired code.
    pub async fn approve(&self, code: &str) -> redis::RedisResult<Option<PendingPairing>> {
        let mut conn = self.redis.clone();
        let code = code.trim().to_ascii_uppercase();
        let json: Option<String> = conn.get_del(keys::pairing_code(&self.bot, &code)).await?;
        let _: () = conn.srem(keys::pairing_index(&self.bot), &code).await?;
        let Some(pending) = json.and_then(|j| serde_json::from_str::<PendingPairing>(&j).ok())
        else {
            return Ok(None);
        };
        let _: () = conn
            .sadd(
                keys::pairing_approved(&self.bot, &pending.channel),
                &pending.sender_id,
            )
            .await?;
        let _: () = conn
            .del(keys::pairing_sender(
                &self.bot,
                &pending.channel,
                &pending.sender_id,
            ))
            .await?;
        Ok(Some(pending))
    }

    /// Denies `code`: the request is dropped (the sender may ask again). Returns whether it
    /// was pending.
    pub async fn deny(&self, code: &str) -> redis::RedisResult<bool> {
        let mut conn = self.redis.clone();
        let code = code.trim().to_ascii_uppercase();
        let json: Option<String> = conn.get_del(keys::pairing_code(&self.bot, &code)).await?;
        let _: () = conn.srem(keys::pairing_index(&self.bot), &code).await?;
        let Some(pending) = json.and_then(|j| serde_json::from_str::<PendingPairing>(&j).ok())
        else {
            return Ok(false);
        };
        let _: () = conn
            .del(keys::pairing_sender(
                &self.bot,
                &pending.channel,
                &pending.sender_id,
            ))
            .await?;
        Ok(true)
    }

    /// Revokes an approved sender of `channel`; returns whether it was approved.
    pub async fn revoke(&self, channel: &str, sender_id: &str) -> redis::RedisResult<bool> {
        let mut conn = self.redis.clone();
        let removed: u32 = conn
            .srem(keys::pairing_approved(&self.bot, channel), sender_id)
            .await?;
        Ok(removed > 0)
    }

    /// Returns the approved senders of `channel`, sorted.
    pub async fn approved(&self, channel: &str) -> redis::RedisResult<Vec<String>> {
        let mut conn = self.redis.clone();
        let mut all: Vec<String> = conn
            .smembers(keys::pairing_approved(&self.bot, channel))
            .await?;
        all.sort();
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_eight_characters_of_upper_case_letters_and_digits() {
        for _ in 0..50 {
            let code = new_code();
            assert_eq!(code.len(), CODE_LEN);
            assert!(code.bytes().all(|b| ALPHABET.contains(&b)), "{code}");
        }
        assert_ne!(new_code(), new_code());
        let reply = format_pairing_reply("ABCD1234");
        assert!(reply.starts_with("Hi there! This assistant only responds to approved users."));
        assert!(reply.contains("Your pairing code is: `ABCD1234`"));
        assert!(reply.contains("/pairing approve ABCD1234"));
    }
}
