//! The Dream commands with upstream's texts (`command/builtin.py`): `/dream-log [sha]`,
//! `/dream-restore [sha]` and `/dream-prompt [init]`, plus the texts of a `/dream` run's
//! report. The workspace's repository always exists here (the memory worker creates it), so
//! upstream's "memory versioning is not initialized" answers never apply.

use std::path::Path;

use nanobot_core::memory::initialize_prompt;

use super::{Error, PHASE1};
use crate::bots::MemoryBot;
use crate::git::{CommitInfo, DREAM_PREFIX, MemoryRepo};

/// Dream commits listed by `/dream-restore`, as upstream.
const RESTORE_LIST: usize = 10;
/// Commits searched for a sha, as upstream's `show_commit_diff`.
const SHA_SEARCH: usize = 20;
/// The workspace's Dream prompt override, relative to the workspace.
pub const PROMPT_FILE: &str = "prompts/dream.md";
/// The pointer to `/dream-prompt` ending several answers.
const PROMPT_HINT: &str = "Use `/dream-prompt` to see or change how Dream organizes memory.";

/// Returns the commit among the newest [`SHA_SEARCH`] (with `prefix`) whose short sha starts
/// with `sha`, with its diff.
fn find(
    store: &MemoryRepo,
    sha: &str,
    prefix: Option<&str>,
) -> Result<Option<(CommitInfo, String)>, Error> {
    let found = store
        .log(SHA_SEARCH, prefix)?
        .into_iter()
        .find(|c| c.sha.starts_with(sha));
    match found {
        Some(c) => Ok(store.show(&c.sha)?),
        None => Ok(None),
    }
}

/// Returns the files a unified diff changes (its `diff --git a/… b/…` lines), in order.
pub fn changed_files(diff: &str) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for line in diff.lines() {
        let Some(rest) = line.strip_prefix("diff --git ") else {
            continue;
        };
        let Some(path) = rest.split_whitespace().nth(1) else {
            continue;
        };
        let path = path.strip_prefix("b/").unwrap_or(path).to_string();
        if !files.contains(&path) {
            files.push(path);
        }
    }
    files
}

/// Upstream's `Changed files` value: the files in backticks, or a sentence when none.
fn files_line(diff: &str) -> String {
    let files = changed_files(diff);
    if files.is_empty() {
        return "No tracked memory files changed.".into();
    }
    files
        .iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Upstream's `## Dream Update` text of a commit and its diff.
pub fn log_content(commit: &CommitInfo, diff: &str, requested: bool) -> String {
    let which = if requested { "selected" } else { "latest" };
    let mut lines = vec![
        "## Dream Update".to_string(),
        String::new(),
        format!("Here is the {which} Dream memory change."),
        String::new(),
        format!("- Commit: `{}`", commit.sha),
        format!("- Time: {}", commit.timestamp),
        format!("- Changed files: {}", files_line(diff)),
    ];
    if diff.is_empty() {
        lines.push(String::new());
        lines.push("Dream recorded this version, but there is no file diff to display.".into());
    } else {
        lines.extend([
            String::new(),
            format!("Use `/dream-restore {}` to undo this change.", commit.sha),
            String::new(),
            "```diff".into(),
            diff.trim_end().to_string(),
            "```".into(),
        ]);
    }
    lines.join("\n")
}

/// `/dream-log [sha]`: the given (or latest) Dream commit and its diff.
pub fn log(bot: &MemoryBot, sha: Option<&str>) -> Result<String, Error> {
    log_in(&bot.spec.workspace, sha)
}

fn log_in(workspace: &Path, sha: Option<&str>) -> Result<String, Error> {
    let store = MemoryRepo::open_or_init(workspace)?;
    if let Some(sha) = sha.and_then(|s| s.split_whitespace().next()) {
        return Ok(match find(&store, sha, None)? {
            Some((commit, diff)) => log_content(&commit, &diff, true),
            None => format!(
                "Couldn't find Dream change `{sha}`.\n\nUse `/dream-restore` to list recent \
                 versions, or `/dream-log` to inspect the latest one."
            ),
        });
    }
    let latest = store.log(1, Some(DREAM_PREFIX))?.into_iter().next();
    let shown = match latest {
        Some(c) => store.show(&c.sha)?,
        None => None,
    };
    Ok(match shown {
        Some((commit, diff)) => log_content(&commit, &diff, false),
        None => format!("Dream memory has no saved versions yet.\n\n{PROMPT_HINT}"),
    })
}

/// Upstream's `## Dream Restore` list.
fn restore_list(commits: &[CommitInfo]) -> String {
    let mut lines = vec![
        "## Dream Restore".to_string(),
        String::new(),
        "Choose a Dream memory version to restore. Latest first:".into(),
        String::new(),
    ];
    for c in commits {
        lines.push(format!("- `{}` {} - {}", c.sha, c.timestamp, c.subject()));
    }
    lines.extend([
        String::new(),
        "Preview a version with `/dream-log <sha>` before restoring it.".into(),
        "Restore a version with `/dream-restore <sha>`.".into(),
    ]);
    lines.join("\n")
}

/// `/dream-restore [sha]`: lists recent Dream commits, or reverts one (Dream commits only).
pub fn restore(bot: &MemoryBot, sha: Option<&str>) -> Result<String, Error> {
    restore_in(&bot.spec.workspace, sha)
}

fn restore_in(workspace: &Path, sha: Option<&str>) -> Result<String, Error> {
    let store = MemoryRepo::open_or_init(workspace)?;
    let Some(sha) = sha.and_then(|s| s.split_whitespace().next()) else {
        let commits = store.log(RESTORE_LIST, Some(DREAM_PREFIX))?;
        if commits.is_empty() {
            return Ok("Dream memory has no saved versions to restore yet.".into());
        }
        return Ok(restore_list(&commits));
    };
    let Some((commit, diff)) = find(&store, sha, Some(DREAM_PREFIX))? else {
        return Ok(format!(
            "Couldn't restore Dream change `{sha}`.\n\nOnly Dream memory versions can be \
             restored. Use `/dream-restore` to list recent versions."
        ));
    };
    let restored = store.restore(&commit.sha)?.and_then(|(_, new_sha)| new_sha);
    Ok(match restored {
        Some(new_sha) => format!(
            "Restored Dream memory to the state before `{sha}`.\n\n- New safety commit: \
             `{new_sha}`\n- Restored files: {}\n\nUse `/dream-log {new_sha}` to inspect the \
             restore diff.",
            files_line(&diff)
        ),
        None => format!(
            "Couldn't restore Dream change `{sha}`.\n\nIt may be the first saved version with \
             no earlier state to restore."
        ),
    })
}

/// Whether `path` holds a non-empty prompt (upstream's `has_workspace_prompt_override`).
fn has_override(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| !t.trim_end().is_empty())
}

