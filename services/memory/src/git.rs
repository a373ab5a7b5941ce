//! The git history of a workspace's memory, compatible with upstream's dulwich store: the
//! repository at the workspace root, a `.gitignore` that ignores everything (`/*`) but the
//! tracked files, commits by `nanobot <nanobot@dream>`, an initial `init: nanobot memory
//! store` commit, Dream commits whose message starts with `dream:` and carries the diff
//! summary. Commits are written by libgit2 (objects first, then the ref through a lock
//! file), so a process killed mid-commit leaves the previous `HEAD`, and maybe a lock file
//! (`.git/index.lock`, `.git/refs/heads/<branch>.lock`) that would fail every later write:
//! [`MemoryRepo::open_or_init`] removes such stale lock files. That is safe because only the
//! holder of the bot's memory lease opens the repository (every memory job runs under it), so
//! no other writer can be half-way through a write of its own.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use git2::{DiffFormat, DiffOptions, IndexAddOption, Oid, Repository, Signature};

use nanobot_core::memory::write_atomic;

/// Files Dream maintains (upstream's tracked files).
pub const TRACKED_FILES: &[&str] = &["SOUL.md", "USER.md", "memory/MEMORY.md"];
/// Directory of workspace skills, tracked whole.
pub const SKILLS_DIR: &str = "skills";
/// Author and committer of every memory commit.
pub const AUTHOR: (&str, &str) = ("nanobot", "nanobot@dream");
/// Message of the first commit.
pub const INIT_MESSAGE: &str = "init: nanobot memory store";
/// Prefix of Dream commit messages.
pub const DREAM_PREFIX: &str = "dream:";
/// Prefix of the commit `/dream-restore` makes (upstream's `revert: undo <sha>`); not a Dream
/// commit, so `/dream-log` and the `/dream-restore` list skip it.
pub const REVERT_PREFIX: &str = "revert: undo";
/// Cap of the unified diff embedded in a commit message (upstream).
const DIFF_MAX_CHARS: usize = 6000;

/// Git failures.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// libgit2 failed.
    #[error("git failed: {0}")]
    Git(#[from] git2::Error),
    /// A file could not be read or written.
    #[error("memory file i/o failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// One commit as shown to users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// Short sha (8 hex digits).
    pub sha: String,
    /// Full message.
    pub message: String,
    /// Local time, `%Y-%m-%d %H:%M`.
    pub timestamp: String,
}

impl CommitInfo {
    /// Returns the first line of the message.
    pub fn subject(&self) -> &str {
        self.message.lines().next().unwrap_or("(no message)")
    }

    /// Formats the commit with its diff, as upstream's `/dream-log`.
    pub fn format(&self, diff: &str) -> String {
        let header = format!(
            "## {}\n`{}` — {}\n",
            self.subject(),
            self.sha,
            self.timestamp
        );
        if diff.is_empty() {
            format!("{header}\n(no file changes)")
        } else {
            format!("{header}\n```diff\n{}\n```", diff.trim_end())
        }
    }
}

/// Ignores `memory/`'s runtime files (`history.jsonl`, the cursors).
const MEMORY_DIR_IGNORE: &str = "memory/*";
/// Re-allows `MEMORY.md` after [`MEMORY_DIR_IGNORE`].
const MEMORY_FILE_ALLOW: &str = "!memory/MEMORY.md";

/// Returns upstream's `.gitignore` lines for the top-level tracked files (plus `!skills/`),
/// before the `memory/` block.
fn gitignore_lines() -> Vec<String> {
    let mut lines = vec!["/*".to_string(), "!memory/".to_string()];
    lines.push(format!("!{SKILLS_DIR}/"));
    for f in TRACKED_FILES.iter().filter(|f| !f.contains('/')) {
        lines.push(format!("!{f}"));
    }
    lines.push("!.gitignore".into());
    lines
}

/// Returns the lines to append to the `.gitignore` text `existing` (empty: it already does
/// what Dream needs). In gitignore the last matching line wins, so `!memory/MEMORY.md` is
/// appended again when `memory/*` comes after it (as upstream's own backfill does).
fn missing_gitignore_lines(existing: &str) -> Vec<String> {
    let lines: Vec<&str> = existing.lines().map(str::trim).collect();
    let last = |wanted: &str| lines.iter().rposition(|l| *l == wanted);
    let mut missing: Vec<String> = gitignore_lines()
        .into_iter()
        .filter(|l| !lines.contains(&l.as_str()))
        .collect();
    let ignore_at = last(MEMORY_DIR_IGNORE);
    if ignore_at.is_none() {
        missing.push(MEMORY_DIR_IGNORE.into());
    }
    if ignore_at.is_none() || last(MEMORY_FILE_ALLOW) < ignore_at {
        missing.push(MEMORY_FILE_ALLOW.into());
    }
    missing
}

