//! Dream: turns the history entries after `.dream_cursor` into edits of `SOUL.md`, `USER.md`,
//! `memory/MEMORY.md` and skills, and commits them to the workspace's git history. Two phases
//! (the seeds' design): an analysis call without tools, then a run of the shared runner with
//! the bot's file tools restricted to those files ([`DreamTools`]). The cursor moves only when
//! the run completed; the commit is written by libgit2 (objects, then the ref through a lock
//! file), so a worker killed mid-Dream leaves files either old or new (the executors replace
//! them atomically) and `HEAD` at the previous commit (a stale lock file is removed by the
//! next run, see `git`), and the job is redelivered. After the commit and the cursor,
//! `history.jsonl` is compacted to its newest [`MAX_HISTORY_ENTRIES`] entries, never dropping
//! one Dream has not read (upstream). Every write (tool writes, commit, cursor, compaction)
//! first checks the memory lease ([`Writer`]): a worker that lost it stops there.
//!
//! The Dream commands (`/dream-log [sha]`, `/dream-restore [sha]`, `/dream-prompt [init]`)
//! and the run's report texts are upstream's, in `commands`.

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

use nanobot_core::hooks::NoopHook;
use nanobot_core::memory::{Entry, MAX_HISTORY_ENTRIES};
use nanobot_core::runner::{self, RunDeps, RunSpec, StopReason};
use nanobot_core::tools::{Offered, ToolExecutor, ToolOutcome, ToolScope};

use crate::bots::MemoryBot;
use crate::consolidate::Ctx;
use crate::git::{self, MemoryRepo};
use crate::writer::{LeaseLost, Writer};

mod commands;

pub use commands::{log, prompt, restore};

/// Entries one run digests, as upstream.
pub const BATCH: usize = 20;
/// Tool iterations of the editing phase (the seeds').
const MAX_ITERATIONS: u32 = 10;
/// Characters of each memory file shown to the model, as upstream.
const FILE_CHARS: usize = 8000;
/// Characters of each history entry shown to the model, as upstream.
const ENTRY_CHARS: usize = 1000;
/// Characters of a workspace's `prompts/dream.md` used.
const OVERRIDE_CHARS: usize = 16_000;

const PHASE1: &str = include_str!("../../../templates/agent/dream_phase1.md");
const PHASE2: &str = include_str!("../../../templates/agent/dream_phase2.md");

/// The files Dream may write besides `skills/**`.
const WRITABLE: [&str; 3] = ["SOUL.md", "USER.md", "memory/MEMORY.md"];
/// Tools Dream may call: reads anywhere in the workspace, writes only where [`writable`] says.
const READ_TOOLS: [&str; 2] = ["read_file", "list_dir"];
const WRITE_TOOLS: [&str; 2] = ["write_file", "edit_file"];

/// Dream failures (the job is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Git failed.
    #[error(transparent)]
    Git(#[from] git::Error),
    /// A memory file could not be read or written.
    #[error("memory file i/o failed: {0}")]
    Io(#[from] std::io::Error),
    /// The memory lease was lost: nothing more is written.
    #[error(transparent)]
    LeaseLost(#[from] LeaseLost),
    /// The run did not complete (the cursor stays; the next run retries the batch).
    #[error("dream run stopped early: {0}")]
    Incomplete(String),
}

/// Returns `path` with its symlinks resolved (`canonicalize` of its deepest existing ancestor,
/// then the rest); `None` when a part of it is a dangling symlink.
fn resolved(path: &Path) -> Option<PathBuf> {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return Some(rest.iter().rev().fold(real, |p, name| p.join(name)));
        }
        if existing.symlink_metadata().is_ok() {
            return None;
        }
        rest.push(existing.file_name()?);
        existing = existing.parent()?;
    }
}