/// `/dream-prompt [init]`: tells where the workspace's Dream prompt is, or creates it from
/// the default.
pub fn prompt(bot: &MemoryBot, arg: Option<&str>) -> Result<String, Error> {
    prompt_in(&bot.spec.workspace, arg)
}

fn prompt_in(workspace: &Path, arg: Option<&str>) -> Result<String, Error> {
    let path = workspace.join(PROMPT_FILE);
    let arg = arg.map(|a| a.trim().to_lowercase()).unwrap_or_default();
    if arg == "init" {
        return Ok(if initialize_prompt(&path, PHASE1.trim())? {
            format!(
                "Created Dream memory instructions at `{PROMPT_FILE}`.\n\nEdit that file to \
                 teach Dream how to organize memory. This fully replaces nanobot's default \
                 Dream guide for this workspace. Delete or empty it to return to nanobot's \
                 default."
            )
        } else {
            format!(
                "Dream memory instructions already exist at `{PROMPT_FILE}`.\n\nEdit that \
                 file, or delete/empty it to return to nanobot's default."
            )
        });
    }
    if !arg.is_empty() {
        return Ok("Usage: /dream-prompt [init]".into());
    }
    Ok(if has_override(&path) {
        format!(
            "Dream memory instructions: custom for this workspace\n\n- Path: `{PROMPT_FILE}`\n\
             - Delete or empty this file to return to nanobot's default."
        )
    } else {
        format!(
            "Dream memory instructions: nanobot default\n\n- Editable file: `{PROMPT_FILE}`\n\
             - Run `/dream-prompt init` to create an editable copy."
        )
    })
}

/// Upstream's answer to `/dream` when no history waits for Dream.
pub fn no_input_message() -> String {
    [
        "Dream has no conversation history to process yet.",
        "",
        "Dream reads new entries from `memory/history.jsonl` after the current Dream cursor.",
        "Short chats only reach that file after token compaction or idle auto-compact, so a \
         fresh or short WebUI chat may leave Dream with no input.",
        "",
        "Next steps:",
        "- Enable `agents.defaults.idleCompactAfterMinutes` so completed chats become Dream \
         input automatically.",
        "- Compact the current chat into memory once that manual action is available.",
        "- If you expected history to exist, check whether `memory/history.jsonl` has new \
         entries after the Dream cursor.",
        "- Use `/dream-prompt` to see or change how Dream organizes memory.",
    ]
    .join("\n")
}

