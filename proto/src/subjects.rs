//! Every NATS subject, stream, consumer and queue group name of the fleet. Nothing else in the
//! workspace spells one.
//!
//! Layout: `nanobot.<bot>.<area>.<…>`. Bot ids, channel names and chat ids are turned into
//! single subject tokens by [`token`], so user data can never add tokens or wildcards, and no
//! token is longer than [`MAX_TOKEN`], so no user data can make a subject the server refuses
//! (which would close the role's shared connection). The original value always travels in the
//! message payload.

use sha2::{Digest as _, Sha256};

/// The JetStream stream holding inbound chat messages of every bot (file storage).
pub const INBOUND_STREAM: &str = "NANOBOT_INBOUND";
/// Subjects captured by [`INBOUND_STREAM`].
pub const INBOUND_ALL: &str = "nanobot.*.inbound.>";
/// Durable consumer shared by all agent runners (work-queue style).
pub const INBOUND_CONSUMER: &str = "agent-runners";

/// The JetStream stream holding outbound replies and events of every bot.
pub const OUTBOUND_STREAM: &str = "NANOBOT_OUTBOUND";
/// Subjects captured by [`OUTBOUND_STREAM`].
pub const OUTBOUND_ALL: &str = "nanobot.*.outbound.>";

/// The JetStream work-queue stream for background jobs (consolidation, cron fires, subagents).
pub const JOBS_STREAM: &str = "NANOBOT_JOBS";
/// Subjects captured by [`JOBS_STREAM`].
pub const JOBS_ALL: &str = "nanobot.*.jobs.>";
/// Durable consumer of the memory workers.
pub const CONSOLIDATE_CONSUMER: &str = "memory-workers";
/// Durable consumer of the agent runners for cron fires.
pub const CRON_FIRE_CONSUMER: &str = "agent-cron";
/// Filter for every bot's consolidation requests.
pub const CONSOLIDATE_ALL: &str = "nanobot.*.jobs.consolidate";
/// Filter for every bot's cron fires.
pub const CRON_FIRE_ALL: &str = "nanobot.*.jobs.cron";
/// Durable consumer of the agent runners for subagent tasks.
pub const SUBAGENT_CONSUMER: &str = "agent-subagents";
/// Filter for every bot's subagent tasks.
pub const SUBAGENT_ALL: &str = "nanobot.*.jobs.subagent";

/// The JetStream object store holding message contents larger than the broker's message
/// limit (a 5 MB reply), referenced by `OutboundMessage.content_ref`.
pub const PAYLOADS_BUCKET: &str = "nanobot-payloads";

/// The JetStream key-value bucket of the bot registry: one key per bot id, its value the
/// bot's `bots.<id>` entry as JSON with secrets as `${VAR}` references. The CLI writes it;
/// the gateway and the agent runners watch it.
pub const BOTS_BUCKET: &str = "nanobot-bots";

/// Events that need no durability (consolidation results, stream deltas mirrors).
pub const EVENTS_ALL: &str = "nanobot.*.events.>";

/// Queue group every tool executor joins.
pub const TOOLS_QUEUE_GROUP: &str = "nanobot-tools";
/// Every tool call of every bot: `nanobot.<bot>.tools.call.<tool>`.
pub const TOOL_CALL_ALL: &str = "nanobot.*.tools.call.*";
/// Every bot's tool-list request.
pub const TOOL_LIST_ALL: &str = "nanobot.*.tools.list";

/// Every bot's exec-session listing (every executor answers; no queue group).
pub const EXEC_SESSIONS_ALL: &str = "nanobot.*.tools.sessions";

/// The exec-session listing of `bot`: an `ExecSessionsRequest` every executor answers with
/// the sessions it runs for the asked chat session.
pub fn exec_sessions(bot: &str) -> String {
    format!("nanobot.{}.tools.sessions", token(bot))
}