/// Returns whether Dream may write `path` (relative to the workspace or absolute inside it):
/// `SOUL.md`, `USER.md`, `memory/MEMORY.md`, or a file under `skills/` that is still under
/// `skills/` once symlinks are resolved (as upstream's `allowed_dir` check).
pub fn writable(workspace: &Path, path: &str) -> bool {
    let path = Path::new(path);
    let rel = path.strip_prefix(workspace).unwrap_or(path);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return false;
    }
    let rel: PathBuf = rel
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    if WRITABLE.iter().any(|w| rel == Path::new(w)) {
        return true;
    }
    if !(rel.starts_with("skills") && rel.components().count() > 1) {
        return false;
    }
    match (
        resolved(&workspace.join(&rel)),
        resolved(&workspace.join("skills")),
    ) {
        (Some(target), Some(skills)) => target.starts_with(&skills) && target != skills,
        _ => false,
    }
}

/// The bot's file tools, restricted for Dream.
struct DreamTools<'a> {
    inner: &'a dyn ToolExecutor,
    workspace: &'a Path,
    writer: Writer<'a>,
}

#[async_trait::async_trait]
impl ToolExecutor for DreamTools<'_> {
    async fn execute(
        &self,
        scope: &ToolScope,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> ToolOutcome {
        let refused = |why: String| ToolOutcome {
            content: Value::String(format!("Error: {why}")),
            is_error: true,
        };
        if WRITE_TOOLS.contains(&name) {
            let path = serde_json::from_str::<Value>(arguments)
                .ok()
                .and_then(|a| a.get("path").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_default();
            if !writable(self.workspace, &path) {
                return refused(format!(
                    "Dream may only write SOUL.md, USER.md, memory/MEMORY.md and files under \
                     skills/, not {path:?}"
                ));
            }
            if let Err(lost) = self.writer.check().await {
                return refused(lost.to_string());
            }
        } else if !READ_TOOLS.contains(&name) {
            return refused(format!("tool {name} is not available to Dream"));
        }
        self.inner.execute(scope, call_id, name, arguments).await
    }
}

/// Returns `text` cut to `max` characters.
fn capped(text: &str, max: usize) -> &str {
    text.char_indices()
        .nth(max)
        .map_or(text, |(i, _)| &text[..i])
}

/// Returns the `## Current Memory Files` and `## Conversation History` sections.
fn material(workspace: &Path, entries: &[Entry]) -> String {
    let mut out = String::from("## Current Memory Files\n");
    for file in WRITABLE {
        let text = std::fs::read_to_string(workspace.join(file)).unwrap_or_default();
        let shown = if text.trim().is_empty() {
            "(empty)"
        } else {
            capped(&text, FILE_CHARS)
        };
        out.push_str(&format!("\n### {file}\n{shown}\n"));
    }
    out.push_str("\n## Conversation History\n");
    for e in entries {
        out.push_str(&format!(
            "[{}] {}\n",
            e.timestamp,
            capped(&e.content, ENTRY_CHARS)
        ));
    }
    out
}

/// Returns the analysis instructions: the workspace's `prompts/dream.md` when present.
fn phase1_prompt(workspace: &Path) -> String {
    match std::fs::read_to_string(workspace.join("prompts/dream.md")) {
        Ok(text) if !text.trim().is_empty() => capped(&text, OVERRIDE_CHARS).to_string(),
        _ => PHASE1.to_string(),
    }
}

fn spec(ctx: Ctx<'_>, messages: Vec<Value>, max_iterations: u32, session_key: &str) -> RunSpec {
    let d = &ctx.cfg.agents.defaults;
    RunSpec {
        messages,
        model: d
            .dream
            .model_override
            .clone()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| ctx.bot.target.model.clone()),
        max_tokens: d.max_tokens,
        context_window_tokens: d.context_window_tokens,
        context_block_limit: d.context_block_limit,
        temperature: ctx.bot.target.temperature.unwrap_or(d.temperature),
        reasoning_effort: d.reasoning_effort.clone(),
        max_iterations,
        llm_timeout: nanobot_core::resolve::llm_timeout(ctx.cfg),
        scope: ToolScope {
            session_key: session_key.to_string(),
            channel: "system".into(),
            chat_id: "dream".into(),
            in_cron: true,
            file_reads: Default::default(),
        },
        capped_replies: ctx.bot.target.caps_replies(),
        telemetry: nanobot_core::runner::Telemetry::of(&ctx.bot.target, ctx.cfg),
        // Dream reads and edits a few memory files: results stay inline.
        offload: Default::default(),
    }
}