/// Upstream's report of a Dream run that `completed` (or stopped for `reason`) after
/// `secs`, with the commit it made.
pub fn run_report(secs: f64, outcome: Result<bool, &str>, commit: Option<&str>) -> String {
    let mut text = match outcome {
        Ok(true) => format!("Dream completed in {secs:.1}s."),
        Ok(false) => format!("Dream completed in {secs:.1}s; no memory changes."),
        Err(reason) => format!(
            "Dream did not complete after {secs:.1}s (stop_reason: {reason}); memory cursor \
             was not advanced."
        ),
    };
    if let Some(sha) = commit {
        text.push_str(&format!(" (commit {sha})"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dream_prompt_answers_with_upstream_texts_and_creates_the_file_once() {
        let ws = tempfile::tempdir().unwrap();
        let ask = |arg: Option<&str>| prompt_in(ws.path(), arg).unwrap();
        assert_eq!(
            ask(None),
            "Dream memory instructions: nanobot default\n\n- Editable file: `prompts/dream.md`\n- Run `/dream-prompt init` to create an editable copy."
        );
        assert_eq!(
            ask(Some("INIT")),
            "Created Dream memory instructions at `prompts/dream.md`.\n\nEdit that file to teach Dream how to organize memory. This fully replaces nanobot's default Dream guide for this workspace. Delete or empty it to return to nanobot's default."
        );
        let written = std::fs::read_to_string(ws.path().join(PROMPT_FILE)).unwrap();
        assert_eq!(written, format!("{}\n", PHASE1.trim()));
        assert_eq!(
            ask(Some("init")),
            "Dream memory instructions already exist at `prompts/dream.md`.\n\nEdit that file, or delete/empty it to return to nanobot's default."
        );
        assert_eq!(
            ask(None),
            "Dream memory instructions: custom for this workspace\n\n- Path: `prompts/dream.md`\n- Delete or empty this file to return to nanobot's default."
        );
        assert_eq!(ask(Some("写一本书 📚")), "Usage: /dream-prompt [init]");
        // An emptied file is the default again, and init fills it.
        std::fs::write(ws.path().join(PROMPT_FILE), " \n").unwrap();
        assert!(ask(None).starts_with("Dream memory instructions: nanobot default"));
        assert!(ask(Some("init")).starts_with("Created Dream memory instructions"));
    }

    #[test]
    fn dream_log_content_lists_changed_files_and_the_undo_command() {
        let commit = CommitInfo {
            sha: "52e55e2b".into(),
            message: "dream: manual run".into(),
            timestamp: "2026-11-27 15:34".into(),
        };
        let diff = "diff --git a/memory/MEMORY.md b/memory/MEMORY.md\nindex fd2ca96..b1fbb78 100644\n--- a/memory/MEMORY.md\n+++ b/memory/MEMORY.md\n@@ -1 +1,2 @@\n-# Long-term Memory\n+# Memory\n+写一本书 📚 👩\u{200d}👩\u{200d}👧\u{200d}👦 🇨🇳 e\u{301} مرحبا\n";
        assert_eq!(
            log_content(&commit, diff, false),
            "## Dream Update\n\nHere is the latest Dream memory change.\n\n- Commit: `52e55e2b`\n- Time: 2026-11-27 15:34\n- Changed files: `memory/MEMORY.md`\n\nUse `/dream-restore 52e55e2b` to undo this change.\n\n```diff\ndiff --git a/memory/MEMORY.md b/memory/MEMORY.md\nindex fd2ca96..b1fbb78 100644\n--- a/memory/MEMORY.md\n+++ b/memory/MEMORY.md\n@@ -1 +1,2 @@\n-# Long-term Memory\n+# Memory\n+写一本书 📚 👩\u{200d}👩\u{200d}👧\u{200d}👦 🇨🇳 e\u{301} مرحبا\n```"
        );
        assert_eq!(
            log_content(&commit, "", true),
            "## Dream Update\n\nHere is the selected Dream memory change.\n\n- Commit: `52e55e2b`\n- Time: 2026-11-27 15:34\n- Changed files: No tracked memory files changed.\n\nDream recorded this version, but there is no file diff to display."
        );
        assert_eq!(
            changed_files(&format!("{diff}diff --git a/SOUL.md b/SOUL.md\n{diff}")),
            vec!["memory/MEMORY.md".to_string(), "SOUL.md".to_string()]
        );
    }

    #[test]
    fn dream_log_and_restore_find_dream_commits_and_revert_one_as_upstream() {
        let ws = tempfile::tempdir().unwrap();
        let store = MemoryRepo::open_or_init(ws.path()).unwrap();
        assert_eq!(
            log_in(ws.path(), None).unwrap(),
            "Dream memory has no saved versions yet.\n\nUse `/dream-prompt` to see or change how Dream organizes memory."
        );
        assert_eq!(
            restore_in(ws.path(), None).unwrap(),
            "Dream memory has no saved versions to restore yet."
        );
        assert_eq!(
            log_in(ws.path(), Some("abc")).unwrap(),
            "Couldn't find Dream change `abc`.\n\nUse `/dream-restore` to list recent versions, or `/dream-log` to inspect the latest one."
        );
        assert_eq!(
            restore_in(ws.path(), Some("abc")).unwrap(),
            "Couldn't restore Dream change `abc`.\n\nOnly Dream memory versions can be restored. Use `/dream-restore` to list recent versions."
        );
        let text = "# Memory\n写一本书 📚 👩\u{200d}👩\u{200d}👧\u{200d}👦 🇨🇳 e\u{301} שלום\n";
        std::fs::create_dir_all(ws.path().join("memory")).unwrap();
        std::fs::write(ws.path().join("memory/MEMORY.md"), text).unwrap();
        let (sha, _) = store.commit_dream().unwrap().unwrap();

        let latest = log_in(ws.path(), None).unwrap();
        let time = store.log(1, None).unwrap()[0].timestamp.clone();
        assert!(
            latest.starts_with(&format!(
                "## Dream Update\n\nHere is the latest Dream memory change.\n\n- Commit: `{sha}`\n- Time: {time}\n- Changed files: `memory/MEMORY.md`\n\nUse `/dream-restore {sha}` to undo this change.\n\n```diff\ndiff --git a/memory/MEMORY.md b/memory/MEMORY.md\n"
            )),
            "{latest}"
        );
        assert!(
            latest.ends_with(&format!(
                "+{}```",
                text.lines().nth(1).unwrap().to_owned() + "\n"
            )),
            "{latest}"
        );
        assert!(
            log_in(ws.path(), Some(&sha[..4]))
                .unwrap()
                .contains("Here is the selected Dream memory change.")
        );
        assert_eq!(
            restore_in(ws.path(), None).unwrap(),
            format!(
                "## Dream Restore\n\nChoose a Dream memory version to restore. Latest first:\n\n- `{sha}` {time} - dream: periodic memory consolidation\n\nPreview a version with `/dream-log <sha>` before restoring it.\nRestore a version with `/dream-restore <sha>`."
            )
        );
        let restored = restore_in(ws.path(), Some(&sha)).unwrap();
        let new_sha = store.log(1, None).unwrap()[0].sha.clone();
        assert_eq!(
            restored,
            format!(
                "Restored Dream memory to the state before `{sha}`.\n\n- New safety commit: `{new_sha}`\n- Restored files: `memory/MEMORY.md`\n\nUse `/dream-log {new_sha}` to inspect the restore diff."
            )
        );
        let after = std::fs::read_to_string(ws.path().join("memory/MEMORY.md")).unwrap_or_default();
        assert_ne!(
            after, text,
            "the file is back to its state before the commit"
        );
        // The safety commit is no Dream version: it cannot be restored, but it can be shown.
        assert!(
            restore_in(ws.path(), Some(&new_sha))
                .unwrap()
                .starts_with("Couldn't restore Dream change")
        );
        assert!(
            log_in(ws.path(), Some(&new_sha))
                .unwrap()
                .contains(&format!("- Commit: `{new_sha}`"))
        );
    }

    #[test]
    fn run_reports_read_as_upstream() {
        assert_eq!(
            run_report(12.345, Ok(true), Some("52e55e2b")),
            "Dream completed in 12.3s. (commit 52e55e2b)"
        );
        assert_eq!(
            run_report(0.04, Ok(false), None),
            "Dream completed in 0.0s; no memory changes."
        );
        assert_eq!(
            run_report(3.0, Err("max_iterations"), None),
            "Dream did not complete after 3.0s (stop_reason: max_iterations); memory cursor was not advanced."
        );
        assert_eq!(
            no_input_message(),
            "Dream has no conversation history to process yet.\n\nDream reads new entries from `memory/history.jsonl` after the current Dream cursor.\nShort chats only reach that file after token compaction or idle auto-compact, so a fresh or short WebUI chat may leave Dream with no input.\n\nNext steps:\n- Enable `agents.defaults.idleCompactAfterMinutes` so completed chats become Dream input automatically.\n- Compact the current chat into memory once that manual action is available.\n- If you expected history to exist, check whether `memory/history.jsonl` has new entries after the Dream cursor.\n- Use `/dream-prompt` to see or change how Dream organizes memory."
        );
    }
}