/// Removes the lock files a killed libgit2 writer leaves in `git_dir` (`index.lock`,
/// `HEAD.lock`, `config.lock`, `packed-refs.lock`, and `*.lock` under `refs/` and `logs/`).
/// Only for the memory lease holder (see the module docs). Returns how many were removed.
fn clear_stale_locks(git_dir: &Path) -> Result<usize> {
    fn walk(dir: &Path, deep: bool, removed: &mut usize) -> std::io::Result<()> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if deep {
                    walk(&path, true, removed)?;
                }
            } else if path.extension().is_some_and(|e| e == "lock") {
                std::fs::remove_file(&path)?;
                *removed += 1;
            }
        }
        Ok(())
    }
    let mut removed = 0;
    walk(git_dir, false, &mut removed)?;
    for sub in ["refs", "logs"] {
        walk(&git_dir.join(sub), true, &mut removed)?;
    }
    Ok(removed)
}

/// The memory repository of one workspace.
pub struct MemoryRepo {
    repo: Repository,
    root: PathBuf,
}

impl std::fmt::Debug for MemoryRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRepo")
            .field("root", &self.root)
            .finish()
    }
}

fn signature() -> Result<Signature<'static>> {
    Ok(Signature::now(AUTHOR.0, AUTHOR.1)?)
}

fn short(oid: Oid) -> String {
    oid.to_string()[..8].to_string()
}

impl MemoryRepo {
    /// Opens the workspace's repository, creating it (with `.gitignore` and the initial
    /// commit) when missing; backfills missing `.gitignore` lines of an existing one and
    /// removes stale lock files. The caller holds the bot's memory lease.
    pub fn open_or_init(workspace: &Path) -> Result<Self> {
        if workspace.join(".git").exists() {
            // A `.git` file (a worktree's pointer) holds no locks of ours.
            let git_dir = workspace.join(".git");
            let removed = if git_dir.is_dir() {
                clear_stale_locks(&git_dir)?
            } else {
                0
            };
            if removed > 0 {
                tracing::warn!(workspace = %workspace.display(), removed, "removed stale git lock files left by a killed writer");
            }
            let repo = Repository::open(workspace)?;
            let me = Self {
                repo,
                root: workspace.to_path_buf(),
            };
            me.ensure_gitignore()?;
            return Ok(me);
        }
        let repo = Repository::init(workspace)?;
        let me = Self {
            repo,
            root: workspace.to_path_buf(),
        };
        me.ensure_gitignore()?;
        for f in TRACKED_FILES {
            let path = workspace.join(f);
            if !path.exists() {
                write_atomic(&path, b"")?;
            }
        }
        me.commit_all(INIT_MESSAGE)?;
        Ok(me)
    }