/// Compacts `history.jsonl` to its newest [`MAX_HISTORY_ENTRIES`] entries (never one after
/// `.dream_cursor`), as upstream after each Dream run.
async fn compact(writer: Writer<'_>, bot: &MemoryBot) -> Result<(), Error> {
    writer.check().await?;
    let dropped = bot.files().compact(MAX_HISTORY_ENTRIES)?;
    if dropped > 0 {
        tracing::info!(bot = %bot.spec.id, dropped, "history compacted");
    }
    Ok(())
}

/// Dream was disabled: `.dream_cursor` skips every history entry written so far, as
/// upstream, so enabling it again does not replay them; the history is compacted as after a
/// run (with Dream off nothing else would bound it).
pub async fn skip(writer: Writer<'_>, bot: &MemoryBot) -> Result<String, Error> {
    let files = bot.files();
    let last = files.last_cursor();
    if last > files.dream_cursor() {
        files.set_dream_cursor(last)?;
        tracing::info!(bot = %bot.spec.id, cursor = last, "dream disabled: cursor advanced");
    }
    compact(writer, bot).await?;
    Ok(format!("Dream: cursor at {last}"))
}

/// What a Dream run did.
enum Ran {
    /// No history entry waits for Dream.
    NoInput,
    /// The run completed, with the commit it made (none: memory unchanged).
    Done(Option<String>),
}

/// Runs Dream over the next batch and answers upstream's report: how long it took, whether
/// memory changed and the commit; a run that stopped early says why and leaves the cursor.
pub async fn run(ctx: Ctx<'_>) -> Result<String, Error> {
    let started = std::time::Instant::now();
    let secs = || started.elapsed().as_secs_f64();
    match digest(ctx).await {
        Ok(Ran::NoInput) => Ok(commands::no_input_message()),
        Ok(Ran::Done(commit)) => Ok(commands::run_report(
            secs(),
            Ok(commit.is_some()),
            commit.as_deref(),
        )),
        Err(Error::Incomplete(reason)) => Ok(commands::run_report(secs(), Err(&reason), None)),
        Err(e) => Err(e),
    }
}

