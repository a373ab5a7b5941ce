//! The memory files of a workspace in upstream's formats: `memory/history.jsonl` (one
//! `{"cursor","timestamp","content"[,"session_key"][,"chunk_id"]}` per line),
//! `memory/.cursor` (the last allocated cursor) and `memory/.dream_cursor` (the last cursor
//! Dream consumed). Every writer takes an exclusive lock on `memory/.history.lock`, so several
//! processes may append; whole-file rewrites (cursors, compaction) go through [`write_atomic`].
//!
//! `chunk_id` (ours; upstream ignores it) names the conversation chunk a Consolidator row
//! archives: [`MemoryFiles::append_once`] does not append a chunk whose row is already there,
//! so a job redelivered after its worker died between the append and its next step (setting
//! `last_consolidated`, the done marker) does not archive the chunk twice.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Hard cap on one history entry (upstream).
pub const MAX_ENTRY_CHARS: usize = 64_000;
/// Entries kept by [`MemoryFiles::compact`] (upstream `max_history_entries`).
pub const MAX_HISTORY_ENTRIES: usize = 1000;

static WARNED_MALFORMED: AtomicBool = AtomicBool::new(false);
static WARNED_CAP: AtomicBool = AtomicBool::new(false);

/// One `history.jsonl` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the archive (allocated increasing).
    pub cursor: i64,
    /// Local time, `%Y-%m-%d %H:%M`.
    pub timestamp: String,
    /// The summary or raw archive text.
    pub content: String,
    /// The session the entry came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The archived chunk's id (see [`MemoryFiles::append_once`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_id: Option<String>,
}

pub use nanobot_runtime::fs::write_atomic;