/// Every tool call of every bot sent to executor `executor` itself (no queue group): what it
/// subscribes to besides [`TOOL_CALL_ALL`]. See [`tool_call_on`].
pub fn tool_call_on_all(executor: &str) -> String {
    format!("nanobot.*.tools.on.{}.*", token(executor))
}

/// Fleet status probe: every service instance answers (no queue group).
pub const STATUS: &str = "nanobot.fleet.status";
/// Cancels a running turn wherever it runs: `nanobot.<bot>.control.stop.<session>`.
pub const STOP_ALL: &str = "nanobot.*.control.stop.*";

/// Durable consumer of a chat channel's outbound messages (all bots), shared by the gateway
/// replicas: `gateway-<channel>`.
pub fn channel_outbound_consumer(channel: &str) -> String {
    format!("gateway-{}", token(channel))
}

/// The characters allowed verbatim in a subject token.
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '@' | '+' | '=')
}

/// Longest subject token [`token`] returns.
pub const MAX_TOKEN: usize = 64;

/// Returns `value` as one safe subject token: verbatim when it only holds plain characters,
/// otherwise `~` followed by its unpadded base64url (so `.`, `*`, `>` and spaces can't leak);
/// either form longer than [`MAX_TOKEN`] becomes `#` and the base64url SHA-256 of the value.
pub fn token(value: &str) -> String {
    let out = if !value.is_empty() && value.chars().all(is_plain) {
        value.to_string()
    } else {
        format!("~{}", base64url(value.as_bytes()))
    };
    if out.len() <= MAX_TOKEN {
        return out;
    }
    format!("#{}", base64url(&Sha256::digest(value.as_bytes())))
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let idx = (n >> (18 - 6 * i)) & 63;
            out.push(char::from(ALPHABET[idx as usize]));
        }
    }
    out
}

/// Inbound messages of one session: `nanobot.<bot>.inbound.<channel>.<session>`. The session
/// in the subject makes the stream itself the session's ordered mailbox: a runner reads the
/// session's next message with a direct get by subject.
pub fn inbound(bot: &str, channel: &str, session_key: &str) -> String {
    format!(
        "nanobot.{}.inbound.{}.{}",
        token(bot),
        token(channel),
        token(session_key)
    )
}

/// Outbound messages of `bot` for one chat: `nanobot.<bot>.outbound.<channel>.<chat>`.
pub fn outbound(bot: &str, channel: &str, chat_id: &str) -> String {
    format!(
        "nanobot.{}.outbound.{}.{}",
        token(bot),
        token(channel),
        token(chat_id)
    )
}

/// All outbound messages of `bot` for `channel` (a consumer filter).
pub fn outbound_channel(bot: &str, channel: &str) -> String {
    format!("nanobot.{}.outbound.{}.*", token(bot), token(channel))
}

/// All outbound messages for `channel`, whatever the bot (a consumer filter).
pub fn outbound_channel_all_bots(channel: &str) -> String {
    format!("nanobot.*.outbound.{}.*", token(channel))
}

/// One tool of `bot`: `nanobot.<bot>.tools.call.<tool>`.
pub fn tool_call(bot: &str, tool: &str) -> String {
    format!("nanobot.{}.tools.call.{}", token(bot), token(tool))
}

/// One tool of `bot` on one executor: `nanobot.<bot>.tools.on.<executor>.<tool>`, for a call
/// only that executor can serve (`exec_session` of an exec session it runs). No responder
/// means the executor stopped.
pub fn tool_call_on(bot: &str, executor: &str, tool: &str) -> String {
    format!(
        "nanobot.{}.tools.on.{}.{}",
        token(bot),
        token(executor),
        token(tool)
    )
}

/// The tool-list request of `bot`.
pub fn tool_list(bot: &str) -> String {
    format!("nanobot.{}.tools.list", token(bot))
}

/// Consolidation requests for `bot` (JetStream work queue).
pub fn consolidate(bot: &str) -> String {
    format!("nanobot.{}.jobs.consolidate", token(bot))
}