    fn ensure_gitignore(&self) -> Result<()> {
        let path = self.root.join(".gitignore");
        let existing = std::fs::read_to_string(&path).unwrap_or_default();
        let missing = missing_gitignore_lines(&existing);
        if missing.is_empty() {
            return Ok(());
        }
        let mut text = existing.trim_end_matches('\n').to_string();
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&missing.join("\n"));
        text.push('\n');
        write_atomic(&path, text.as_bytes())?;
        Ok(())
    }

    /// Stages every tracked path (additions, edits, deletions) into the index.
    fn stage(&self) -> Result<git2::Index> {
        let mut index = self.repo.index()?;
        let specs: Vec<&str> = TRACKED_FILES
            .iter()
            .copied()
            .chain([SKILLS_DIR, ".gitignore"])
            .collect();
        index.add_all(specs.iter(), IndexAddOption::DEFAULT, None)?;
        index.update_all(specs.iter(), None)?;
        index.write()?;
        Ok(index)
    }

    fn head_tree(&self) -> Option<git2::Tree<'_>> {
        self.repo.head().ok()?.peel_to_tree().ok()
    }

    /// Commits the staged tracked paths when they differ from `HEAD` (always for the first
    /// commit); returns the short sha, or `None` when nothing changed.
    fn commit_all(&self, message: &str) -> Result<Option<String>> {
        let mut index = self.stage()?;
        let tree_id = index.write_tree()?;
        let parent = self.repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        if let Some(p) = &parent
            && p.tree_id() == tree_id
        {
            return Ok(None);
        }
        let tree = self.repo.find_tree(tree_id)?;
        let sig = signature()?;
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let oid = self
            .repo
            .commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)?;
        Ok(Some(short(oid)))
    }

    /// Returns upstream's summary of the tracked changes against `HEAD`: `FILE: +a -b` lines,
    /// the totals line and a fenced unified diff (capped); empty when nothing changed.
    pub fn summarize_changes(&self) -> Result<String> {
        let index = self.stage()?;
        let head = self.head_tree();
        let diff = self
            .repo
            .diff_tree_to_index(head.as_ref(), Some(&index), None)?;
        summarize(&diff)
    }

    /// Commits the tracked changes as a Dream commit (`dream: periodic memory
    /// consolidation` plus the diff summary); `None` when nothing changed.
    pub fn commit_dream(&self) -> Result<Option<(String, String)>> {
        let summary = self.summarize_changes()?;
        if summary.is_empty() {
            return Ok(None);
        }
        let message = format!("{DREAM_PREFIX} periodic memory consolidation\n\n{summary}");
        Ok(self.commit_all(&message)?.map(|sha| (sha, summary)))
    }

    /// Returns up to `max` commits from `HEAD` along first parents whose message starts with
    /// `prefix` (all when `None`).
    pub fn log(&self, max: usize, prefix: Option<&str>) -> Result<Vec<CommitInfo>> {
        let mut out = Vec::new();
        let Ok(head) = self.repo.head() else {
            return Ok(out);
        };
        let mut next = head.peel_to_commit().ok();
        while let Some(commit) = next {
            if out.len() >= max {
                break;
            }
            let message = commit.message().unwrap_or("").trim().to_string();
            if prefix.is_none_or(|p| message.starts_with(p)) {
                let when = chrono::DateTime::from_timestamp(commit.time().seconds(), 0)
                    .map(|t| t.with_timezone(&chrono::Local))
                    .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
                    .unwrap_or_default();
                out.push(CommitInfo {
                    sha: short(commit.id()),
                    message,
                    timestamp: when,
                });
            }
            next = commit.parent(0).ok();
        }
        Ok(out)
    }

    fn find(&self, sha: &str) -> Option<git2::Commit<'_>> {
        let object = self.repo.revparse_single(sha).ok()?;
        object.peel_to_commit().ok()
    }

    /// Returns the commit `sha` (a prefix) and its diff against its parent.
    pub fn show(&self, sha: &str) -> Result<Option<(CommitInfo, String)>> {
        let Some(commit) = self.find(sha) else {
            return Ok(None);
        };
        let info = self
            .log(usize::MAX, None)?
            .into_iter()
            .find(|c| commit.id().to_string().starts_with(&c.sha));
        let Some(info) = info else {
            return Ok(None);
        };
        let parent_tree = commit.parent(0).ok().and_then(|p| p.tree().ok());
        let diff =
            self.repo
                .diff_tree_to_tree(parent_tree.as_ref(), Some(&commit.tree()?), None)?;
        Ok(Some((info, patch_text(&diff)?)))
    }

    /// Reverts commit `sha`: every file it changed goes back to its parent's version
    /// (atomically; files it added are removed), then a new commit records the restore.
    /// Returns the files restored and the new commit's sha; `None` when `sha` is unknown.
    pub fn restore(&self, sha: &str) -> Result<Option<(Vec<String>, Option<String>)>> {
        let Some(commit) = self.find(sha) else {
            return Ok(None);
        };
        let parent_tree = commit.parent(0).ok().and_then(|p| p.tree().ok());
        let mut opts = DiffOptions::new();
        let diff = self.repo.diff_tree_to_tree(
            parent_tree.as_ref(),
            Some(&commit.tree()?),
            Some(&mut opts),
        )?;
        let mut restored = Vec::new();
        for delta in diff.deltas() {
            let Some(path) = delta.new_file().path().or(delta.old_file().path()) else {
                continue;
            };
            let target = self.root.join(path);
            let old = parent_tree
                .as_ref()
                .and_then(|t| t.get_path(path).ok())
                .and_then(|e| e.to_object(&self.repo).ok())
                .and_then(|o| o.into_blob().ok());
            match old {
                Some(blob) => write_atomic(&target, blob.content())?,
                None => match std::fs::remove_file(&target) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                    _ => {}
                },
            }
            restored.push(path.display().to_string());
        }
        let message = format!("{REVERT_PREFIX} {sha}");
        let new_sha = self.commit_all(&message)?;
        Ok(Some((restored, new_sha)))
    }
}

