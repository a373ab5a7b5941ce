//! Slash commands (upstream `command/builtin.py`, `router.py`, reference §15): parsing with
//! `/cmd@bot` normalisation and case-insensitive matching, rejection of unknown commands
//! (with a did-you-mean from a difflib-style similarity, cutoff 0.6) and of arguments to
//! commands that take none, the `/help` and `/status` texts, and the dispatch that answers
//! a command ([`answer`]).
//!
//! # Layout
//! - `status`: `/status` (context estimate, search provider usage).
//! - `later`: `/dream` and `/compact`, answered at once and reported on when done.
//! - `prompts`: `/evaluator-prompt` and the gate prompt override it manages.
//! - `goal`: `/goal` and `/trigger`.

mod goal;
mod later;
mod prompts;
mod status;

use nanobot_core::pairing::PairingStore;
use nanobot_core::session::{SessionWriter, meta};

use crate::bots::Bot;
use crate::handlers::Deps;
use crate::memory_jobs;
use crate::stop;
use crate::turn::TurnInput;

pub use goal::{goal, trigger};

pub use later::{COMPACT_DONE, COMPACT_FAILED, COMPACT_STARTED, DREAMING};
use nanobot_runtime::pyfmt::{py_int, py_strip};
pub use prompts::evaluator_override;
pub use status::{SearchUsage, StatusInfo, status_text};

/// A command the fleet supports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/new`: archive and clear the session.
    New,
    /// `/compact`: archive the session's unarchived rows now (the AutoCompact job), keeping
    /// the conversation.
    Compact,
    /// `/stop`: cancel the session's running turn wherever it runs.
    Stop,
    /// `/restart`: the runner that receives it restarts (graceful shutdown, then re-exec).
    Restart,
    /// `/status`: runtime, model, tokens, context, session, uptime, tasks.
    Status,
    /// `/model [preset]`: show the session's model and the presets, or switch its preset.
    Model(Option<String>),
    /// `/history [n]`: the last n (10, at most 50) persisted user/assistant messages.
    History(Option<String>),
    /// `/goal <task>`: the task goes to the model as a long-running goal.
    Goal(Option<String>),
    /// `/trigger <name>`: upstream's local trigger (not available in the fleet).
    Trigger(Option<String>),
    /// `/dream`: run Dream now; answered at once, its report follows.
    Dream,
    /// `/dream-log [sha]`: the last (or given) Dream commit and its diff.
    DreamLog(Option<String>),
    /// `/dream-restore [sha]`: list Dream commits, or revert one.
    DreamRestore(Option<String>),
    /// `/dream-prompt [init]`: show or create the workspace's Dream prompt.
    DreamPrompt(Option<String>),
    /// `/evaluator-prompt [init]`: show or create the heartbeat gate's prompt.
    EvaluatorPrompt(Option<String>),
    /// `/skill`: the skills available to the agent.
    Skill,
    /// `/help`: the command list.
    Help,
    /// `/pairing [list|approve <code>|deny <code>|revoke …]`: pairing requests of the chat
    /// channels.
    Pairing(Option<String>),
}

/// Command names, without their arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    New,
    Compact,
    Stop,
    Restart,
    Status,
    Model,
    History,
    Goal,
    Trigger,
    Dream,
    DreamLog,
    DreamRestore,
    DreamPrompt,
    EvaluatorPrompt,
    Skill,
    Help,
    Pairing,
}