/// Cron fires for `bot` (JetStream work queue).
pub fn cron_fire(bot: &str) -> String {
    format!("nanobot.{}.jobs.cron", token(bot))
}

/// Subagent tasks of `bot` (JetStream work queue).
pub fn subagent(bot: &str) -> String {
    format!("nanobot.{}.jobs.subagent", token(bot))
}

/// Consolidation results for `bot` (core NATS event).
pub fn consolidated(bot: &str) -> String {
    format!("nanobot.{}.events.consolidated", token(bot))
}

/// New entries in a WebSocket chat log of `bot` (core NATS; the payload is the chat id): the
/// replica holding the chat's connections reads the log.
pub fn websocket_notify(bot: &str) -> String {
    format!("nanobot.{}.events.websocket", token(bot))
}

/// The gateway replicas' presence beacons (core NATS, no stream): every replica announces its
/// instance name here each second and listens to the others', so the replicas spread the
/// channels' long connections among themselves. Fleet-wide (`nanobot.fleet.gateways`) unless
/// the gateway serves one bot (`--bot`, `scope`), then in that bot's subjects.
pub fn gateway_peers(scope: Option<&str>) -> String {
    format!(
        "nanobot.{}.gateways",
        scope.map_or_else(|| "fleet".to_string(), token)
    )
}

/// Stop request for one session of `bot`.
pub fn stop(bot: &str, session_key: &str) -> String {
    format!("nanobot.{}.control.stop.{}", token(bot), token(session_key))
}

/// What a subject under [`TOOL_CALL_ALL`] or [`TOOL_LIST_ALL`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSubject<'a> {
    /// `nanobot.<bot>.tools.call.<tool>` or `nanobot.<bot>.tools.on.<executor>.<tool>`: run
    /// the tool (tokens as published).
    Call {
        /// The bot token.
        bot: &'a str,
        /// The tool token.
        tool: &'a str,
    },
    /// `nanobot.<bot>.tools.list`: list the tools.
    List {
        /// The bot token.
        bot: &'a str,
    },
}

/// Classifies a tool subject; `None` for anything else.
pub fn parse_tool_subject(subject: &str) -> Option<ToolSubject<'_>> {
    let tokens: Vec<&str> = subject.split('.').collect();
    match tokens.as_slice() {
        ["nanobot", bot, "tools", "call", tool] | ["nanobot", bot, "tools", "on", _, tool] => {
            Some(ToolSubject::Call { bot, tool })
        }
        ["nanobot", bot, "tools", "list"] => Some(ToolSubject::List { bot }),
        _ => None,
    }
}

/// `pattern` (an every-bot pattern, `nanobot.*.…`) for the bots a process serves: unchanged for
/// every bot (`scope` = `None`), else for that bot only (`nanobot.<bot>.…`), as a role run with
/// `--bot` subscribes, since a per-bot user may subscribe to its bot's subjects only.
pub fn scoped(pattern: &str, scope: Option<&str>) -> String {
    match (scope, pattern.strip_prefix("nanobot.*.")) {
        (Some(bot), Some(rest)) => format!("nanobot.{}.{rest}", token(bot)),
        _ => pattern.to_string(),
    }
}

/// Returns the bot token of any `nanobot.<bot>.…` subject.
pub fn bot_of(subject: &str) -> Option<&str> {
    let mut parts = subject.split('.');
    (parts.next()? == "nanobot").then_some(())?;
    parts.next()
}

/// A role of the fleet that connects to NATS as its own user (`nanobot deploy nats-config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `nanobot-gateway`: chat channels and the HTTP API.
    Gateway,
    /// `nanobot-agent`: the runners.
    Agent,
    /// `nanobot-tools`: the tool executors.
    Tools,
    /// `nanobot-memory`: Consolidator, Dream.
    Memory,
    /// `nanobot-cron`: the scheduler.
    Cron,
    /// `nanobot`: the operator's command line (`agent`, `status`, `bus init`, `cron run`).
    Cli,
}

