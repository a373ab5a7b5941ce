//! The context builder, as 0.3.5's: the system prompt (identity, bootstrap files, tool
//! contract, memory, skills, joined by `\n\n---\n\n`) and the message list. A plain turn
//! sends the user's bare text; only a message invoking skills with `$name` gets a runtime block
//! (the skills' instructions) after it. Neither names the time, the channel or the chat.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::{attachment, skills};

mod cache;
mod identity;

pub use cache::MAX_AGE as PROMPT_CACHE_MAX_AGE;
use cache::{PromptCache, Stamp};
pub use identity::{UNTRUSTED_CONTENT, format_hint};

/// Files read into the system prompt, in order (0.3.5's `BOOTSTRAP_FILES`).
pub const BOOTSTRAP_FILES: &[&str] = &["AGENTS.md", "SOUL.md", "USER.md"];
/// Separator between system prompt parts.
pub const SEPARATOR: &str = "\n\n---\n\n";
/// 0.3.5's `agent/tool_contract.md`, the part after the bootstrap files.
pub const TOOL_CONTRACT: &str = include_str!("../../../../templates/agent/tool_contract.md");
/// The workspace templates (0.3.5's) that stay out of the prompt while a file still equals
/// its template (up to surrounding whitespace), as 0.3.5 leaves out its own.
const UNCHANGED_TEMPLATES: &[(&str, &str)] = &[
    ("AGENTS.md", include_str!("../../../../templates/AGENTS.md")),
    ("USER.md", include_str!("../../../../templates/USER.md")),
    (
        "memory/MEMORY.md",
        include_str!("../../../../templates/memory/MEMORY.md"),
    ),
];
/// 0.3.5's `SOUL.md` template; a workspace still holding its older one (`legacy/SOUL.md`)
/// gets this one in the prompt, as 0.3.5 does.
const SOUL_TEMPLATE: &str = include_str!("../../../../templates/SOUL.md");
const LEGACY_SOUL_TEMPLATE: &str = include_str!("../../../../templates/legacy/SOUL.md");

/// Builds prompts for one bot workspace.
#[derive(Debug, Clone)]
pub struct ContextBuilder {
    /// The bot workspace.
    pub workspace: PathBuf,
    /// Directory of builtin skills (`skills/` of the fleet), if any.
    pub builtin_skills: Option<PathBuf>,
    /// Agent time zone name, shown in the runtime context.
    pub timezone: String,
    /// Skills left out (`agents.defaults.disabledSkills`).
    pub disabled_skills: Vec<String>,
    /// The workspace part of the system prompt, rebuilt when its files change.
    prompt: PromptCache,
}

fn read_nonempty(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .filter(|t| !t.trim().is_empty())
}

/// Whether `text` is the onboard template of `relative` (up to surrounding whitespace).
fn is_template(relative: &str, text: &str) -> bool {
    UNCHANGED_TEMPLATES
        .iter()
        .any(|(name, template)| *name == relative && template.trim() == text.trim())
}

/// Returns the bootstrap file `relative` of `workspace` unless it is blank or still its template
/// (an untouched legacy `SOUL.md` reads as the current template).
fn read_customised(workspace: &Path, relative: &str) -> Option<String> {
    read_nonempty(&workspace.join(relative))
        .map(|text| {
            if relative == "SOUL.md" && text.trim() == LEGACY_SOUL_TEMPLATE.trim() {
                SOUL_TEMPLATE.to_string()
            } else {
                text
            }
        })
        .filter(|text| !is_template(relative, text))
}

impl ContextBuilder {
    /// Returns the prompt builder of the bot workspace `workspace`.
    pub fn new(
        workspace: PathBuf,
        builtin_skills: Option<PathBuf>,
        timezone: String,
        disabled_skills: Vec<String>,
    ) -> Self {
        Self {
            workspace,
            builtin_skills,
            timezone,
            disabled_skills,
            prompt: PromptCache::default(),
        }
    }

    /// Returns the bot's enabled skills (workspace over builtin, minus the disabled ones).
    pub fn skills(&self) -> Vec<skills::Skill> {
        skills::discover(
            &self.workspace,
            self.builtin_skills.as_deref(),
            &self.disabled_skills,
        )
    }