/// Upstream's commands with their help lines (`BUILTIN_COMMAND_SPECS`), in upstream's order;
/// whether each takes an argument.
const COMMANDS: &[(Name, &str, &str, bool)] = &[
    (
        Name::New,
        "/new",
        "Reset this chat and start a fresh conversation.",
        false,
    ),
    (
        Name::Compact,
        "/compact",
        "Compact this chat's context and continue the conversation.",
        false,
    ),
    (
        Name::Stop,
        "/stop",
        "Cancel the active agent turn for this chat.",
        false,
    ),
    (Name::Restart, "/restart", "Restart the bot process.", false),
    (
        Name::Status,
        "/status",
        "Display runtime, provider, and channel status.",
        false,
    ),
    (
        Name::Model,
        "/model [preset]",
        "Show or switch the active model preset.",
        true,
    ),
    (
        Name::History,
        "/history [n]",
        "Print the last N persisted conversation messages.",
        true,
    ),
    (
        Name::Goal,
        "/goal <goal>",
        "Tell the agent to treat the request as a long-running goal.",
        true,
    ),
    (
        Name::Trigger,
        "/trigger <name>",
        "Create a named CLI trigger bound to this chat session.",
        true,
    ),
    (
        Name::Dream,
        "/dream",
        "Manually trigger memory consolidation.",
        false,
    ),
    (
        Name::DreamLog,
        "/dream-log",
        "Show what the last Dream consolidation changed.",
        true,
    ),
    (
        Name::DreamRestore,
        "/dream-restore",
        "Revert memory to a previous Dream snapshot.",
        true,
    ),
    (
        Name::DreamPrompt,
        "/dream-prompt [init]",
        "Tell Dream how to organize this workspace's memory.",
        true,
    ),
    (
        Name::EvaluatorPrompt,
        "/evaluator-prompt [init]",
        "Customize the heartbeat notification gate prompt for this workspace.",
        true,
    ),
    (
        Name::Skill,
        "/skill",
        "List all enabled skills available to the agent.",
        false,
    ),
    (Name::Help, "/help", "List available slash commands.", false),
    (
        Name::Pairing,
        "/pairing [list|approve <code>|deny <code>|revoke <user_id>]",
        "List, approve, deny or revoke pairing requests.",
        true,
    ),
];

/// What a message is: classified once, when it is decoded ([`classify`]), then matched by
/// the receiver, the drainer, the follow-ups and the turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Not a slash command: a turn for the model.
    Text,
    /// A command answered by whichever runner receives it, outside the session's lease
    /// (upstream's priority tier: `/stop`, `/status`); drainers skip it.
    Priority(Command),
    /// A command run as a turn of its own, in the session's order.
    Command(Command),
    /// A slash command rejected without calling the model, with the reply.
    Rejected(String),
}

impl Command {
    /// Whether it runs outside the session lock (upstream's priority tier).
    fn is_priority(&self) -> bool {
        matches!(self, Self::Stop | Self::Restart | Self::Status)
    }

    fn build(name: Name, arg: Option<String>) -> Self {
        match name {
            Name::New => Self::New,
            Name::Compact => Self::Compact,
            Name::Stop => Self::Stop,
            Name::Restart => Self::Restart,
            Name::Status => Self::Status,
            Name::Model => Self::Model(arg),
            Name::History => Self::History(arg),
            Name::Goal => Self::Goal(arg),
            Name::Trigger => Self::Trigger(arg),
            Name::Dream => Self::Dream,
            Name::DreamLog => Self::DreamLog(arg),
            Name::DreamRestore => Self::DreamRestore(arg),
            Name::DreamPrompt => Self::DreamPrompt(arg),
            Name::EvaluatorPrompt => Self::EvaluatorPrompt(arg),
            Name::Skill => Self::Skill,
            Name::Help => Self::Help,
            Name::Pairing => Self::Pairing(arg),
        }
    }
}

/// Returns the bare command of a help entry (`/dream-prompt [init]` → `/dream-prompt`).
fn bare(entry: &str) -> &str {
    entry.split_whitespace().next().unwrap_or(entry)
}

/// Classifies a message's text.
pub fn classify(text: &str) -> Kind {
    match parse(text) {
        Kind::Command(cmd) if cmd.is_priority() => Kind::Priority(cmd),
        kind => kind,
    }
}

/// Parses `text` (commands not sorted by tier yet).
fn parse(text: &str) -> Kind {
    let text = text.trim();
    if !text.starts_with('/') {
        return Kind::Text;
    }
    let (head, args) = match text.split_once(char::is_whitespace) {
        Some((h, a)) => (h, a.trim()),
        None => (text, ""),
    };
    let head = match head.split_once('@') {
        Some((cmd, bot))
            if !bot.is_empty() && bot.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            cmd
        }
        _ => head,
    };
    let name = head.to_lowercase();
    if let Some((cmd, entry, _, takes_arg)) = COMMANDS.iter().find(|c| bare(c.1) == name) {
        if args.is_empty() || *takes_arg {
            let arg = (!args.is_empty()).then(|| args.to_string());
            return Kind::Command(Command::build(*cmd, arg));
        }
        let known = bare(entry);
        return Kind::Rejected(format!(
            "Command \"{known}\" does not accept arguments. Did you mean \"{known}\"?"
        ));
    }
    let best = COMMANDS
        .iter()
        .map(|c| (similarity(&name, bare(c.1)), bare(c.1)))
        .filter(|(score, _)| *score >= 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((_, close)) => Kind::Rejected(format!(
            "Unknown command \"{head}\". Did you mean \"{close}\"?"
        )),
        None => Kind::Rejected(format!(
            "Unknown command \"{head}\". Use \"/help\" to list available commands."
        )),
    }
}

