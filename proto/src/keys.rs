//! Every Redis key of the fleet. Nothing else in the workspace spells one.
//!
//! Layout: `nanobot:{<tag>}:<area>:<…>`. The part in braces is the Redis Cluster hash tag:
//! every key that one script, transaction or pipeline touches carries the same tag, so the
//! keys share a slot and the fleet runs on a Redis Cluster as on one node.
//! - session keys (rows, meta, lease, fence, cursor, outbox, seen/attempt markers of its
//!   messages): `{<bot>:<session>}`, so sessions spread over the cluster's slots;
//! - per-bot keys (session index, memory lock, cron state, subagent slots and results,
//!   delivered markers, Telegram poller/offset/previews, pairing): `{<bot>}`;
//! - fleet-wide keys (cron leadership): `{fleet}`.
//!
//! Session keys and bot ids are user data: a tag that would contain a brace (which would end
//! the tag early, or leave it empty so Redis hashes the whole key) is replaced by `#` and a
//! SHA-256 digest of it, so every key of one session still shares one slot; of a session key
//! only the session part is digested (`{<bot>:#<digest>}`), so per-bot ACLs still cover it.

use sha2::{Digest as _, Sha256};

/// The hash tag of a session: `{<bot>:<session>}`. A session key with a brace keeps its bot
/// in the tag (`{<bot>:#<digest>}`), so a per-bot ACL (`{<bot>:*}`) still covers it.
fn session_tag(bot: &str, session: &str) -> String {
    if session.contains(['{', '}']) && !bot.is_empty() && !bot.contains(['{', '}']) {
        return format!("{{{bot}:#{}}}", digest(session));
    }
    tag(&format!("{bot}:{session}"))
}

/// The hash tag of a bot: `{<bot>}`.
fn bot_tag(bot: &str) -> String {
    tag(bot)
}

fn tag(value: &str) -> String {
    if value.is_empty() || value.contains(['{', '}']) {
        format!("{{#{}}}", digest(value))
    } else {
        format!("{{{value}}}")
    }
}