async fn digest(ctx: Ctx<'_>) -> Result<Ran, Error> {
    let bot = ctx.bot;
    let files = bot.files();
    ctx.writer.check().await?;
    let entries: Vec<Entry> = files
        .entries_after(files.dream_cursor())
        .into_iter()
        .take(BATCH)
        .collect();
    let Some(last) = entries.last().map(|e| e.cursor) else {
        return Ok(Ran::NoInput);
    };
    tracing::info!(bot = %bot.spec.id, entries = entries.len(), "dream run started");
    let workspace = bot.spec.workspace.as_path();
    let store = MemoryRepo::open_or_init(workspace)?;
    let session_key = format!("dream:{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    let material = material(workspace, &entries);

    let analysis = runner::run(
        RunDeps {
            model: &bot.provider,
            tools: &bot.tools,
            specs: &Offered::default(),
            hook: &NoopHook,
            checkpoints: None,
            injections: None,
        },
        spec(
            ctx,
            vec![
                json!({"role": "system", "content": phase1_prompt(workspace)}),
                json!({"role": "user", "content": material}),
            ],
            1,
            &session_key,
        ),
    )
    .await;
    if analysis.stop_reason != StopReason::Completed {
        tracing::warn!(error = ?analysis.error, stop_reason = %analysis.stop_reason, "dream analysis stopped early");
        return Err(Error::Incomplete(analysis.stop_reason.to_string()));
    }

    let specs: Vec<_> = bot
        .tools
        .specs()
        .await
        .into_iter()
        .filter(|s| READ_TOOLS.contains(&s.name.as_str()) || WRITE_TOOLS.contains(&s.name.as_str()))
        .collect();
    ctx.writer.check().await?;
    let tools = DreamTools {
        inner: &bot.tools,
        workspace,
        writer: ctx.writer,
    };
    let edit = runner::run(
        RunDeps {
            model: &bot.provider,
            tools: &tools,
            specs: &Offered::new(specs),
            hook: &NoopHook,
            checkpoints: None,
            injections: None,
        },
        spec(
            ctx,
            vec![
                json!({"role": "system", "content": PHASE2}),
                json!({"role": "user", "content": format!(
                    "## Analysis\n{}\n\n{material}", analysis.content.trim()
                )}),
            ],
            MAX_ITERATIONS,
            &session_key,
        ),
    )
    .await;
    if edit.stop_reason != StopReason::Completed {
        tracing::warn!(error = ?edit.error, stop_reason = %edit.stop_reason, "dream edit stopped early");
        return Err(Error::Incomplete(edit.stop_reason.to_string()));
    }
    ctx.writer.check().await?;
    let committed = store.commit_dream()?;
    ctx.writer.check().await?;
    files.set_dream_cursor(last)?;
    tracing::info!(bot = %bot.spec.id, entries = entries.len(), cursor = last, commit = ?committed.as_ref().map(|c| &c.0), "dream run completed");
    compact(ctx.writer, bot).await?;
    Ok(Ran::Done(committed.map(|(sha, _)| sha)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dream_writes_only_memory_files_and_skills() {
        let ws = Path::new("/ws");
        for ok in [
            "SOUL.md",
            "USER.md",
            "memory/MEMORY.md",
            "./memory/MEMORY.md",
            "/ws/USER.md",
            "skills/deploy/SKILL.md",
            "/ws/skills/x/notes.md",
        ] {
            assert!(writable(ws, ok), "{ok}");
        }
        for refused in [
            "AGENTS.md",
            "memory/history.jsonl",
            "memory/.dream_cursor",
            "../SOUL.md",
            "skills/../AGENTS.md",
            "/etc/passwd",
            "/ws2/SOUL.md",
            "skills",
            "",
        ] {
            assert!(!writable(ws, refused), "{refused}");
        }
    }

    #[test]
    fn dream_may_not_write_through_a_skills_symlink_leading_out_of_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let skills = ws.path().join("skills");
        std::fs::create_dir_all(skills.join("brew")).unwrap();
        std::os::unix::fs::symlink(outside.path(), skills.join("evil")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("missing.md"),
            skills.join("dangling.md"),
        )
        .unwrap();
        std::os::unix::fs::symlink(skills.join("brew"), skills.join("alias")).unwrap();
        assert!(writable(ws.path(), "skills/brew/SKILL.md"));
        assert!(writable(ws.path(), "skills/new/SKILL.md"));
        assert!(
            writable(ws.path(), "skills/alias/SKILL.md"),
            "stays in skills/"
        );
        assert!(!writable(ws.path(), "skills/evil/SKILL.md"));
        assert!(!writable(ws.path(), "skills/evil/deep/x.md"));
        assert!(!writable(ws.path(), "skills/dangling.md"));
        let abs = skills.join("evil/SKILL.md");
        assert!(!writable(ws.path(), abs.to_str().unwrap()));
    }

    #[test]
    fn material_shows_files_or_empty_and_caps_entries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("USER.md"), "Likes tea.").unwrap();
        let entries = vec![Entry {
            cursor: 3,
            timestamp: "2026-01-01 10:00".into(),
            content: "x".repeat(ENTRY_CHARS + 50),
            session_key: None,
            chunk_id: None,
        }];
        let text = material(dir.path(), &entries);
        assert!(text.starts_with("## Current Memory Files\n"));
        assert!(text.contains("### USER.md\nLikes tea."));
        assert!(text.contains("### SOUL.md\n(empty)"));
        assert!(text.contains("## Conversation History\n[2026-01-01 10:00] "));
        assert!(!text.contains(&"x".repeat(ENTRY_CHARS + 1)));
    }
}
