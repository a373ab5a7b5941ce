//! Every Redis key of the fleet. Nothing else in the workspace spells one.
//!
//! Layout: `nanobot:<bot>:<area>:<…>`. Session keys are user data and are kept verbatim
//! after the prefix (Redis keys are binary safe), so `SCAN nanobot:<bot>:session:*` finds them.

/// Session metadata hash: `created_at`, `updated_at`, `last_consolidated`, `metadata` (JSON).
pub fn session_meta(bot: &str, session: &str) -> String {
    format!("nanobot:{bot}:session:{session}:meta")
}

/// Session messages: a list of JSON rows in nanobot's session format, append-only.
pub fn session_messages(bot: &str, session: &str) -> String {
    format!("nanobot:{bot}:session:{session}:messages")
}

/// The set of session keys of `bot`.
pub fn sessions(bot: &str) -> String {
    format!("nanobot:{bot}:sessions")
}

/// Marker that an inbound message id was already processed (with a TTL).
pub fn inbound_seen(bot: &str, message_id: &str) -> String {
    format!("nanobot:{bot}:seen:inbound:{message_id}")
}

/// Failed attempts at a turn of an inbound message (with a TTL); after a few the message is
/// answered with an error so one poison message cannot block its session.
pub fn inbound_attempts(bot: &str, message_id: &str) -> String {
    format!("nanobot:{bot}:attempts:inbound:{message_id}")
}

/// Marker that an outbound delivery id was already delivered (with a TTL).
pub fn outbound_delivered(bot: &str, delivery_id: &str) -> String {
    format!("nanobot:{bot}:seen:outbound:{delivery_id}")
}

/// Per-session lease (holder + fencing token).
pub fn session_lease(bot: &str, session: &str) -> String {
    format!("nanobot:{bot}:lease:{session}")
}

/// Monotonic fencing-token counter of a session.
pub fn session_fence(bot: &str, session: &str) -> String {
    format!("nanobot:{bot}:fence:{session}")
}

/// Stream sequence of the last inbound message of a session that a turn has answered (the
/// session's mailbox cursor; written only under the session's fencing token).
pub fn session_cursor(bot: &str, session: &str) -> String {
    format!("nanobot:{bot}:cursor:{session}")
}

/// A committed turn's reply not yet confirmed published (the outbox of a session).
pub fn session_outbox(bot: &str, session: &str) -> String {
    format!("nanobot:{bot}:outbox:{session}")
}

/// Per-bot lock held by the memory worker that writes history.jsonl and the cursors.
pub fn memory_lock(bot: &str) -> String {
    format!("nanobot:{bot}:lock:memory")
}

/// Fence counter of the memory lock of `bot` (a token per holder).
pub fn memory_fence(bot: &str) -> String {
    format!("nanobot:{bot}:fence:memory")
}

/// The cron leader lease (one leader fires for the whole fleet).
pub const CRON_LEADER: &str = "nanobot:fleet:cron:leader";
/// Fence counter of the cron leader lease.
pub const CRON_LEADER_FENCE: &str = "nanobot:fleet:cron:fence";

/// Last fire time of a cron job (unix ms), so a new leader neither skips nor repeats.
pub fn cron_last_fire(bot: &str, job_id: &str) -> String {
    format!("nanobot:{bot}:cron:last:{job_id}")
}

/// The Telegram poller lease of one bot token (`token_id` is a hash of the token, never the
/// token): exactly one gateway replica long-polls it.
pub fn telegram_poller(bot: &str, token_id: &str) -> String {
    format!("nanobot:{bot}:telegram:{token_id}:poller")
}

/// Fence counter of [`telegram_poller`].
pub fn telegram_poller_fence(bot: &str, token_id: &str) -> String {
    format!("nanobot:{bot}:telegram:{token_id}:fence")
}

/// The next `getUpdates` offset of one bot token (written only under the poller's fence).
pub fn telegram_offset(bot: &str, token_id: &str) -> String {
    format!("nanobot:{bot}:telegram:{token_id}:offset")
}

/// The streaming preview of one reply (`reply_to` = the inbound id): the preview's message id
/// while deltas edit it, `final` once the final reply took it over (with a TTL).
pub fn telegram_stream(bot: &str, reply_to: &str) -> String {
    format!("nanobot:{bot}:telegram:stream:{reply_to}")
}

/// A pending pairing request of `bot` by its code (JSON, TTL 600 s).
pub fn pairing_code(bot: &str, code: &str) -> String {
    format!("nanobot:{bot}:pairing:code:{code}")
}

/// Pattern matching every pending pairing code of `bot` (for `SCAN`).
pub fn pairing_codes(bot: &str) -> String {
    format!("nanobot:{bot}:pairing:code:*")
}

/// The pending code of one sender of a channel (same TTL as the code).
pub fn pairing_sender(bot: &str, channel: &str, sender_id: &str) -> String {
    format!("nanobot:{bot}:pairing:sender:{channel}:{sender_id}")
}

/// The set of senders of a channel approved through pairing.
pub fn pairing_approved(bot: &str, channel: &str) -> String {
    format!("nanobot:{bot}:pairing:approved:{channel}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_the_bot_prefix_and_have_no_spaces() {
        let all = [
            session_meta("b", "api:x"),
            session_messages("b", "api:x"),
            sessions("b"),
            inbound_seen("b", "1"),
            inbound_attempts("b", "1"),
            outbound_delivered("b", "1"),
            session_lease("b", "s"),
            session_fence("b", "s"),
            session_cursor("b", "s"),
            session_outbox("b", "s"),
            memory_lock("b"),
            memory_fence("b"),
            cron_last_fire("b", "j"),
            telegram_poller("b", "t"),
            telegram_poller_fence("b", "t"),
            telegram_offset("b", "t"),
            telegram_stream("b", "m"),
            pairing_code("b", "C"),
            pairing_codes("b"),
            pairing_sender("b", "telegram", "42|alice"),
            pairing_approved("b", "telegram"),
        ];
        for k in &all {
            assert!(k.starts_with("nanobot:b:"), "{k}");
            assert!(!k.contains(' '), "{k}");
        }
        assert_ne!(session_meta("b", "s"), session_messages("b", "s"));
        assert!(CRON_LEADER.starts_with("nanobot:"));
        assert!(CRON_LEADER_FENCE.starts_with("nanobot:"));
    }
}