/// The first 12 bytes of `value`'s SHA-256, in hex.
fn digest(value: &str) -> String {
    let digest = Sha256::digest(value.as_bytes());
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// Session metadata hash: `created_at`, `updated_at`, `last_consolidated`, `metadata` (JSON).
pub fn session_meta(bot: &str, session: &str) -> String {
    format!("nanobot:{}:session:meta", session_tag(bot, session))
}

/// Session messages: a list of JSON rows in nanobot's session format, append-only.
pub fn session_messages(bot: &str, session: &str) -> String {
    format!("nanobot:{}:session:messages", session_tag(bot, session))
}

/// The set of session keys of `bot`.
pub fn sessions(bot: &str) -> String {
    format!("nanobot:{}:sessions", bot_tag(bot))
}

/// Marker that an inbound message id of a session was already processed (with a TTL).
pub fn inbound_seen(bot: &str, session: &str, message_id: &str) -> String {
    format!(
        "nanobot:{}:seen:inbound:{message_id}",
        session_tag(bot, session)
    )
}

/// Failed attempts at a turn of an inbound message (with a TTL); after a few the message is
/// answered with an error so one poison message cannot block its session.
pub fn inbound_attempts(bot: &str, session: &str, message_id: &str) -> String {
    format!(
        "nanobot:{}:attempts:inbound:{message_id}",
        session_tag(bot, session)
    )
}

/// Marker that an outbound delivery id was already delivered (with a TTL).
pub fn outbound_delivered(bot: &str, delivery_id: &str) -> String {
    format!("nanobot:{}:seen:outbound:{delivery_id}", bot_tag(bot))
}

/// Per-session lease (holder + fencing token).
pub fn session_lease(bot: &str, session: &str) -> String {
    format!("nanobot:{}:lease", session_tag(bot, session))
}

/// Monotonic fencing-token counter of a session.
pub fn session_fence(bot: &str, session: &str) -> String {
    format!("nanobot:{}:fence", session_tag(bot, session))
}

/// Stream sequence of the last inbound message of a session that a turn has answered (the
/// session's mailbox cursor; written only under the session's fencing token).
pub fn session_cursor(bot: &str, session: &str) -> String {
    format!("nanobot:{}:cursor", session_tag(bot, session))
}

/// A committed turn's reply not yet confirmed published (the outbox of a session).
pub fn session_outbox(bot: &str, session: &str) -> String {
    format!("nanobot:{}:outbox", session_tag(bot, session))
}

/// Per-bot lock held by the memory worker that writes history.jsonl and the cursors.
pub fn memory_lock(bot: &str) -> String {
    format!("nanobot:{}:lock:memory", bot_tag(bot))
}

/// Fence counter of the memory lock of `bot` (a token per holder).
pub fn memory_fence(bot: &str) -> String {
    format!("nanobot:{}:fence:memory", bot_tag(bot))
}

/// Marker that memory job `id` of `bot` is done (with a TTL); its value is the encoded result,
/// answered again when the job is delivered again.
pub fn memory_job_done(bot: &str, id: &str) -> String {
    format!("nanobot:{}:seen:memory:{id}", bot_tag(bot))
}

/// The subagents of `bot` running or queued anywhere in the fleet: a sorted set of task ids
/// scored by when their slot expires (refreshed while they run), for
/// `maxConcurrentSubagents`.
pub fn subagents_running(bot: &str) -> String {
    format!("nanobot:{}:subagents:running", bot_tag(bot))
}

/// The outcome of subagent task `id` of `bot` (with a TTL), kept once it finished so a
/// redelivered task announces it instead of running again.
pub fn subagent_result(bot: &str, id: &str) -> String {
    format!("nanobot:{}:subagents:result:{id}", bot_tag(bot))
}

/// The cron leader lease (one leader fires for the whole fleet).
pub const CRON_LEADER: &str = "nanobot:{fleet}:cron:leader";
/// Fence counter of the cron leader lease.
pub const CRON_LEADER_FENCE: &str = "nanobot:{fleet}:cron:fence";

/// The cron leader lease of a fleet serving every bot of its config (`scope` = `None`:
/// [`CRON_LEADER`]) or of one bot's cron role in a per-bot deployment (`--bot`): each bot's
/// cron replicas elect their own leader.
pub fn cron_leader(scope: Option<&str>) -> String {
    scope.map_or_else(
        || CRON_LEADER.into(),
        |bot| format!("nanobot:{}:cron:leader", bot_tag(bot)),
    )
}

/// Fence counter of [`cron_leader`].
pub fn cron_leader_fence(scope: Option<&str>) -> String {
    scope.map_or_else(
        || CRON_LEADER_FENCE.into(),
        |bot| format!("nanobot:{}:cron:fence", bot_tag(bot)),
    )
}

/// The Redis Cluster hash tag of `key` (what decides its slot): the text between the first
/// `{` and the next `}` when not empty, else the whole key.
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The Telegram poller lease of one bot token (`token_id` is a hash of the token, never the
/// token): exactly one gateway replica long-polls it.
pub fn telegram_poller(bot: &str, token_id: &str) -> String {
    format!("nanobot:{}:telegram:{token_id}:poller", bot_tag(bot))
}

/// Fence counter of [`telegram_poller`].
pub fn telegram_poller_fence(bot: &str, token_id: &str) -> String {
    format!("nanobot:{}:telegram:{token_id}:fence", bot_tag(bot))
}

/// The next `getUpdates` offset of one bot token (written only under the poller's fence).
pub fn telegram_offset(bot: &str, token_id: &str) -> String {
    format!("nanobot:{}:telegram:{token_id}:offset", bot_tag(bot))
}

/// The streaming preview of one reply (`reply_to` = the inbound id): the preview's message id
/// while deltas edit it, `final` once the final reply took it over (with a TTL).
pub fn telegram_stream(bot: &str, reply_to: &str) -> String {
    format!("nanobot:{}:telegram:stream:{reply_to}", bot_tag(bot))
}

/// The streaming preview of one reply on Slack or Discord (`channel` is the channel name,
/// `reply_to` the inbound id): `pending` while the first preview is posted, then the preview's
/// message id while deltas edit it, `final` once the final reply took it over (with a TTL).
pub fn stream_preview(bot: &str, channel: &str, reply_to: &str) -> String {
    format!("nanobot:{}:{channel}:stream:{reply_to}", bot_tag(bot))
}

/// Held (with a short TTL) while a preview edit of [`stream_preview`] is in flight, so the
/// final reply waits for it instead of being overwritten by it.
pub fn stream_preview_edit(bot: &str, channel: &str, reply_to: &str) -> String {
    format!("{}:edit", stream_preview(bot, channel, reply_to))
}

/// The parts of one album (`media_group_id` of a chat) received and not yet published: a list
/// of the updates' JSON (TTL 10 min), in webhook mode where its parts may reach different
/// replicas.
pub fn telegram_album(bot: &str, token_id: &str, chat_id: i64, group: &str) -> String {
    // Telegram's media group ids are digits; anything else is kept out of the key.
    let group: String = group.chars().filter(char::is_ascii_alphanumeric).collect();
    format!(
        "nanobot:{}:telegram:{token_id}:album:{chat_id}:{group}",
        bot_tag(bot)
    )
}

/// Who publishes the album of [`telegram_album`] (`SET NX` with a TTL: exactly one replica).
pub fn telegram_album_claim(bot: &str, token_id: &str, chat_id: i64, group: &str) -> String {
    format!("{}:claim", telegram_album(bot, token_id, chat_id, group))
}

/// The open albums of one bot token in webhook mode (sorted set of `<chat>:<media group>`,
/// scored by the time of the album's last part in ms), swept by the lease holder.
pub fn telegram_albums(bot: &str, token_id: &str) -> String {
    format!("nanobot:{}:telegram:{token_id}:albums", bot_tag(bot))
}

/// The email poller lease of one mailbox (`mailbox_id` is a hash of host, user and mailbox):
/// exactly one gateway replica polls it.
pub fn email_poller(bot: &str, mailbox_id: &str) -> String {
    format!("nanobot:{}:email:{mailbox_id}:poller", bot_tag(bot))
}

/// Fence counter of [`email_poller`].
pub fn email_poller_fence(bot: &str, mailbox_id: &str) -> String {
    format!("nanobot:{}:email:{mailbox_id}:fence", bot_tag(bot))
}

/// The last processed message of one mailbox, `<uidvalidity>:<uid>` (written only under the
/// poller's fence, after the mail's inbound message was accepted by JetStream).
pub fn email_cursor(bot: &str, mailbox_id: &str) -> String {
    format!("nanobot:{}:email:{mailbox_id}:cursor", bot_tag(bot))
}

/// The thread a reply continues (JSON: subject, Message-ID, References; with a TTL), by the
/// inbound id it answers, or by the correspondent's address for its latest mail.
pub fn email_thread(bot: &str, key: &str) -> String {
    format!("nanobot:{}:email:thread:{key}", bot_tag(bot))
}

/// A Slack event of `bot` already turned into its inbound message (`done`, TTL 1 day): Slack's
/// retries (Socket Mode redeliveries, Events API `X-Slack-Retry-Num`) and the same event reaching
/// another replica are acknowledged without a second inbound message.
pub fn slack_event(bot: &str, event_id: &str) -> String {
    format!("nanobot:{}:slack:event:{event_id}", bot_tag(bot))
}

/// The Discord gateway-connection lease of one bot token (`token_id` is a hash of the token):
/// exactly one gateway replica holds the token's WebSocket session.
pub fn discord_gateway(bot: &str, token_id: &str) -> String {
    format!("nanobot:{}:discord:{token_id}:gateway", bot_tag(bot))
}

/// Fence counter of [`discord_gateway`].
pub fn discord_gateway_fence(bot: &str, token_id: &str) -> String {
    format!("nanobot:{}:discord:{token_id}:fence", bot_tag(bot))
}

/// The long-connection lease of one platform account of a channel added on the generic key
/// family (`channel` is `feishu`, `dingtalk`, `wecom`, `qq` or `napcat`; `conn_id` a hash of the
/// account's id): exactly one gateway replica holds the platform's WebSocket for it.
pub fn channel_connection(bot: &str, channel: &str, conn_id: &str) -> String {
    format!("nanobot:{}:chan:{channel}:{conn_id}:conn", bot_tag(bot))
}

/// Fence counter of [`channel_connection`].
pub fn channel_connection_fence(bot: &str, channel: &str, conn_id: &str) -> String {
    format!("nanobot:{}:chan:{channel}:{conn_id}:fence", bot_tag(bot))
}

/// A platform event of `channel` already turned into its inbound message (`done`, with a TTL):
/// the platform's redeliveries and the same event reaching another replica make no second
/// inbound message.
pub fn channel_event(bot: &str, channel: &str, event_id: &str) -> String {
    format!("nanobot:{}:chan:{channel}:event:{event_id}", bot_tag(bot))
}

/// Named state of one channel of `bot` shared by the gateway replicas (a cached access token,
/// a gateway session to resume, a reply sequence counter, a streaming card): `name` is chosen
/// by the channel module and holds no secret in clear.
pub fn channel_state(bot: &str, channel: &str, name: &str) -> String {
    format!("nanobot:{}:chan:{channel}:state:{name}", bot_tag(bot))
}

/// The reply log of one WebSocket chat of `bot`: a Redis stream of the chat's user messages
/// and replies (progress, tool hints, finals, errors), capped and expiring; a client resumes
/// from the last entry id it saw.
pub fn websocket_log(bot: &str, chat_id: &str) -> String {
    format!("nanobot:{}:websocket:log:{chat_id}", bot_tag(bot))
}

/// Marker that the message with this id (an inbound id, or an outbound delivery id) is in a
/// WebSocket chat's log; holds its entry id (with a TTL), so a redelivery appends nothing.
pub fn websocket_logged(bot: &str, message_id: &str) -> String {
    format!("nanobot:{}:websocket:logged:{message_id}", bot_tag(bot))
}

/// The client that owns one WebSocket chat of `bot` (its `client_id`; set by the first client
/// to use the chat, kept as long as the chat's log): attach, history and messages of any other
/// client are refused.
pub fn websocket_owner(bot: &str, chat_id: &str) -> String {
    format!("nanobot:{}:websocket:owner:{chat_id}", bot_tag(bot))
}

/// A WebSocket connection token of `bot` issued on `tokenIssuePath`, by the SHA-256 of the
/// token (hex; the token itself is never a key): holds the `client_id` it is bound to, with
/// the token's TTL.
pub fn websocket_token(bot: &str, token_sha256: &str) -> String {
    format!("nanobot:{}:websocket:token:{token_sha256}", bot_tag(bot))
}

/// Bytes of message text one WebSocket client of `bot` stored today (a counter expiring a day
/// after its first message; `client_tag` is a hash of the `client_id`).
pub fn websocket_client_bytes(bot: &str, client_tag: &str) -> String {
    format!("nanobot:{}:websocket:bytes:{client_tag}", bot_tag(bot))
}

/// A pending pairing request of `bot` by its code (JSON, TTL 600 s).
pub fn pairing_code(bot: &str, code: &str) -> String {
    format!("nanobot:{}:pairing:code:{code}", bot_tag(bot))
}

/// The set of pending pairing codes of `bot` (an index of [`pairing_code`] keys; a code
/// whose key expired is dropped from it when listed).
pub fn pairing_index(bot: &str) -> String {
    format!("nanobot:{}:pairing:codes", bot_tag(bot))
}

/// The pending code of one sender of a channel (same TTL as the code).
pub fn pairing_sender(bot: &str, channel: &str, sender_id: &str) -> String {
    format!(
        "nanobot:{}:pairing:sender:{channel}:{sender_id}",
        bot_tag(bot)
    )
}

/// The set of senders of a channel approved through pairing.
pub fn pairing_approved(bot: &str, channel: &str) -> String {
    format!("nanobot:{}:pairing:approved:{channel}", bot_tag(bot))
}

/// One day's token usage of `bot` (`day`: `YYYY-MM-DD`, UTC), a hash: `in:<model>` and
/// `out:<model>` (tokens the providers reported) and `total`. Kept (no expiry).
pub fn usage_day(bot: &str, day: &str) -> String {
    format!("nanobot:{}:usage:day:{day}", bot_tag(bot))
}

/// One month's token usage of `bot` (`month`: `YYYY-MM`, UTC): the same hash as [`usage_day`].
pub fn usage_month(bot: &str, month: &str) -> String {
    format!("nanobot:{}:usage:month:{month}", bot_tag(bot))
}

/// The messages one sender sent `bot` on `channel` in the last minute: a sorted set of message
/// ids scored by their receipt time in ms (`bots.<id>.limits.maxMessagesPerMinutePerSender`).
pub fn sender_rate(bot: &str, channel: &str, sender_id: &str) -> String {
    format!("nanobot:{}:limit:rate:{channel}:{sender_id}", bot_tag(bot))
}

/// The turns of `bot` running now, across runners: a sorted set of turn tokens scored by their
/// lease's expiry in ms (`bots.<id>.limits.maxConcurrentTurns`).
pub fn bot_turns(bot: &str) -> String {
    format!("nanobot:{}:limit:turns", bot_tag(bot))
}

/// The SCAN MATCH patterns of every key of `bot` (a plain id: letters, digits, `-`, `_`, so
/// that no pattern matches another bot's keys): its per-bot keys `{<bot>}` and its sessions'
/// keys `{<bot>:…}`, what `nanobot bots remove --purge` deletes.
pub fn bot_key_patterns(bot: &str) -> [String; 2] {
    [
        format!("nanobot:{}:*", bot_tag(bot)),
        format!("nanobot:{{{bot}:*"),
    ]
}

/// The prefix of `bot`'s token usage keys ([`usage_day`], [`usage_month`]).
pub fn usage_prefix(bot: &str) -> String {
    format!("nanobot:{}:usage:", bot_tag(bot))
}

/// The Redis ACL key patterns (`~…` without the tilde) `role` needs: each key function with
/// its hash tag and ids turned into `*`. The tools role keeps nothing in Redis; the CLI (the
/// operator: pairing, status) may read and write every key of the fleet.
pub fn acl_patterns(role: crate::subjects::Role) -> Vec<String> {
    acl_patterns_of(role, None)
}

/// [`acl_patterns`] for every bot (`bot` = `None`) or for one bot's keys only (a per-bot
/// deployment, `nanobot deploy redis-acl --bot`): its session keys `{<bot>:*}`, its per-bot
/// keys `{<bot>}`, its cron role's own leader lease ([`cron_leader`]). `bot` must be a plain
/// id (letters, digits, `-`, `_`) so that no pattern matches another bot's keys.
pub fn acl_patterns_of(role: crate::subjects::Role, bot: Option<&str>) -> Vec<String> {
    use crate::subjects::Role;
    const ID: &str = "*";
    let (b, s) = ("b", "s");
    let session = || {
        vec![
            session_meta(b, s),
            session_messages(b, s),
            session_lease(b, s),
            session_fence(b, s),
            session_cursor(b, s),
            session_outbox(b, s),
            inbound_seen(b, s, ID),
            inbound_attempts(b, s, ID),
            sessions(b),
        ]
    };
    let keys = match role {
        Role::Gateway => vec![
            outbound_delivered(b, ID),
            telegram_poller(b, ID),
            telegram_poller_fence(b, ID),
            telegram_offset(b, ID),
            telegram_stream(b, ID),
            stream_preview(b, "slack", ID),
            stream_preview(b, "discord", ID),
            email_poller(b, ID),
            email_poller_fence(b, ID),
            email_cursor(b, ID),
            email_thread(b, ID),
            slack_event(b, ID),
            discord_gateway(b, ID),
            discord_gateway_fence(b, ID),
            channel_connection(b, ID, ID),
            channel_connection_fence(b, ID, ID),
            channel_event(b, ID, ID),
            channel_state(b, ID, ID),
            stream_preview(b, "feishu", ID),
            stream_preview(b, "dingtalk", ID),
            stream_preview(b, "wecom", ID),
            stream_preview(b, "qq", ID),
            stream_preview(b, "napcat", ID),
            websocket_log(b, ID),
            websocket_logged(b, ID),
            websocket_owner(b, ID),
            websocket_token(b, ID),
            websocket_client_bytes(b, ID),
            pairing_code(b, ID),
            pairing_index(b),
            pairing_sender(b, ID, ID),
            pairing_approved(b, ID),
        ],
        Role::Agent => {
            let mut keys = session();
            keys.extend([
                subagents_running(b),
                subagent_result(b, ID),
                usage_day(b, ID),
                usage_month(b, ID),
                sender_rate(b, ID, ID),
                bot_turns(b),
            ]);
            keys
        }
        Role::Memory => {
            let mut keys = session();
            keys.extend([memory_lock(b), memory_fence(b), memory_job_done(b, ID)]);
            keys
        }
        Role::Cron => {
            let scope = bot.map(|_| b);
            vec![cron_leader(scope), cron_leader_fence(scope)]
        }
        Role::Tools => Vec::new(),
        Role::Cli => match bot {
            None => return vec!["nanobot:*".into()],
            // Every key of the bot: its per-bot keys and its sessions'.
            Some(bot) => {
                return vec![
                    format!("nanobot:{{{bot}}}:*"),
                    format!("nanobot:{{{bot}:*}}:*"),
                ];
            }
        },
    };
    keys.iter()
        .map(|k| match bot {
            None => any_tag(k),
            Some(bot) => bot_tagged(k, bot),
        })
        .collect()
}

/// The keys `role` may read but never write (Redis ACL `%R~<pattern>`), for every bot: the
/// gateway's HTTP API reads the day usage hashes (`GET /v1/usage`), which the runners write.
/// A per-bot gateway offers no admin endpoints, so none for one bot.
pub fn acl_read_patterns_of(role: crate::subjects::Role, bot: Option<&str>) -> Vec<String> {
    match (role, bot) {
        (crate::subjects::Role::Gateway, None) => vec![any_tag(&usage_day("b", "*"))],
        _ => Vec::new(),
    }
}

/// `key` (built with bot `b` and session `s`) with its hash tag made `bot`'s: `{<bot>}` for a
/// per-bot key, `{<bot>:*}` for a session key.
fn bot_tagged(key: &str, bot: &str) -> String {
    match hash_tag(key) {
        "b" => key.replacen("{b}", &format!("{{{bot}}}"), 1),
        "b:s" => key.replacen("{b:s}", &format!("{{{bot}:*}}"), 1),
        _ => key.to_string(),
    }
}

/// `key` with its hash tag replaced by `{*}` (any bot, any session).
fn any_tag(key: &str) -> String {
    let tag = hash_tag(key);
    if tag == key || tag == "fleet" {
        return key.to_string();
    }
    key.replacen(&format!("{{{tag}}}"), "{*}", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of one session, as the session's scripts touch them together.
    fn session_keys(bot: &str, s: &str) -> Vec<String> {
        vec![
            session_meta(bot, s),
            session_messages(bot, s),
            session_lease(bot, s),
            session_fence(bot, s),
            session_cursor(bot, s),
            session_outbox(bot, s),
            inbound_seen(bot, s, "m-1"),
            inbound_attempts(bot, s, "m-1"),
        ]
    }

    #[test]
    fn every_key_of_a_session_shares_one_hash_tag_whatever_the_session_key() {
        for session in [
            "api:x",
            "telegram:123:topic:7",
            "a}b",
            "}starts-with-a-brace",
            "{x}",
            "ends{",
            "",
        ] {
            let keys = session_keys("b", session);
            let tag = hash_tag(&keys[0]);
            assert!(!tag.is_empty());
            for k in &keys {
                assert_eq!(hash_tag(k), tag, "{k} shares the slot of {}", keys[0]);
                assert!(k.starts_with("nanobot:{"), "{k}");
            }
        }
        assert_ne!(
            hash_tag(&session_meta("b", "s1")),
            hash_tag(&session_meta("b", "s2")),
            "sessions spread over slots"
        );
        assert_ne!(
            hash_tag(&session_meta("b", "a}b")),
            hash_tag(&session_meta("b", "a}c")),
            "digested tags still tell sessions apart"
        );
        assert!(
            session_meta("b", "{x}").starts_with("nanobot:{b:#"),
            "a braced session key keeps its bot in the tag"
        );
    }

    #[test]
    fn per_bot_and_fleet_locks_share_a_tag_with_their_fence() {
        for bot in ["b", "we{ird}"] {
            assert_eq!(hash_tag(&memory_lock(bot)), hash_tag(&memory_fence(bot)));
            assert_ne!(hash_tag(&memory_lock(bot)), memory_lock(bot));
        }
        assert_eq!(hash_tag(CRON_LEADER), hash_tag(CRON_LEADER_FENCE));
        assert_eq!(hash_tag(CRON_LEADER), "fleet");
        assert_eq!(cron_leader(None), CRON_LEADER);
        assert_eq!(cron_leader_fence(None), CRON_LEADER_FENCE);
        let (leader, fence) = (cron_leader(Some("a")), cron_leader_fence(Some("a")));
        assert_eq!((hash_tag(&leader), hash_tag(&fence)), ("a", "a"));
        assert_ne!(cron_leader(Some("a")), cron_leader(Some("b")));
    }

    #[test]
    fn hash_tag_follows_redis_cluster_rules() {
        assert_eq!(hash_tag("a{b}c"), "b");
        assert_eq!(
            hash_tag("a{}c{d}"),
            "a{}c{d}",
            "an empty tag hashes the whole key"
        );
        assert_eq!(hash_tag("a{b"), "a{b");
        assert_eq!(hash_tag("{x}{y}"), "x");
    }

    #[test]
    fn keys_have_the_prefix_and_no_spaces_and_never_collide() {
        let mut all = session_keys("b", "api:x");
        all.extend([
            sessions("b"),
            outbound_delivered("b", "1"),
            memory_lock("b"),
            memory_fence("b"),
            memory_job_done("b", "j"),
            telegram_poller("b", "t"),
            telegram_poller_fence("b", "t"),
            telegram_offset("b", "t"),
            telegram_stream("b", "m"),
            stream_preview("b", "slack", "m"),
            stream_preview_edit("b", "slack", "m"),
            telegram_album("b", "t", -100, "g"),
            telegram_album_claim("b", "t", -100, "g"),
            telegram_albums("b", "t"),
            email_poller("b", "m"),
            email_poller_fence("b", "m"),
            email_cursor("b", "m"),
            email_thread("b", "email:x"),
            websocket_log("b", "c"),
            websocket_logged("b", "m"),
            websocket_owner("b", "c"),
            websocket_token("b", "t"),
            websocket_client_bytes("b", "c"),
            pairing_code("b", "C"),
            pairing_index("b"),
            pairing_sender("b", "telegram", "42|alice"),
            pairing_approved("b", "telegram"),
            CRON_LEADER.to_string(),
            CRON_LEADER_FENCE.to_string(),
        ]);
        for k in &all {
            assert!(k.starts_with("nanobot:{"), "{k}");
            assert!(!k.contains(' '), "{k}");
        }
        let unique: std::collections::BTreeSet<&String> = all.iter().collect();
        assert_eq!(unique.len(), all.len(), "{all:?}");
    }

    #[test]
    fn acl_patterns_cover_each_roles_keys_and_nothing_of_the_others() {
        use crate::subjects::Role;
        let glob = |pattern: &str, key: &str| {
            // Redis ACL globs here only use `*` (any run of characters).
            let parts: Vec<&str> = pattern.split('*').collect();
            let mut rest = key;
            for (i, part) in parts.iter().enumerate() {
                if i == 0 {
                    let Some(r) = rest.strip_prefix(part) else {
                        return false;
                    };
                    rest = r;
                } else if i == parts.len() - 1 {
                    return rest.ends_with(part);
                } else {
                    let Some(at) = rest.find(part) else {
                        return false;
                    };
                    rest = &rest[at + part.len()..];
                }
            }
            rest.is_empty()
        };
        let allowed = |role: Role, key: &str| acl_patterns(role).iter().any(|p| glob(p, key));
        let lease = session_lease("alpha", "telegram:42");
        assert!(allowed(Role::Agent, &lease));
        assert!(allowed(Role::Agent, &session_messages("a}b", "{x")));
        assert!(allowed(Role::Memory, &memory_lock("alpha")));
        assert!(!allowed(Role::Agent, &memory_lock("alpha")));
        assert!(!allowed(Role::Gateway, &lease));
        assert!(allowed(
            Role::Gateway,
            &pairing_approved("alpha", "telegram")
        ));
        assert!(allowed(Role::Cron, CRON_LEADER));
        assert!(!allowed(Role::Cron, &lease));
        assert!(acl_patterns(Role::Tools).is_empty());
        assert!(!allowed(Role::Agent, "other:key"));

        let of = |role: Role, bot: &str, key: &str| {
            acl_patterns_of(role, Some(bot))
                .iter()
                .any(|p| glob(p, key))
        };
        for role in [Role::Agent, Role::Memory, Role::Cli] {
            assert!(of(role, "alpha", &lease), "{role:?}");
            assert!(
                of(role, "alpha", &session_messages("alpha", "api:{x}")),
                "{role:?}"
            );
            assert!(
                !of(role, "alpha", &session_lease("beta", "telegram:42")),
                "{role:?}"
            );
            assert!(
                !of(role, "alpha", &session_lease("alpha-2", "x")),
                "{role:?}"
            );
            assert!(!of(role, "alpha", &sessions("beta")), "{role:?}");
        }
        assert!(of(Role::Agent, "alpha", &sessions("alpha")));
        assert!(of(Role::Memory, "alpha", &memory_lock("alpha")));
        assert!(!of(Role::Memory, "alpha", &memory_lock("beta")));
        assert!(of(Role::Gateway, "alpha", &pairing_index("alpha")));
        assert!(!of(Role::Gateway, "alpha", &pairing_index("beta")));
        assert!(of(Role::Cron, "alpha", &cron_leader(Some("alpha"))));
        assert!(!of(Role::Cron, "alpha", &cron_leader(Some("beta"))));
        assert!(!of(Role::Cron, "alpha", CRON_LEADER));
        assert!(of(Role::Cli, "alpha", &cron_leader(Some("alpha"))));
        assert!(acl_patterns_of(Role::Tools, Some("alpha")).is_empty());
    }

    #[test]
    fn a_bots_purge_patterns_match_its_keys_and_no_other_bots() {
        let matches = |bot: &str, key: &str| {
            bot_key_patterns(bot)
                .iter()
                .any(|p| key.starts_with(p.trim_end_matches('*')))
        };
        for (bot, other) in [("a", "ab"), ("a", "a-b"), ("bot_1", "bot_10")] {
            let mut mine = session_keys(bot, "telegram:42:话题 🤖");
            mine.extend(session_keys(bot, "{brace}"));
            mine.extend([
                sessions(bot),
                memory_lock(bot),
                usage_day(bot, "2026-11-27"),
                pairing_index(bot),
            ]);
            for key in &mine {
                assert!(matches(bot, key), "{key} is {bot}'s");
                assert!(!matches(other, key), "{key} is not {other}'s");
            }
        }
        assert!(usage_day("a", "2026-11-27").starts_with(&usage_prefix("a")));
        assert!(!matches("a", CRON_LEADER));
    }
}