impl Role {
    /// Every role, in a stable order.
    pub const ALL: [Role; 6] = [
        Role::Gateway,
        Role::Agent,
        Role::Tools,
        Role::Memory,
        Role::Cron,
        Role::Cli,
    ];

    /// The role's name (`gateway`, …), also its NATS user and Redis ACL user.
    pub fn name(self) -> &'static str {
        match self {
            Role::Gateway => "gateway",
            Role::Agent => "agent",
            Role::Tools => "tools",
            Role::Memory => "memory",
            Role::Cron => "cron",
            Role::Cli => "cli",
        }
    }
}

/// Every reply inbox of every role (the operator's view; no role may subscribe to it).
pub const INBOX_ALL: &str = "_INBOX.>";

/// The reply-inbox prefix of `role`'s clients (async-nats `custom_inbox_prefix`):
/// `_INBOX.<role>`, so its inboxes are `_INBOX.<role>.<id>`. A role may subscribe under its own
/// prefix only ([`inbox_of`]): no role reads another's replies (JetStream API answers, fetched
/// messages, tool results). The per-bot users of a role share the prefix, but each bot's
/// account is a subject space of its own.
pub fn inbox_prefix(role: Role) -> String {
    format!("_INBOX.{}", role.name())
}

/// Every reply inbox of `role`'s clients: `_INBOX.<role>.>`.
pub fn inbox_of(role: Role) -> String {
    format!("{}.>", inbox_prefix(role))
}

/// How long a role may answer a request it received (nats-server `allow_responses`; any
/// number of messages, for the heartbeats of long tool calls): longer than any tool call
/// (exec: 600 s), so a reply is never refused; no role may publish to an inbox otherwise.
pub const RESPONSE_WINDOW: &str = "1h";

/// What one role may publish and subscribe to: NATS subject patterns for a nats-server
/// `permissions` block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    /// Subjects the role may publish to.
    pub publish: Vec<String>,
    /// Subjects the role may subscribe to.
    pub subscribe: Vec<String>,
}

/// JetStream API subjects (`$JS.API.…`, `$JS.ACK.…`) and the object store's (`$O.…`), as
/// nats-server and the clients spell them.
pub mod jetstream {
    /// Stream info (roles check the streams at start).
    pub fn stream_info(stream: &str) -> String {
        format!("$JS.API.STREAM.INFO.{stream}")
    }

    /// Creating or updating any consumer of `stream` (durable, ephemeral or ordered; every
    /// form of the create request).
    pub fn consumer_create(stream: &str) -> [String; 3] {
        [
            format!("$JS.API.CONSUMER.CREATE.{stream}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.>"),
            format!("$JS.API.CONSUMER.DURABLE.CREATE.{stream}.*"),
        ]
    }

    /// Info and deletion of the consumers of `stream`.
    pub fn consumer_manage(stream: &str) -> [String; 2] {
        [
            format!("$JS.API.CONSUMER.INFO.{stream}.*"),
            format!("$JS.API.CONSUMER.DELETE.{stream}.*"),
        ]
    }

    /// Pull requests for the consumers of `stream`.
    pub fn consumer_next(stream: &str) -> String {
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.*")
    }

    /// Acknowledgements of messages of `stream`.
    pub fn ack(stream: &str) -> String {
        format!("$JS.ACK.{stream}.>")
    }

    /// Direct gets from `stream` (by sequence, next or last by subject).
    pub fn direct_get(stream: &str) -> [String; 2] {
        [
            format!("$JS.API.DIRECT.GET.{stream}"),
            format!("$JS.API.DIRECT.GET.{stream}.>"),
        ]
    }

    /// The stream behind an object store bucket.
    pub fn object_stream(bucket: &str) -> String {
        format!("OBJ_{bucket}")
    }