/// Writes `default` (plus a newline) to `path` unless it is a non-empty file or not a file;
/// returns whether it did (upstream's `initialize_workspace_prompt`: `/dream-prompt init`,
/// `/evaluator-prompt init`).
pub fn initialize_prompt(path: &std::path::Path, default: &str) -> std::io::Result<bool> {
    if path.exists() {
        let blank =
            path.is_file() && std::fs::read_to_string(path).is_ok_and(|t| t.trim().is_empty());
        if !blank {
            return Ok(false);
        }
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    write_atomic(path, format!("{default}\n").as_bytes())?;
    Ok(true)
}

/// Parses one line; `None` for malformed rows and invalid cursors (non-integer, boolean,
/// negative).
fn parse_entry(line: &str) -> Option<Entry> {
    let value: Value = serde_json::from_str(line).ok()?;
    let cursor = value.get("cursor")?.as_i64().filter(|c| *c >= 0)?;
    let content = match value.get("content") {
        Some(Value::String(s)) => s.clone(),
        _ => return None,
    };
    Some(Entry {
        cursor,
        timestamp: value
            .get("timestamp")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        content,
        session_key: value
            .get("session_key")
            .and_then(Value::as_str)
            .map(str::to_string),
        chunk_id: value
            .get("chunk_id")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

fn parse_entries(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match parse_entry(line) {
            Some(e) => out.push(e),
            None => {
                if !WARNED_MALFORMED.swap(true, Ordering::Relaxed) {
                    tracing::warn!("skipping malformed history.jsonl rows");
                }
            }
        }
    }
    out
}

fn read_int(path: &Path) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Returns `text` capped at [`MAX_ENTRY_CHARS`], think tags removed.
fn prepare_content(text: &str) -> String {
    let (clean, _) = crate::provider::strip_think(text);
    if clean.chars().count() <= MAX_ENTRY_CHARS {
        return clean;
    }
    if !WARNED_CAP.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            cap = MAX_ENTRY_CHARS,
            "history entry over the cap, truncating"
        );
    }
    clean.chars().take(MAX_ENTRY_CHARS).collect()
}

/// The memory files of one workspace.
#[derive(Debug, Clone)]
pub struct MemoryFiles {
    dir: PathBuf,
}

/// Holds the exclusive file lock of the memory directory until dropped.
struct FileLock(std::fs::File);

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl MemoryFiles {
    /// Returns the memory files of `workspace` (`<workspace>/memory`).
    pub fn new(workspace: &Path) -> Self {
        Self {
            dir: workspace.join("memory"),
        }
    }

    /// Returns `memory/history.jsonl`.
    pub fn history_path(&self) -> PathBuf {
        self.dir.join("history.jsonl")
    }

    fn lock(&self) -> std::io::Result<FileLock> {
        std::fs::create_dir_all(&self.dir)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(".history.lock"))?;
        file.lock()?;
        Ok(FileLock(file))
    }

    /// Appends one entry and returns its cursor: `max(.cursor, last valid row) + 1`.
    pub fn append(&self, content: &str, session_key: Option<&str>) -> std::io::Result<i64> {
        Ok(self.append_inner(content, session_key, None)?.0)
    }

    /// Appends the archive of chunk `chunk_id` unless a row of that chunk is already in the
    /// file (a redelivered job whose worker died after appending). Returns the row's cursor
    /// and whether it was appended now. The check and the append happen under the file lock,
    /// so they are one step for every writer.
    pub fn append_once(
        &self,
        content: &str,
        session_key: Option<&str>,
        chunk_id: &str,
    ) -> std::io::Result<(i64, bool)> {
        self.append_inner(content, session_key, Some(chunk_id))
    }

    fn append_inner(
        &self,
        content: &str,
        session_key: Option<&str>,
        chunk_id: Option<&str>,
    ) -> std::io::Result<(i64, bool)> {
        let _lock = self.lock()?;
        self.migrate_legacy_locked()?;
        let existing = std::fs::read_to_string(self.history_path()).unwrap_or_default();
        let rows = parse_entries(&existing);
        if let Some(id) = chunk_id
            && let Some(row) = rows.iter().find(|e| e.chunk_id.as_deref() == Some(id))
        {
            return Ok((row.cursor, false));
        }
        let last_row = rows.iter().map(|e| e.cursor).max().unwrap_or(0);
        let stored = read_int(&self.dir.join(".cursor"))
            .filter(|c| *c >= 0)
            .unwrap_or(0);
        let entry = Entry {
            cursor: stored.max(last_row) + 1,
            timestamp: chrono::Local::now().format("%Y-%m-%d %H:%M").to_string(),
            content: prepare_content(content),
            session_key: session_key.map(str::to_string),
            chunk_id: chunk_id.map(str::to_string),
        };
        let line = serde_json::to_string(&entry).map_err(std::io::Error::other)?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.history_path())?;
        // A file cut mid-row by a crash gets its own line back before the new row.
        let needs_newline = !existing.is_empty() && !existing.ends_with('\n');
        let prefix = if needs_newline { "\n" } else { "" };
        writeln!(file, "{prefix}{line}")?;
        file.sync_data()?;
        write_atomic(
            &self.dir.join(".cursor"),
            entry.cursor.to_string().as_bytes(),
        )?;
        Ok((entry.cursor, true))
    }

    /// Migrates a legacy `HISTORY.md` before a read (once: it is renamed when migrated).
    fn migrate_before_read(&self) {
        if !self.dir.join("HISTORY.md").is_file() {
            return;
        }
        if let Err(e) = self.migrate_legacy() {
            tracing::warn!(error = %e, "failed to migrate legacy HISTORY.md, reading history.jsonl as is");
        }
    }

    /// Returns every valid entry with a cursor above `cursor`, in file order (a legacy
    /// `HISTORY.md` is migrated first).
    pub fn entries_after(&self, cursor: i64) -> Vec<Entry> {
        self.migrate_before_read();
        let text = std::fs::read_to_string(self.history_path()).unwrap_or_default();
        parse_entries(&text)
            .into_iter()
            .filter(|e| e.cursor > cursor)
            .collect()
    }

    /// Returns `.dream_cursor` (0 when missing or invalid; a legacy `HISTORY.md` is migrated
    /// first, which sets it).
    pub fn dream_cursor(&self) -> i64 {
        self.migrate_before_read();
        self.stored_dream_cursor()
    }

    fn stored_dream_cursor(&self) -> i64 {
        read_int(&self.dir.join(".dream_cursor"))
            .filter(|c| *c >= 0)
            .unwrap_or(0)
    }

    /// Writes `.dream_cursor` atomically.
    pub fn set_dream_cursor(&self, cursor: i64) -> std::io::Result<()> {
        let _lock = self.lock()?;
        write_atomic(
            &self.dir.join(".dream_cursor"),
            cursor.to_string().as_bytes(),
        )
    }

    /// Returns the highest cursor in the archive (0 when empty).
    pub fn last_cursor(&self) -> i64 {
        self.entries_after(-1)
            .iter()
            .map(|e| e.cursor)
            .max()
            .unwrap_or(0)
    }

    /// Keeps at most `max` entries, dropping the oldest, but never an entry newer than
    /// `.dream_cursor` (Dream has not read it yet). Malformed rows go too. Returns how many
    /// entries were dropped.
    pub fn compact(&self, max: usize) -> std::io::Result<usize> {
        let _lock = self.lock()?;
        let text = match std::fs::read_to_string(self.history_path()) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let entries = parse_entries(&text);
        if entries.len() <= max {
            return Ok(0);
        }
        let dream = self.stored_dream_cursor();
        let unread = entries.iter().filter(|e| e.cursor > dream).count();
        let keep_from = entries.len() - max.max(unread);
        let mut out = String::new();
        for e in &entries[keep_from..] {
            out.push_str(&serde_json::to_string(e).map_err(std::io::Error::other)?);
            out.push('\n');
        }
        write_atomic(&self.history_path(), out.as_bytes())?;
        Ok(keep_from)
    }

    /// Migrates a legacy `memory/HISTORY.md` once (when `history.jsonl` is empty or missing):
    /// one entry per `[YYYY-MM-DD HH:MM]` paragraph, both cursors set to the last migrated
    /// cursor, the original renamed `HISTORY.md.bak` (`.bak.N` when taken). Returns how many
    /// entries were migrated.
    pub fn migrate_legacy(&self) -> std::io::Result<usize> {
        let _lock = self.lock()?;
        self.migrate_legacy_locked()
    }

    fn migrate_legacy_locked(&self) -> std::io::Result<usize> {
        let legacy = self.dir.join("HISTORY.md");
        if !legacy.is_file() {
            return Ok(0);
        }
        let has_rows = std::fs::metadata(self.history_path()).is_ok_and(|m| m.len() > 0);
        if has_rows {
            return Ok(0);
        }
        let text = std::fs::read_to_string(&legacy)?;
        let modified: chrono::DateTime<chrono::Local> = std::fs::metadata(&legacy)?
            .modified()
            .map(Into::into)
            .unwrap_or_else(|_| chrono::Local::now());
        let fallback = modified.format("%Y-%m-%d %H:%M").to_string();
        let mut out = String::new();
        let paragraphs = legacy_paragraphs(&text, &fallback);
        for (i, (timestamp, content)) in paragraphs.iter().enumerate() {
            let entry = Entry {
                cursor: i as i64 + 1,
                timestamp: timestamp.clone(),
                content: prepare_content(content),
                session_key: None,
                chunk_id: None,
            };
            out.push_str(&serde_json::to_string(&entry).map_err(std::io::Error::other)?);
            out.push('\n');
        }
        if !paragraphs.is_empty() {
            let last = paragraphs.len().to_string();
            write_atomic(&self.history_path(), out.as_bytes())?;
            write_atomic(&self.dir.join(".cursor"), last.as_bytes())?;
            write_atomic(&self.dir.join(".dream_cursor"), last.as_bytes())?;
        }
        let mut backup = self.dir.join("HISTORY.md.bak");
        let mut n = 1;
        while backup.exists() {
            backup = self.dir.join(format!("HISTORY.md.bak.{n}"));
            n += 1;
        }
        std::fs::rename(&legacy, &backup)?;
        tracing::info!(
            entries = paragraphs.len(),
            "migrated legacy HISTORY.md to history.jsonl"
        );
        Ok(paragraphs.len())
    }
}