/// Answers `input` when it is a command (or a rejected one); `None` for text, which the model
/// answers. Priority commands come here too when a drained turn carries one.
pub async fn answer(
    deps: &Deps,
    bot: &Bot,
    sessions: &SessionWriter,
    input: &TurnInput,
) -> anyhow::Result<Option<String>> {
    Ok(Some(match &input.kind {
        Kind::Text => return Ok(None),
        Kind::Rejected(reply) => reply.clone(),
        Kind::Priority(cmd) => priority_command(deps, bot, cmd, &input.session_key).await?,
        Kind::Command(Command::New) => new_session(deps, bot, sessions, input).await?,
        Kind::Command(Command::Compact) => later::compact(deps, bot, input).await?,
        Kind::Command(Command::Dream) => later::dream(deps, bot, input).await?,
        Kind::Command(Command::Goal(task)) => {
            match goal::goal(task.as_deref(), input.in_cron) {
                Some(reply) => reply,
                // The model answers the goal, reading the command's own text.
                None => return Ok(None),
            }
        }
        Kind::Command(Command::Trigger(name)) => goal::trigger(name.as_deref()),
        Kind::Command(Command::EvaluatorPrompt(arg)) => {
            prompts::evaluator_prompt_command(&bot.spec.workspace, arg.as_deref())?
        }
        Kind::Command(Command::History(arg)) => {
            let session = sessions.load(&input.session_key).await?;
            history_text(&session, arg.as_deref())
        }
        Kind::Command(Command::Skill) => skill_text(&bot.context.skills()),
        Kind::Command(Command::Model(arg)) => {
            model_command(bot, sessions, &input.session_key, arg.as_deref()).await?
        }
        Kind::Command(Command::Pairing(arg)) => {
            let store = PairingStore::new(deps.redis.clone(), &bot.spec.id);
            pairing_command(&store, &input.channel, arg.as_deref().unwrap_or_default()).await?
        }
        Kind::Command(cmd) => match memory_jobs::dream_job(cmd) {
            Some((kind, arg)) => {
                memory_jobs::dream_command(deps, bot, &input.id, &input.session_key, kind, arg)
                    .await?
            }
            None => help_text(),
        },
    }))
}

/// Answers a priority command (`/stop`, `/status`) outside the session lock.
pub async fn priority_command(
    deps: &Deps,
    bot: &Bot,
    cmd: &Command,
    session_key: &str,
) -> anyhow::Result<String> {
    Ok(match cmd {
        Command::Stop => {
            let n = stop::stop_everywhere(&deps.nats, &bot.spec.id, session_key).await?;
            if n > 0 {
                format!("Stopped {n} task(s).")
            } else {
                "No active task to stop.".into()
            }
        }
        Command::Status => status::status(deps, bot, session_key).await?,
        Command::Restart => {
            crate::restart::request();
            "Restarting...".into()
        }
        _ => help_text(),
    })
}

/// Upstream's `/history` defaults: 10 messages, at most 50, each cut at 200 characters.
const HISTORY_DEFAULT: usize = 10;
const HISTORY_MAX: usize = 50;
const HISTORY_MAX_CHARS: usize = 200;

/// Upstream's `/history [n]` text: the last `n` user and assistant messages of what the
/// session replays (no count cap).
pub fn history_text(session: &nanobot_core::session::Session, arg: Option<&str>) -> String {
    let count = match arg.map(py_strip).filter(|a| !a.is_empty()) {
        None => HISTORY_DEFAULT,
        // Python's `int`: digits of any script, `_` between digits.
        Some(a) => match py_int(a) {
            Some(n) => n.clamp(1, HISTORY_MAX as i64) as usize,
            None => {
                return "Usage: /history [count] — e.g. /history 5 (default: 10, max: 50)".into();
            }
        },
    };
    let visible: Vec<String> = session
        .replay(usize::MAX)
        .iter()
        .filter_map(history_line)
        .collect();
    let recent = &visible[visible.len().saturating_sub(count)..];
    if recent.is_empty() {
        return "No conversation history yet.".into();
    }
    format!("Last {} message(s):\n{}", recent.len(), recent.join("\n"))
}