    /// Writing objects to `bucket` (chunks, metadata, replacing an object's old chunks).
    pub fn object_put(bucket: &str) -> Vec<String> {
        let stream = object_stream(bucket);
        vec![
            format!("$O.{bucket}.>"),
            format!("$JS.API.STREAM.PURGE.{stream}"),
        ]
    }

    /// Reading objects from `bucket` (metadata lookup, then an ordered consumer of chunks).
    pub fn object_get(bucket: &str) -> Vec<String> {
        let stream = object_stream(bucket);
        let mut out = vec![
            stream_info(&stream),
            format!("$JS.API.STREAM.MSG.GET.{stream}"),
        ];
        out.extend(direct_get(&stream));
        out.extend(consumer_create(&stream));
        out.extend(consumer_manage(&stream));
        out
    }

    /// The stream behind a key-value bucket.
    pub fn kv_stream(bucket: &str) -> String {
        format!("KV_{bucket}")
    }

    /// Reading and watching a key-value bucket (bucket info, direct gets, the watch's ordered
    /// consumer); no writes.
    pub fn kv_watch(bucket: &str) -> Vec<String> {
        let stream = kv_stream(bucket);
        let mut out = vec![
            stream_info(&stream),
            format!("$JS.API.STREAM.MSG.GET.{stream}"),
        ];
        out.extend(direct_get(&stream));
        out.extend(consumer_create(&stream));
        out.extend(consumer_manage(&stream));
        out
    }

    /// Every JetStream API call (stream creation and changes: the operator's `bus init`).
    pub const API_ALL: &str = "$JS.API.>";
}