    /// Returns the system prompt for `channel`: the identity, then the workspace part
    /// (cached until one of its files changes, see [`PROMPT_CACHE_MAX_AGE`]).
    pub fn system_prompt(&self, channel: &str) -> String {
        let body = self
            .prompt
            .get(self.workspace_stamps(), || self.workspace_part());
        let identity = identity::identity(channel);
        if body.is_empty() {
            return identity;
        }
        format!("{identity}{SEPARATOR}{body}")
    }

    /// Stamps of every file [`Self::workspace_part`] reads.
    fn workspace_stamps(&self) -> Vec<Stamp> {
        let mut stamps: Vec<Stamp> = BOOTSTRAP_FILES
            .iter()
            .map(|f| self.workspace.join(f))
            .chain(std::iter::once(self.workspace.join("memory/MEMORY.md")))
            .map(|p| Stamp::of(&p))
            .collect();
        cache::skills_stamps(&self.workspace.join("skills"), &mut stamps);
        if let Some(dir) = &self.builtin_skills {
            cache::skills_stamps(dir, &mut stamps);
        }
        stamps
    }

    /// The system prompt after the identity: bootstrap files (as written: 0.3.5 does not trim
    /// them), the tool contract, memory, always-on skills and the skills summary.
    fn workspace_part(&self) -> String {
        let mut parts = Vec::new();
        let bootstrap: Vec<String> = BOOTSTRAP_FILES
            .iter()
            .filter_map(|f| read_customised(&self.workspace, f).map(|t| format!("## {f}\n\n{t}")))
            .collect();
        if !bootstrap.is_empty() {
            parts.push(bootstrap.join("\n\n"));
        }
        parts.push(TOOL_CONTRACT.trim_end_matches('\n').to_string());
        let memory = std::fs::read_to_string(self.workspace.join("memory/MEMORY.md"))
            .ok()
            .filter(|m| !m.is_empty() && !is_template("memory/MEMORY.md", m));
        if let Some(memory) = memory {
            parts.push(format!("# Memory\n\n## Long-term Memory\n{memory}"));
        }
        let skills = self.skills();
        parts.extend(skills::active_section(&skills));
        parts.extend(skills::summary_section(&skills));
        parts.join(SEPARATOR)
    }

    /// Returns the current time as the prompts show it, in the agent's zone.
    pub fn current_time(&self) -> String {
        format_time(chrono::Utc::now(), &self.timezone)
    }

    /// Returns a subagent's system prompt: its role, the time, the workspace and the skills
    /// summary.
    pub fn subagent_prompt(&self) -> String {
        let ws = self.workspace.display().to_string();
        let mut parts = vec![crate::subagent::system_prompt(&self.current_time(), &ws)];
        let skills = self.skills();
        parts.extend(skills::summary(&skills).map(|body| {
            format!(
                "## Skills\n\nEach group lists one root and relative SKILL.md paths. Join \
                     them when using `read_file`.\n\n{body}"
            )
        }));
        parts.join(SEPARATOR)
    }

    /// Returns `[system, *history]` for a turn resumed after a crash: its user message is
    /// already the history's last user row.
    pub fn resumed_messages(&self, history: Vec<Value>, channel: &str) -> Vec<Value> {
        let mut messages = vec![json!({"role": "system", "content": self.system_prompt(channel)})];
        messages.extend(history);
        messages
    }

    /// Returns `[system, *history, current user]`, merging into a trailing user message so no
    /// two user messages are consecutive. The user message is the bare text (images as base64
    /// data-URL blocks before it) and, when it invokes skills with `$name`, their
    /// [`skills::explicit_block`] after it, as 0.3.5's `append_runtime_context` adds it: to the
    /// model only, never to the stored row.
    pub fn messages(
        &self,
        history: Vec<Value>,
        current: &str,
        media: &[String],
        channel: &str,
    ) -> Vec<Value> {
        self.messages_with(history, current, media, channel, None)
    }