fn patch_text(diff: &git2::Diff<'_>) -> Result<String> {
    let mut text = String::new();
    diff.print(DiffFormat::Patch, |_, _, line| {
        let origin = line.origin();
        if matches!(origin, '+' | '-' | ' ') {
            text.push(origin);
        }
        text.push_str(&String::from_utf8_lossy(line.content()));
        true
    })?;
    Ok(text)
}

fn summarize(diff: &git2::Diff<'_>) -> Result<String> {
    let mut lines = Vec::new();
    let (mut added, mut removed) = (0usize, 0usize);
    for i in 0..diff.deltas().len() {
        let Some(patch) = git2::Patch::from_diff(diff, i)? else {
            continue;
        };
        let (_, a, r) = patch.line_stats()?;
        let delta = patch.delta();
        let path = delta
            .new_file()
            .path()
            .or(delta.old_file().path())
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        lines.push(format!("{path}: +{a} -{r}"));
        added += a;
        removed += r;
    }
    if lines.is_empty() {
        return Ok(String::new());
    }
    let mut out = lines.join("\n");
    let _ = write!(
        out,
        "\n\n{} files changed, {added} insertions(+), {removed} deletions(-)",
        lines.len()
    );
    let mut patch: String = patch_text(diff)?;
    if patch.chars().count() > DIFF_MAX_CHARS {
        patch = patch.chars().take(DIFF_MAX_CHARS).collect();
        patch.push_str("\n... (diff truncated)");
    }
    let _ = write!(out, "\n\n```diff\n{}\n```", patch.trim_end());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_store_is_upstream_compatible_and_dream_commits_carry_the_diff_summary() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("memory")).unwrap();
        std::fs::write(ws.path().join("memory/history.jsonl"), "{}\n").unwrap();
        std::fs::write(ws.path().join("AGENTS.md"), "not tracked").unwrap();
        let repo = MemoryRepo::open_or_init(ws.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.path().join(".gitignore")).unwrap(),
            "/*\n!memory/\n!skills/\n!SOUL.md\n!USER.md\n!.gitignore\nmemory/*\n!memory/MEMORY.md\n"
        );
        let log = repo.log(10, None).unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].message, INIT_MESSAGE);
        assert!(repo.commit_dream().unwrap().is_none(), "nothing changed");

        std::fs::write(ws.path().join("memory/MEMORY.md"), "- likes tea\n").unwrap();
        std::fs::create_dir_all(ws.path().join("skills/brew")).unwrap();
        std::fs::write(
            ws.path().join("skills/brew/SKILL.md"),
            "---\nname: brew\n---\n",
        )
        .unwrap();
        std::fs::write(ws.path().join("memory/.cursor"), "9").unwrap();
        let (sha, summary) = repo.commit_dream().unwrap().unwrap();
        assert!(summary.starts_with("memory/MEMORY.md: +1 -0\nskills/brew/SKILL.md: +3 -0\n\n2 files changed, 4 insertions(+), 0 deletions(-)\n\n```diff\n"), "{summary}");
        let head = git2::Repository::open(ws.path()).unwrap();
        let commit = head.head().unwrap().peel_to_commit().unwrap();
        assert_eq!(commit.author().name().ok(), Some(AUTHOR.0));
        assert_eq!(commit.author().email().ok(), Some("nanobot@dream"));
        assert!(
            commit
                .message()
                .unwrap()
                .starts_with("dream: periodic memory consolidation\n\nmemory/MEMORY.md: +1 -0")
        );
        let files: Vec<String> = {
            let tree = commit.tree().unwrap();
            let mut names = Vec::new();
            tree.walk(git2::TreeWalkMode::PreOrder, |dir, e| {
                if e.kind() == Some(git2::ObjectType::Blob) {
                    names.push(format!("{dir}{}", e.name().unwrap()));
                }
                git2::TreeWalkResult::Ok
            })
            .unwrap();
            names
        };
        assert_eq!(
            files,
            [
                ".gitignore",
                "SOUL.md",
                "USER.md",
                "memory/MEMORY.md",
                "skills/brew/SKILL.md"
            ],
            "only memory files and skills"
        );

        let (info, diff) = repo.show(&sha).unwrap().unwrap();
        assert_eq!(info.subject(), "dream: periodic memory consolidation");
        assert!(diff.contains("+- likes tea"), "{diff}");
        assert!(info.format(&diff).starts_with(&format!(
            "## dream: periodic memory consolidation\n`{sha}` — "
        )));

        let (restored, new_sha) = repo.restore(&sha).unwrap().unwrap();
        assert_eq!(restored, ["memory/MEMORY.md", "skills/brew/SKILL.md"]);
        assert!(new_sha.is_some());
        assert_eq!(
            std::fs::read_to_string(ws.path().join("memory/MEMORY.md")).unwrap(),
            ""
        );
        assert!(!ws.path().join("skills/brew/SKILL.md").exists());
        let log = repo.log(10, None).unwrap();
        assert_eq!(
            log[0].subject(),
            format!("revert: undo {sha}"),
            "upstream's message"
        );
        let dream_log = repo.log(10, Some(DREAM_PREFIX)).unwrap();
        assert_eq!(
            dream_log.iter().map(|c| c.sha.as_str()).collect::<Vec<_>>(),
            [sha.as_str()],
            "the restore is not listed as a Dream commit"
        );
        assert!(repo.restore("deadbeef").unwrap().is_none());
    }

    fn ignored(ws: &Path, path: &str) -> bool {
        git2::Repository::open(ws)
            .unwrap()
            .is_path_ignored(path)
            .unwrap()
    }

    #[test]
    fn upstreams_gitignore_keeps_memory_md_tracked_and_is_changed_only_where_needed() {
        // The reference's layout (every tracked file re-allowed, no `memory/*`), and upstream
        // HEAD's (runtime files under memory/ ignored, tracked ones re-allowed after).
        let reference = "/*\n!memory/\n!SOUL.md\n!USER.md\n!memory/MEMORY.md\n!.gitignore\n";
        let head = "/*\n!memory/\n!SOUL.md\n!USER.md\n!.gitignore\nmemory/*\n!memory/MEMORY.md\n!memory/.dream_cursor\n";
        for (upstream, added) in [
            (reference, "!skills/\nmemory/*\n!memory/MEMORY.md\n"),
            (head, "!skills/\n"),
        ] {
            let ws = tempfile::tempdir().unwrap();
            git2::Repository::init(ws.path()).unwrap();
            std::fs::write(ws.path().join(".gitignore"), upstream).unwrap();
            MemoryRepo::open_or_init(ws.path()).unwrap();
            let text = std::fs::read_to_string(ws.path().join(".gitignore")).unwrap();
            assert_eq!(text, format!("{upstream}{added}"));
            assert!(!ignored(ws.path(), "memory/MEMORY.md"), "{text}");
            assert!(!ignored(ws.path(), "skills/brew/SKILL.md"), "{text}");
            assert!(ignored(ws.path(), "memory/history.jsonl"), "{text}");
            MemoryRepo::open_or_init(ws.path()).unwrap();
            assert_eq!(
                std::fs::read_to_string(ws.path().join(".gitignore")).unwrap(),
                text,
                "changed once"
            );
        }
    }

    #[test]
    fn a_killed_writers_stale_git_locks_do_not_block_the_next_dream_commit() {
        let ws = tempfile::tempdir().unwrap();
        let repo = MemoryRepo::open_or_init(ws.path()).unwrap();
        let branch = repo.repo.head().unwrap().name().unwrap().to_string();
        drop(repo);
        // What a worker SIGKILLed inside `index.write()` or `repo.commit()` leaves behind.
        let git = ws.path().join(".git");
        std::fs::write(git.join("index.lock"), "").unwrap();
        std::fs::write(git.join(format!("{branch}.lock")), "").unwrap();
        std::fs::write(ws.path().join("memory/MEMORY.md"), "- likes tea\n").unwrap();
        let repo = MemoryRepo::open_or_init(ws.path()).unwrap();
        let (sha, _) = repo.commit_dream().unwrap().expect("a Dream commit");
        assert_eq!(repo.log(1, None).unwrap()[0].sha, sha);
        assert!(!git.join("index.lock").exists());
    }

    #[test]
    fn an_existing_gitignore_is_merged_not_replaced() {
        let ws = tempfile::tempdir().unwrap();
        git2::Repository::init(ws.path()).unwrap();
        std::fs::write(
            ws.path().join(".gitignore"),
            "/*\n!memory/\n!SOUL.md\n!USER.md\n!.gitignore\n",
        )
        .unwrap();
        MemoryRepo::open_or_init(ws.path()).unwrap();
        let text = std::fs::read_to_string(ws.path().join(".gitignore")).unwrap();
        assert_eq!(
            text,
            "/*\n!memory/\n!SOUL.md\n!USER.md\n!.gitignore\n!skills/\nmemory/*\n!memory/MEMORY.md\n"
        );
    }
}