/// Splits a legacy `HISTORY.md` into `(timestamp, text)` entries: a line starting with
/// `[YYYY-MM-DD HH:MM]` opens an entry (inside a `[RAW]` entry, `ROLE:` lines continue it);
/// text before any header is dated `fallback`.
fn legacy_paragraphs(text: &str, fallback: &str) -> Vec<(String, String)> {
    let header = |line: &str| -> Option<(String, String)> {
        let rest = line.strip_prefix('[')?;
        let (ts, tail) = rest.split_once(']')?;
        let valid =
            ts.len() == 16 && chrono::NaiveDateTime::parse_from_str(ts, "%Y-%m-%d %H:%M").is_ok();
        valid.then(|| (ts.to_string(), tail.trim_start().to_string()))
    };
    let mut out: Vec<(String, String)> = Vec::new();
    let mut current: Option<(String, Vec<String>, bool)> = None;
    let flush = |cur: &mut Option<(String, Vec<String>, bool)>, out: &mut Vec<(String, String)>| {
        if let Some((ts, lines, _)) = cur.take() {
            let body = lines.join("\n").trim().to_string();
            if !body.is_empty() {
                out.push((ts, body));
            }
        }
    };
    for line in text.lines() {
        if let Some((ts, content)) = header(line) {
            let raw_continuation = current.as_ref().is_some_and(|(_, _, raw)| *raw)
                && ["USER", "ASSISTANT", "SYSTEM", "TOOL"]
                    .iter()
                    .any(|r| content.starts_with(r));
            if raw_continuation {
                if let Some((_, lines, _)) = current.as_mut() {
                    lines.push(line.to_string());
                }
                continue;
            }
            flush(&mut current, &mut out);
            let raw = content.starts_with("[RAW]");
            current = Some((ts, vec![content], raw));
            continue;
        }
        match current.as_mut() {
            Some((_, lines, _)) => lines.push(line.to_string()),
            None if line.trim().is_empty() => {}
            None => current = Some((fallback.to_string(), vec![line.to_string()], false)),
        }
    }
    flush(&mut current, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_row(files: &MemoryFiles) -> Value {
        let text = std::fs::read_to_string(files.history_path()).unwrap();
        serde_json::from_str(text.lines().last().unwrap()).unwrap()
    }

    #[test]
    fn cursors_increase_skip_malformed_rows_and_survive_a_missing_cursor_file() {
        let ws = tempfile::tempdir().unwrap();
        let files = MemoryFiles::new(ws.path());
        assert_eq!(files.append("first", None).unwrap(), 1);
        assert_eq!(files.append("second", Some("cli:direct")).unwrap(), 2);
        std::fs::remove_file(ws.path().join("memory/.cursor")).unwrap();
        // Malformed rows and invalid cursors are skipped; a row cut by a crash is closed.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(files.history_path())
            .unwrap();
        write!(
            f,
            "not json\n{{\"cursor\": true, \"content\": \"b\"}}\n{{\"cursor\": -4, \"content\": \"n\"}}\n{{\"cursor\": 2"
        )
        .unwrap();
        assert_eq!(files.append("<think>hm</think>third", None).unwrap(), 3);
        let valid = files.entries_after(0);
        assert_eq!(valid.len(), 3);
        assert_eq!(valid[1].session_key.as_deref(), Some("cli:direct"));
        assert_eq!(valid[2].content, "third");
        assert_eq!(files.entries_after(2).len(), 1);
        let row = last_row(&files);
        let keys: Vec<&String> = row.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["content", "cursor", "timestamp"],
            "upstream's fields"
        );
        assert_eq!(row["timestamp"].as_str().unwrap().len(), 16);
        let huge = "y".repeat(MAX_ENTRY_CHARS + 10);
        files.append(&huge, None).unwrap();
        assert_eq!(
            files.entries_after(3)[0].content.chars().count(),
            MAX_ENTRY_CHARS
        );
    }

    #[test]
    fn concurrent_writers_never_share_a_cursor() {
        let ws = tempfile::tempdir().unwrap();
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let files = MemoryFiles::new(ws.path());
                std::thread::spawn(move || files.append(&format!("e{i}"), None).unwrap())
            })
            .collect();
        let mut cursors: Vec<i64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        cursors.sort();
        assert_eq!(cursors, (1..=8).collect::<Vec<_>>());
    }

    #[test]
    fn compaction_keeps_the_newest_and_never_drops_what_dream_has_not_read() {
        let ws = tempfile::tempdir().unwrap();
        let files = MemoryFiles::new(ws.path());
        for i in 1..=12 {
            files.append(&format!("e{i}"), None).unwrap();
        }
        files.set_dream_cursor(10).unwrap();
        assert_eq!(files.compact(5).unwrap(), 7);
        let kept: Vec<i64> = files.entries_after(0).iter().map(|e| e.cursor).collect();
        assert_eq!(kept, (8..=12).collect::<Vec<_>>());
        files.set_dream_cursor(0).unwrap();
        assert_eq!(files.compact(2).unwrap(), 0, "all 5 are unread by Dream");
        assert_eq!(files.entries_after(0).len(), 5);
        assert_eq!(files.append("next", None).unwrap(), 13);
    }

    #[test]
    fn legacy_history_md_is_migrated_once_with_both_cursors() {
        let ws = tempfile::tempdir().unwrap();
        let dir = ws.path().join("memory");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("HISTORY.md"),
            "intro line\n\n[2026-01-01 10:00] User asked about tea.\nMore detail.\n\n\
             [2026-01-02 11:30] [RAW] 2 messages\n[2026-01-02 11:29] USER: hi\n\
             [2026-01-02 11:29] ASSISTANT: hello\n",
        )
        .unwrap();
        std::fs::write(dir.join("HISTORY.md.bak"), "older backup").unwrap();
        let files = MemoryFiles::new(ws.path());
        assert_eq!(files.migrate_legacy().unwrap(), 3);
        let entries = files.entries_after(0);
        assert_eq!(entries[0].content, "intro line");
        assert_eq!(entries[1].timestamp, "2026-01-01 10:00");
        assert_eq!(entries[1].content, "User asked about tea.\nMore detail.");
        assert!(entries[2].content.starts_with("[RAW] 2 messages\n"));
        assert!(entries[2].content.ends_with("ASSISTANT: hello"));
        assert_eq!(files.dream_cursor(), 3);
        assert!(dir.join("HISTORY.md.bak.1").is_file() && !dir.join("HISTORY.md").exists());
        assert_eq!(files.migrate_legacy().unwrap(), 0, "only once");
        assert_eq!(files.append("new", None).unwrap(), 4);
    }

    #[test]
    fn a_legacy_history_md_is_migrated_when_only_read() {
        let ws = tempfile::tempdir().unwrap();
        let dir = ws.path().join("memory");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("HISTORY.md"),
            "[2026-01-01 10:00] Tea.\n\n[2026-01-02 10:00] Coffee.\n",
        )
        .unwrap();
        let files = MemoryFiles::new(ws.path());
        assert_eq!(
            files.dream_cursor(),
            2,
            "migrated: both cursors at the last entry"
        );
        let entries = files.entries_after(0);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].content, "Coffee.");
        assert!(dir.join("HISTORY.md.bak").is_file() && !dir.join("HISTORY.md").exists());
        assert_eq!(files.entries_after(0).len(), 2, "once");
    }

    #[test]
    fn a_chunk_archived_again_after_a_crash_is_appended_once() {
        let ws = tempfile::tempdir().unwrap();
        let files = MemoryFiles::new(ws.path());
        assert_eq!(
            files.append_once("summary", Some("cli:a"), "c1").unwrap(),
            (1, true)
        );
        files.append("other session", Some("cli:b")).unwrap();
        // The redelivered job re-summarises the chunk, maybe in other words: still one row.
        assert_eq!(
            files
                .append_once("summary, reworded", Some("cli:a"), "c1")
                .unwrap(),
            (1, false)
        );
        assert_eq!(
            files.append_once("next", Some("cli:a"), "c2").unwrap(),
            (3, true)
        );
        let rows = files.entries_after(0);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].chunk_id.as_deref(), Some("c1"));
        // Compaction keeps the ids.
        files.set_dream_cursor(3).unwrap();
        files.compact(2).unwrap();
        assert_eq!(
            files.append_once("again", Some("cli:a"), "c2").unwrap(),
            (3, false)
        );
    }

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_no_temp_files() {
        let ws = tempfile::tempdir().unwrap();
        let path = ws.path().join("a/MEMORY.md");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let names: Vec<_> = std::fs::read_dir(ws.path().join("a")).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
}
