//! Slash commands' answers (upstream `command/builtin.py`): the dispatch that answers a command
//! turn ([`Turn::answer_command`]), the priority commands answered outside the session's lease
//! ([`priority_command`]), and the `/history`, `/skill`, `/model`, `/pairing` and `/new`
//! answers. Parsing lives on the ground floor ([`crate::base::command`]).
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

use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::base::error::Result;
use crate::base::input::TurnInput;
use crate::base::stop;
use crate::turn::memory_jobs;
use crate::turn::parts::Turn;

pub use crate::base::command::{Command, Kind, classify, help_text, similarity};

pub use goal::{goal, trigger};

pub use later::{COMPACT_DONE, COMPACT_FAILED, COMPACT_STARTED, DREAMING};
use nanobot_runtime::pyfmt::{py_int, py_strip};
pub use prompts::evaluator_override;
pub use status::{SearchUsage, StatusInfo, status_text};

impl Turn<'_> {
    /// Answers the turn's input when it is a command (or a rejected one); `None` for text,
    /// which the model answers. Priority commands come here too when a drained turn carries
    /// one. Answers that write the session return its errors as they are (a fenced write is an
    /// interruption); the others' are failures.
    pub async fn answer_command(&self) -> Result<Option<String>> {
        let Turn {
            deps,
            bot,
            sessions,
            input,
            ..
        } = *self;
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
                prompts::evaluator_prompt_command(&bot.spec.workspace, arg.as_deref())
                    .map_err(anyhow::Error::from)?
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
            crate::base::restart::request();
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
) -> Result<String> {
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
) -> Result<String> {
    let session = sessions.load(&input.session_key).await?;
    memory_jobs::archive_on_new(deps, bot, &input.id, &session).await?;
    sessions.clear(&input.session_key).await?;
    Ok("New session started.".into())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