/// The publish/subscribe patterns `role` needs, for every bot (`bot` = `None`) or for one
/// bot only. Everything else is refused by a nats-server configured with them:
/// - only the gateway, the CLI and the agent (subagent announcements are inbound messages of
///   the origin session) publish inbound messages;
/// - tool executors take tool calls (from the queue group and on their own subject, for exec
///   sessions), hear `/stop` (it ends the session's exec sessions) and publish nothing but
///   replies and the exec-session listing they ask each other (and, as every role, read
///   the bot registry);
/// - only the CLI (the operator) creates or changes streams.
///
/// Every role answers [`STATUS`] probes and reads its replies on its own inboxes
/// ([`inbox_of`]); it publishes to an inbox only to answer a request it received (the server's
/// `allow_responses`, [`RESPONSE_WINDOW`]).
pub fn permissions(role: Role, bot: Option<&str>) -> Permissions {
    let b = bot.map_or_else(|| "*".to_string(), token);
    let area = |area: &str| format!("nanobot.{b}.{area}.>");
    let streams = [INBOUND_STREAM, OUTBOUND_STREAM, JOBS_STREAM];
    let mut publish: Vec<String> = Vec::new();
    let mut subscribe: Vec<String> = vec![inbox_of(role), STATUS.into()];
    // Every role checks the streams and the payload store at start.
    publish.extend(streams.iter().map(|s| jetstream::stream_info(s)));
    publish.push(jetstream::stream_info(&jetstream::object_stream(
        PAYLOADS_BUCKET,
    )));
    let consume = |publish: &mut Vec<String>, stream: &str| {
        publish.extend(jetstream::consumer_create(stream));
        publish.extend(jetstream::consumer_manage(stream));
        publish.push(jetstream::consumer_next(stream));
        publish.push(jetstream::ack(stream));
    };
    let tools = [
        format!("nanobot.{b}.tools.call.*"),
        format!("nanobot.{b}.tools.list"),
    ];
    // Calls for one executor (any executor: they share the role's user).
    let tools_on = format!("nanobot.{b}.tools.on.*.*");
    match role {
        Role::Gateway => {
            publish.push(area("inbound"));
            publish.push(format!("nanobot.{b}.events.websocket"));
            subscribe.push(format!("nanobot.{b}.events.websocket"));
            publish.push(gateway_peers(bot));
            subscribe.push(gateway_peers(bot));
            consume(&mut publish, OUTBOUND_STREAM);
            publish.extend(jetstream::object_get(PAYLOADS_BUCKET));
            publish.extend(jetstream::kv_watch(BOTS_BUCKET));
            // The HTTP API's `/v1/bots` writes the registry (a fleet-wide gateway only).
            if bot.is_none() {
                publish.push(format!("$KV.{BOTS_BUCKET}.>"));
            }
        }
        Role::Agent => {
            publish.extend([area("inbound"), area("outbound"), area("jobs")]);
            publish.push(format!("nanobot.{b}.control.stop.*"));
            publish.extend(tools.clone());
            publish.push(tools_on.clone());
            consume(&mut publish, INBOUND_STREAM);
            consume(&mut publish, JOBS_STREAM);
            publish.extend(jetstream::direct_get(INBOUND_STREAM));
            publish.extend(jetstream::object_put(PAYLOADS_BUCKET));
            publish.extend(jetstream::object_get(PAYLOADS_BUCKET));
            subscribe.push(format!("nanobot.{b}.control.stop.*"));
            subscribe.push(area("events"));
            publish.extend(jetstream::kv_watch(BOTS_BUCKET));
        }
        Role::Tools => {
            subscribe.extend(tools.clone());
            subscribe.push(tools_on.clone());
            subscribe.push(format!("nanobot.{b}.control.stop.*"));
            // `list_exec_sessions` asks every executor for its sessions of the caller.
            publish.push(format!("nanobot.{b}.tools.sessions"));
            subscribe.push(format!("nanobot.{b}.tools.sessions"));
            publish.extend(jetstream::kv_watch(BOTS_BUCKET));
        }
        Role::Memory => {
            publish.extend([area("jobs"), area("events"), area("outbound")]);
            publish.extend(tools.clone());
            consume(&mut publish, JOBS_STREAM);
            publish.extend(jetstream::object_put(PAYLOADS_BUCKET));
            publish.extend(jetstream::kv_watch(BOTS_BUCKET));
        }
        Role::Cron => {
            publish.push(area("jobs"));
            publish.extend(jetstream::kv_watch(BOTS_BUCKET));
        }
        Role::Cli => {
            publish.extend([area("inbound"), area("jobs")]);
            publish.push(format!("nanobot.{b}.control.stop.*"));
            publish.push(STATUS.into());
            publish.push(jetstream::API_ALL.into());
            publish.push(jetstream::ack(OUTBOUND_STREAM));
            // `nanobot bots add|update|remove` writes the registry.
            publish.push(format!("$KV.{BOTS_BUCKET}.>"));
        }
    }
    let dedup = |mut v: Vec<String>| {
        let mut seen = std::collections::BTreeSet::new();
        v.retain(|s| seen.insert(s.clone()));
        v
    };
    Permissions {
        publish: dedup(publish),
        subscribe: dedup(subscribe),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_valid(subject: &str, wildcards: bool) {
        assert!(!subject.is_empty(), "empty subject");
        for t in subject.split('.') {
            assert!(!t.is_empty(), "empty token in {subject}");
            assert!(!t.contains(char::is_whitespace), "whitespace in {subject}");
            if !wildcards {
                assert!(
                    t != "*" && t != ">",
                    "wildcard in concrete subject {subject}"
                );
            }
        }
    }

    #[test]
    fn only_a_fleet_wide_gateway_writes_the_bot_registry_and_it_reads_usage_read_only() {
        let write = format!("$KV.{BOTS_BUCKET}.>");
        assert!(permissions(Role::Gateway, None).publish.contains(&write));
        assert!(
            !permissions(Role::Gateway, Some("alpha"))
                .publish
                .contains(&write)
        );
        assert!(!permissions(Role::Agent, None).publish.contains(&write));
        let read = crate::keys::acl_read_patterns_of(Role::Gateway, None);
        assert_eq!(read, ["nanobot:{*}:usage:day:*"]);
        assert!(crate::keys::acl_read_patterns_of(Role::Gateway, Some("alpha")).is_empty());
        assert!(crate::keys::acl_read_patterns_of(Role::Agent, None).is_empty());
    }

    #[test]
    fn every_subject_is_well_formed() {
        for s in [
            INBOUND_ALL,
            OUTBOUND_ALL,
            JOBS_ALL,
            CONSOLIDATE_ALL,
            CRON_FIRE_ALL,
            SUBAGENT_ALL,
            EVENTS_ALL,
            TOOL_CALL_ALL,
            TOOL_LIST_ALL,
            EXEC_SESSIONS_ALL,
            STATUS,
            STOP_ALL,
        ] {
            assert_valid(s, true);
        }
        let concrete = [
            inbound("b", "telegram", "telegram:42"),
            outbound("b", "api", "x"),
            tool_call("b", "read_file"),
            tool_list("b"),
            exec_sessions("b"),
            tool_call_on("b", "tools-1a2b3c4d", "exec_session"),
            consolidate("b"),
            cron_fire("b"),
            subagent("b"),
            consolidated("b"),
            websocket_notify("b"),
            stop("b", "api:x"),
        ];
        for s in &concrete {
            assert_valid(s, false);
        }
        for s in [
            outbound_channel("b", "api"),
            outbound_channel_all_bots("api"),
        ] {
            assert_valid(&s, true);
        }
    }

    #[test]
    fn user_data_never_adds_tokens_or_wildcards() {
        let s = outbound("my.bot", "api", "a.b *>");
        assert_eq!(s.split('.').count(), 5, "{s}");
        assert_valid(&s, false);
        assert_eq!(token("-100123"), "-100123");
        assert_eq!(token("api:default"), "api:default");
        assert_eq!(token("a.b"), "~YS5i");
        assert_ne!(token(""), "");
    }

    #[test]
    fn long_values_become_fixed_length_digest_tokens() {
        let plain = "a".repeat(MAX_TOKEN);
        assert_eq!(token(&plain), plain, "a token at the limit stays verbatim");
        let long = "x".repeat(5_000);
        let t = token(&long);
        assert!(t.starts_with('#') && t.len() <= MAX_TOKEN, "{t}");
        assert_eq!(t, token(&long), "deterministic");
        assert_ne!(t, token(&"x".repeat(5_001)));
        let dotted = "a.".repeat(40);
        assert!(token(&dotted).starts_with('#'));
        let s = inbound("b", "api", &format!("api:{long}"));
        assert!(s.len() < 200, "{s}");
        assert_valid(&s, false);
    }

    #[test]
    fn concrete_subjects_fall_under_their_stream_filters() {
        assert!(inbound("b", "cli", "cli:direct").starts_with("nanobot.b.inbound."));
        let s = inbound("b", "api", "api:a.b *");
        assert_eq!(s.split('.').count(), 5, "{s}");
        assert_ne!(inbound("b", "api", "x"), inbound("b", "api", "y"));
        assert_eq!(bot_of(&consolidate("bot1")), Some("bot1"));
        assert_eq!(bot_of("other.x"), None);
        assert_eq!(
            parse_tool_subject(&tool_call("b", "read_file")),
            Some(ToolSubject::Call {
                bot: "b",
                tool: "read_file"
            })
        );
        assert_eq!(
            parse_tool_subject(&tool_list("b")),
            Some(ToolSubject::List { bot: "b" })
        );
        assert_eq!(
            parse_tool_subject(&tool_call_on("b", "tools-1", "exec_session")),
            Some(ToolSubject::Call {
                bot: "b",
                tool: "exec_session"
            })
        );
        assert_eq!(parse_tool_subject("nanobot.b.tools.call"), None);
        assert_eq!(parse_tool_subject(&consolidate("b")), None);
    }

    #[test]
    fn only_gateways_the_cli_and_runners_may_publish_inbound_and_tools_only_reply() {
        let inbound = inbound("b", "api", "api:x");
        let allows = |patterns: &[String], subject: &str| {
            patterns.iter().any(|p| subject_matches(p, subject))
        };
        for role in Role::ALL {
            let p = permissions(role, None);
            let may = allows(&p.publish, &inbound);
            let expected = matches!(role, Role::Gateway | Role::Cli | Role::Agent);
            assert_eq!(may, expected, "{role:?} publishing inbound");
            assert!(allows(&p.subscribe, STATUS), "{role:?} answers status");
        }
        let tools = permissions(Role::Tools, None);
        assert!(allows(&tools.subscribe, &tool_call("b", "exec")));
        assert!(!allows(&tools.subscribe, &inbound));
        assert!(!allows(&tools.publish, &tool_call("b", "exec")));
        assert!(!allows(&tools.publish, &outbound("b", "api", "x")));
        assert!(!allows(&tools.publish, "_INBOX.abc.1"), "tools only answer");
        assert!(allows(&tools.subscribe, "_INBOX.tools.abc.1"));
        assert!(!allows(&tools.subscribe, "_INBOX.agent.abc.1"));
        for role in Role::ALL {
            let p = permissions(role, Some("alpha"));
            let own = format!("{}.x.1", inbox_prefix(role));
            assert!(allows(&p.subscribe, &own), "{role:?} reads its replies");
            assert!(
                !allows(&p.subscribe, INBOX_ALL),
                "{role:?} reads every inbox"
            );
            for other in Role::ALL.into_iter().filter(|o| *o != role) {
                let theirs = format!("{}.x.1", inbox_prefix(other));
                assert!(!allows(&p.subscribe, &theirs), "{role:?} reads {other:?}'s");
                assert!(!allows(&p.publish, &theirs), "{role:?} writes {other:?}'s");
            }
        }
        let on = tool_call_on("b", "tools-1a2b3c4d", "exec_session");
        assert!(subject_matches(&tool_call_on_all("tools-1a2b3c4d"), &on));
        assert!(allows(&tools.subscribe, &on));
        assert!(!allows(&tools.publish, &on));
        assert!(allows(&tools.subscribe, &stop("b", "api:x")));
        assert!(allows(&tools.publish, &exec_sessions("b")));
        assert!(allows(&tools.subscribe, &exec_sessions("b")));
        assert!(allows(&permissions(Role::Agent, None).publish, &on));
        let tools = permissions(Role::Tools, Some("alpha"));
        for pattern in [
            TOOL_CALL_ALL.to_string(),
            TOOL_LIST_ALL.into(),
            EXEC_SESSIONS_ALL.into(),
            STOP_ALL.into(),
            tool_call_on_all("tools-1"),
        ] {
            let own = scoped(&pattern, Some("alpha"));
            assert!(allows(&tools.subscribe, &own), "{own}");
            assert!(!allows(&tools.subscribe, &pattern), "{pattern}");
            assert_eq!(scoped(&pattern, None), pattern);
        }
        assert!(allows(
            &permissions(Role::Agent, Some("alpha")).subscribe,
            &scoped(STOP_ALL, Some("alpha"))
        ));
        let agent = permissions(Role::Agent, Some("alpha"));
        assert!(allows(&agent.publish, &tool_call("alpha", "exec")));
        assert!(!allows(&agent.publish, &tool_call("beta", "exec")));
        assert!(!allows(&agent.subscribe, &stop("beta", "api:x")));
        assert!(!allows(
            &permissions(Role::Gateway, None).publish,
            "$JS.API.STREAM.DELETE.NANOBOT_INBOUND"
        ));
    }

    /// NATS subject matching: `*` one token, `>` the rest.
    fn subject_matches(pattern: &str, subject: &str) -> bool {
        let (mut p, mut s) = (pattern.split('.'), subject.split('.'));
        loop {
            match (p.next(), s.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(_)) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }
}