fn history_line(row: &serde_json::Value) -> Option<String> {
    let label = match row.get("role")?.as_str()? {
        "user" => "👤 You",
        "assistant" => "🤖 Bot",
        _ => return None,
    };
    let content = match row.get("content") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(parts)) => parts
            .iter()
            .filter(|p| p.get("type").and_then(|t| t.as_str()) == Some("text"))
            .filter_map(|p| p.get("text").and_then(|t| t.as_str()))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    };
    let content = py_strip(&content);
    if content.is_empty() {
        return None;
    }
    let shown = match content.char_indices().nth(HISTORY_MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &content[..cut]),
        None => content.to_string(),
    };
    Some(format!("{label}: {shown}"))
}

/// Upstream's `/skill` text: every skill (available or not), name and description.
pub fn skill_text(skills: &[nanobot_core::skills::Skill]) -> String {
    if skills.is_empty() {
        return "No skills available.".into();
    }
    let mut lines = vec![
        format!("Available skills ({}):", skills.len()),
        String::new(),
    ];
    for s in skills {
        let desc = if s.description.is_empty() {
            &s.name
        } else {
            &s.description
        };
        lines.push(format!("- **{}** — {desc}", s.name));
    }
    lines.join("\n")
}

/// Upstream's `/pairing` subcommands (`pairing/store.py::handle_pairing_command`) on the
/// bot's pairing store; `channel` is the chat's channel (`revoke <user_id>`).
pub async fn pairing_command(
    store: &PairingStore,
    channel: &str,
    args: &str,
) -> redis::RedisResult<String> {
    let parts: Vec<&str> = args.split_whitespace().collect();
    let arg = parts.get(1).copied();
    Ok(match parts.first().copied().unwrap_or("list") {
        "list" => {
            let pending = store.pending().await?;
            if pending.is_empty() {
                return Ok("No pending pairing requests.".into());
            }
            let now = chrono_now();
            let mut lines = vec!["Pending pairing requests:".to_string()];
            for p in pending {
                let left = p.created_at + nanobot_core::pairing::CODE_TTL.as_secs() as i64 - now;
                let expiry = if left > 0 {
                    format!("{left}s")
                } else {
                    "expired".into()
                };
                lines.push(format!(
                    "- `{}` | {} | {} | {expiry}",
                    p.code, p.channel, p.sender_id
                ));
            }
            lines.join("\n")
        }
        "approve" => match arg {
            None => "Usage: `/pairing approve <code>`".into(),
            Some(code) => match store.approve(code).await? {
                Some(p) => format!(
                    "Approved pairing code `{code}` — {} can now access {}",
                    p.sender_id, p.channel
                ),
                None => format!("Invalid or expired pairing code: `{code}`"),
            },
        },
        "deny" => match arg {
            None => "Usage: `/pairing deny <code>`".into(),
            Some(code) if store.deny(code).await? => format!("Denied pairing code `{code}`"),
            Some(code) => format!("Pairing code `{code}` not found or already expired"),
        },
        "revoke" => match parts[..] {
            [_, user] => {
                if store.revoke(channel, user).await? {
                    format!("Revoked {user} from {channel}")
                } else {
                    format!("{user} was not in the approved list for {channel}")
                }
            }
            [_, ch, user] => {
                if store.revoke(ch, user).await? {
                    format!("Revoked {user} from {ch}")
                } else {
                    format!("{user} was not in the approved list for {ch}")
                }
            }
            _ => "Usage: `/pairing revoke <user_id>` or `/pairing revoke <channel> <user_id>`"
                .into(),
        },
        _ => "Unknown pairing command.\nUsage: `/pairing [list|approve <code>|deny <code>|revoke <user_id>|revoke <channel> <user_id>]`".into(),
    })
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Upstream's `/model [preset]`: without a name, the session's model, preset and the presets;
/// with one, the session's preset switched (stored in its metadata, so every runner replica's
/// next turn of the session uses it) or upstream's error with the presets.
async fn model_command(
    bot: &Bot,
    sessions: &SessionWriter,
    session_key: &str,
    arg: Option<&str>,
) -> anyhow::Result<String> {
    let session = sessions.load(session_key).await?;
    let models = &bot.models;
    let names = models
        .names()
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let Some(name) = arg.map(str::trim).filter(|a| !a.is_empty()) else {
        return Ok(match models.selected(&session.metadata) {
            Ok(runtime) => format!(
                "## Model\n- Current model: `{}`\n- Current preset: `{}`\n- Available presets: {names}",
                runtime.target.model, runtime.preset
            ),
            Err(e) => format!(
                "## Model\n- Current selection error: {e}\n- Available presets: {names}\n- Switch with `/model <preset>`."
            ),
        });
    };
    let runtime = match models.named(name) {
        Ok(runtime) => runtime,
        Err(e) => {
            return Ok(format!(
                "Could not switch model preset: {e}\n\nAvailable presets: {names}"
            ));
        }
    };
    let mut metadata = session.metadata;
    metadata.insert(meta::MODEL_PRESET.into(), runtime.preset.clone().into());
    sessions.set_metadata(session_key, &metadata).await?;
    Ok(format!(
        "Switched model preset to `{}`.\n- Scope: current session\n- Model: `{}`\n- Context window: {}\n- Max output tokens: {}",
        runtime.preset, runtime.target.model, runtime.context_window_tokens, runtime.max_tokens
    ))
}

/// `/new`: archives the unconsolidated tail through the memory workers and clears the session.
async fn new_session(
    deps: &Deps,
    bot: &Bot,
    sessions: &SessionWriter,
    input: &TurnInput,
) -> anyhow::Result<String> {
    let session = sessions.load(&input.session_key).await?;
    memory_jobs::archive_on_new(deps, bot, &input.id, &session).await?;
    sessions.clear(&input.session_key).await?;
    Ok("New session started.".into())
}

/// Upstream's `/help` text for the supported commands.
pub fn help_text() -> String {
    let mut out = String::from("🐈 nanobot commands:");
    for (_, name, help, _) in COMMANDS {
        out.push_str(&format!("\n{name} — {help}"));
    }
    out
}

/// difflib's `SequenceMatcher.ratio()`: 2·M / (|a| + |b|), M from recursive longest matches.
pub fn similarity(a: &str, b: &str) -> f64 {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    2.0 * matches(&a, &b) as f64 / (a.len() + b.len()) as f64
}

fn matches(a: &[char], b: &[char]) -> usize {
    let (mut best, mut at_a, mut at_b) = (0, 0, 0);
    for i in 0..a.len() {
        for j in 0..b.len() {
            let mut k = 0;
            while i + k < a.len() && j + k < b.len() && a[i + k] == b[j + k] {
                k += 1;
            }
            if k > best {
                (best, at_a, at_b) = (k, i, j);
            }
        }
    }
    if best == 0 {
        return 0;
    }
    best + matches(&a[..at_a], &b[..at_b]) + matches(&a[at_a + best..], &b[at_b + best..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_normalised_and_unknown_ones_rejected_with_upstream_strings() {
        assert_eq!(classify("hello"), Kind::Text);
        assert_eq!(classify(" /NEW "), Kind::Command(Command::New));
        assert_eq!(classify("/stop@my_bot"), Kind::Priority(Command::Stop));
        assert_eq!(classify("/Status"), Kind::Priority(Command::Status));
        assert_eq!(classify("/dream"), Kind::Command(Command::Dream));
        assert_eq!(
            classify("/dream-log abc123"),
            Kind::Command(Command::DreamLog(Some("abc123".into())))
        );
        assert_eq!(
            classify("/Dream-Restore"),
            Kind::Command(Command::DreamRestore(None))
        );
        assert_eq!(
            classify("/dream-prompt init"),
            Kind::Command(Command::DreamPrompt(Some("init".into())))
        );
        assert_eq!(
            classify("/dream now"),
            Kind::Rejected(
                "Command \"/dream\" does not accept arguments. Did you mean \"/dream\"?".into()
            )
        );
        assert_eq!(
            classify("/new now"),
            Kind::Rejected(
                "Command \"/new\" does not accept arguments. Did you mean \"/new\"?".into()
            )
        );
        assert_eq!(
            classify("/hepl"),
            Kind::Rejected("Unknown command \"/hepl\". Did you mean \"/help\"?".into())
        );
        assert_eq!(
            classify("/foo"),
            Kind::Rejected(
                "Unknown command \"/foo\". Use \"/help\" to list available commands.".into()
            )
        );
    }

    #[test]
    fn the_added_commands_parse_with_their_arguments_and_tiers() {
        assert_eq!(classify("/restart"), Kind::Priority(Command::Restart));
        assert_eq!(classify("/compact@my_bot"), Kind::Command(Command::Compact));
        assert_eq!(classify("/history"), Kind::Command(Command::History(None)));
        assert_eq!(
            classify("/HISTORY 3"),
            Kind::Command(Command::History(Some("3".into())))
        );
        assert_eq!(classify("/skill"), Kind::Command(Command::Skill));
        assert_eq!(
            classify("/pairing approve ABCD1234"),
            Kind::Command(Command::Pairing(Some("approve ABCD1234".into())))
        );
        assert_eq!(
            classify("/skills"),
            Kind::Rejected("Unknown command \"/skills\". Did you mean \"/skill\"?".into())
        );
        assert_eq!(
            classify("/restart now"),
            Kind::Rejected(
                "Command \"/restart\" does not accept arguments. Did you mean \"/restart\"?".into()
            )
        );
    }

    fn session(rows: &[(&str, serde_json::Value)]) -> nanobot_core::session::Session {
        nanobot_core::session::Session {
            key: "cli:direct".into(),
            messages: rows
                .iter()
                .map(|(role, content)| serde_json::json!({"role": role, "content": content}))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn history_shows_the_last_user_and_assistant_messages_as_upstream() {
        assert_eq!(
            history_text(&session(&[]), None),
            "No conversation history yet."
        );
        let long = "x".repeat(250);
        let s = session(&[
            ("user", "first".into()),
            ("assistant", serde_json::Value::Null),
            (
                "user",
                serde_json::json!([{"type": "text", "text": "look"}, {"type": "image_url"}]),
            ),
            ("assistant", long.clone().into()),
            ("tool", "result".into()),
            ("assistant", "done".into()),
        ]);
        assert_eq!(
            history_text(&s, Some("2")),
            format!(
                "Last 2 message(s):\n🤖 Bot: {}…\n🤖 Bot: done",
                &long[..200]
            )
        );
        assert_eq!(
            history_text(&s, None),
            format!(
                "Last 4 message(s):\n👤 You: first\n👤 You: look\n🤖 Bot: {}…\n🤖 Bot: done",
                &long[..200]
            )
        );
        assert_eq!(history_text(&s, Some("0")).lines().count(), 2, "at least 1");
        assert_eq!(
            history_text(&s, Some("ten")),
            "Usage: /history [count] — e.g. /history 5 (default: 10, max: 50)"
        );
    }

    #[test]
    fn skill_lists_every_skill_with_its_description() {
        assert_eq!(skill_text(&[]), "No skills available.");
        let skill = |name: &str, description: &str| nanobot_core::skills::Skill {
            name: name.into(),
            description: description.into(),
            path: Default::default(),
            always: false,
            missing: vec!["CLI: gh".into()],
            body: String::new(),
            source: "builtin",
        };
        assert_eq!(
            skill_text(&[skill("github", "Use gh."), skill("bare", "")]),
            "Available skills (2):\n\n- **github** — Use gh.\n- **bare** — bare"
        );
    }

    #[tokio::test]
    async fn pairing_commands_answer_with_upstream_texts_and_change_the_store() {
        let redis = nanobot_runtime::testsuite::Redis::start().await.unwrap();
        let store = PairingStore::new(redis.conn().await.unwrap(), "b");
        let run = |args: &'static str| {
            let store = store.clone();
            async move { pairing_command(&store, "telegram", args).await.unwrap() }
        };
        assert_eq!(run("").await, "No pending pairing requests.");
        let code = store.code_for("telegram", "42|alice").await.unwrap();
        let listed = run("list").await;
        assert!(
            listed.starts_with(&format!(
                "Pending pairing requests:\n- `{code}` | telegram | 42|alice | "
            )) && listed.ends_with('s'),
            "{listed}"
        );
        assert_eq!(
            pairing_command(&store, "telegram", &format!("approve {code}"))
                .await
                .unwrap(),
            format!("Approved pairing code `{code}` — 42|alice can now access telegram")
        );
        assert!(store.is_approved("telegram", "42|alice").await.unwrap());
        assert_eq!(
            run("approve NOPE").await,
            "Invalid or expired pairing code: `NOPE`"
        );
        let other = store.code_for("telegram", "7|bob").await.unwrap();
        assert_eq!(
            pairing_command(&store, "telegram", &format!("deny {other}"))
                .await
                .unwrap(),
            format!("Denied pairing code `{other}`")
        );
        assert_eq!(run("list").await, "No pending pairing requests.");
        assert_eq!(
            run("deny NOPE").await,
            "Pairing code `NOPE` not found or already expired"
        );
        assert_eq!(
            run("revoke 42|alice").await,
            "Revoked 42|alice from telegram"
        );
        assert!(!store.is_approved("telegram", "42|alice").await.unwrap());
        assert_eq!(
            run("revoke telegram 42|alice").await,
            "42|alice was not in the approved list for telegram"
        );
        assert_eq!(run("approve").await, "Usage: `/pairing approve <code>`");
        assert_eq!(
            run("frobnicate").await,
            "Unknown pairing command.\nUsage: `/pairing [list|approve <code>|deny <code>|revoke <user_id>|revoke <channel> <user_id>]`"
        );
    }

    #[test]
    fn similarity_matches_difflib() {
        assert!((similarity("/hepl", "/help") - 0.8).abs() < 1e-9);
        assert!((similarity("abcd", "bcde") - 0.75).abs() < 1e-9);
        assert_eq!(similarity("/foo", "/new"), 0.25);
    }

    #[test]
    fn help_lists_exactly_upstreams_commands() {
        // `/help` of nanobot 0.3.5 (`build_help_text`).
        assert_eq!(
            help_text(),
            "🐈 nanobot commands:\n/new — Reset this chat and start a fresh conversation.\n/compact — Compact this chat's context and continue the conversation.\n/stop — Cancel the active agent turn for this chat.\n/restart — Restart the bot process.\n/status — Display runtime, provider, and channel status.\n/model [preset] — Show or switch the active model preset.\n/history [n] — Print the last N persisted conversation messages.\n/goal <goal> — Tell the agent to treat the request as a long-running goal.\n/trigger <name> — Create a named CLI trigger bound to this chat session.\n/dream — Manually trigger memory consolidation.\n/dream-log — Show what the last Dream consolidation changed.\n/dream-restore — Revert memory to a previous Dream snapshot.\n/dream-prompt [init] — Tell Dream how to organize this workspace's memory.\n/evaluator-prompt [init] — Customize the heartbeat notification gate prompt for this workspace.\n/skill — List all enabled skills available to the agent.\n/help — List available slash commands.\n/pairing [list|approve <code>|deny <code>|revoke <user_id>] — List, approve, deny or revoke pairing requests."
        );
    }

    #[test]
    fn goal_trigger_and_evaluator_prompt_parse_with_their_arguments_round_tripped() {
        for arg in [
            "写一本书 📚",
            "👩\u{200d}👩\u{200d}👧\u{200d}👦 🇨🇳",
            "cafe\u{301}",
            "اكتب كتابا",
            "כתוב ספר",
        ] {
            assert_eq!(
                classify(&format!("/goal {arg}")),
                Kind::Command(Command::Goal(Some(arg.into())))
            );
            assert_eq!(
                classify(&format!("/TRIGGER@my_bot {arg}")),
                Kind::Command(Command::Trigger(Some(arg.into())))
            );
        }
        assert_eq!(classify("/goal"), Kind::Command(Command::Goal(None)));
        assert_eq!(
            classify("/evaluator-prompt init"),
            Kind::Command(Command::EvaluatorPrompt(Some("init".into())))
        );
        assert_eq!(
            classify("/goals"),
            Kind::Rejected("Unknown command \"/goals\". Did you mean \"/goal\"?".into())
        );
    }
}