    /// [`Self::messages`] with a runtime-context `block` (the goal's, see
    /// [`crate::goal::runtime_block`]) appended to the user message before any skill block,
    /// in 0.3.5's order (tool providers, then explicit skills).
    pub fn messages_with(
        &self,
        history: Vec<Value>,
        current: &str,
        media: &[String],
        channel: &str,
        block: Option<String>,
    ) -> Vec<Value> {
        let content = user_content(&self.workspace, current, media);
        let content = match block {
            Some(block) => append_runtime_block(content, block),
            None => content,
        };
        let content = match skills::explicit_block(&self.skills(), current) {
            Some(block) => append_runtime_block(content, block),
            None => content,
        };
        let mut messages = vec![json!({"role": "system", "content": self.system_prompt(channel)})];
        messages.extend(history);
        let last_is_user = messages
            .last()
            .is_some_and(|m| m["role"] == "user" && messages.len() > 1);
        if last_is_user {
            let last = messages.last_mut().expect("checked non-empty");
            last["content"] = crate::history::merge_content(last["content"].take(), content, true);
        } else {
            messages.push(json!({"role": "user", "content": content}));
        }
        messages
    }
}

/// Returns `now` as upstream's `current_time_str` shows it, in the IANA zone `timezone`:
/// `2026-04-01 10:30 (Wednesday) (UTC, UTC+00:00)`. An empty name means the host's zone
/// (labelled with its IANA name when the host has one); the config loader refuses unknown names.
pub fn format_time(now: chrono::DateTime<chrono::Utc>, timezone: &str) -> String {
    let host;
    let name = if timezone.trim().is_empty() {
        host = iana_time_zone::get_timezone().unwrap_or_default();
        host.as_str()
    } else {
        timezone.trim()
    };
    match name.parse::<chrono_tz::Tz>() {
        Ok(tz) => stamp(now.with_timezone(&tz), name),
        Err(_) => stamp(now.with_timezone(&chrono::Local), "local"),
    }
}

fn stamp<Tz: chrono::TimeZone>(at: chrono::DateTime<Tz>, name: &str) -> String
where
    Tz::Offset: std::fmt::Display,
{
    format!(
        "{} ({name}, UTC{})",
        at.format("%Y-%m-%d %H:%M (%A)"),
        at.format("%:z")
    )
}

/// Appends a runtime block to user content: after the text (`\n\n` between, the block alone
/// when the text is empty), or as a last text block after images.
fn append_runtime_block(content: Value, block: String) -> Value {
    match content {
        Value::String(text) if text.is_empty() => Value::String(block),
        Value::String(text) => Value::String(format!("{text}\n\n{block}")),
        Value::Array(mut blocks) => {
            blocks.push(json!({"type": "text", "text": block}));
            Value::Array(blocks)
        }
        other => other,
    }
}

/// Appends a session's `[Archived Context Summary]` section (see
/// [`crate::memory::summary_section`]) as the last part of the system message of `messages`.
pub fn inject_summary(messages: &mut [Value], section: &str) {
    let Some(system) = messages.first_mut().filter(|m| m["role"] == "system") else {
        return;
    };
    let prompt = system["content"].as_str().unwrap_or("");
    system["content"] = Value::String(format!("{prompt}{SEPARATOR}{section}"));
}

/// Returns the user content: images (read through [`attachment::read_image`]) as data-URL
/// blocks before the text; each refused attachment adds a line saying so to the text.
fn user_content(workspace: &Path, text: &str, media: &[String]) -> Value {
    use base64::Engine as _;
    let mut blocks = Vec::new();
    let mut text = text.to_string();
    for path in media {
        match attachment::read_image(workspace, path) {
            Ok(Some(image)) => {
                let data = base64::engine::general_purpose::STANDARD.encode(&image.bytes);
                let url = format!("data:{};base64,{data}", image.mime);
                blocks.push(json!({"type": "image_url", "image_url": {"url": url}, "_meta": {"path": path}}));
            }
            Ok(None) => {}
            Err(refused) => {
                tracing::warn!(path = %path, reason = %refused, "attachment refused");
                text.push_str(&format!("\n[attachment not read: {path} ({refused})]"));
            }
        }
    }
    if blocks.is_empty() {
        return Value::String(text);
    }
    blocks.push(json!({"type": "text", "text": text}));
    Value::Array(blocks)
}

#[cfg(test)]
mod tests;
