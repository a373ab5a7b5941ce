//! Memory files: `memory/history.jsonl` (append-only, one `{"cursor","timestamp","content"}`
//! per line, cursors allocated under a file lock so several writers are safe), `.cursor`,
//! and the consolidation rules (user-aligned boundary, upstream's raw-archive format).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// Hard cap on one history entry (upstream).
pub const MAX_ENTRY_CHARS: usize = 64_000;
/// Cap of a raw archive entry (upstream).
pub const RAW_ARCHIVE_CHARS: usize = 16_000;

/// The memory directory of a workspace.
pub fn memory_dir(workspace: &Path) -> PathBuf {
    workspace.join("memory")
}

fn last_cursor(history: &str) -> i64 {
    history
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("cursor").and_then(Value::as_i64))
        .filter(|c| *c >= 0)
        .max()
        .unwrap_or(0)
}

/// Appends one entry to `history.jsonl` and returns its cursor. Safe across processes: the
/// cursor is allocated under an exclusive lock on `memory/.history.lock`.
pub fn append_history(
    workspace: &Path,
    content: &str,
    session_key: Option<&str>,
) -> std::io::Result<i64> {
    let dir = memory_dir(workspace);
    std::fs::create_dir_all(&dir)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".history.lock"))?;
    lock.lock()?;
    let path = dir.join("history.jsonl");
    let existing = std::fs::read_to_string(&path).unwrap_or_default();
    let stored: i64 = std::fs::read_to_string(dir.join(".cursor"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    let cursor = stored.max(last_cursor(&existing)) + 1;
    let content: String = content.chars().take(MAX_ENTRY_CHARS).collect();
    let mut entry = json!({
        "cursor": cursor,
        "timestamp": chrono::Local::now().format("%Y-%m-%d %H:%M").to_string(),
        "content": content,
    });
    if let Some(key) = session_key {
        entry["session_key"] = json!(key);
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    writeln!(file, "{entry}")?;
    file.sync_data()?;
    std::fs::write(dir.join(".cursor"), cursor.to_string())?;
    lock.unlock()?;
    Ok(cursor)
}

/// Rough token estimate (UTF-8 bytes / 4), used when the provider gives none.
pub fn estimate_tokens(messages: &[Value]) -> usize {
    messages.iter().map(|m| m.to_string().len() / 4 + 4).sum()
}

/// Returns the index (a `user` row after `from`) up to which messages are archived so that at
/// least `needed` tokens are removed; the last candidate when none removes enough.
pub fn pick_boundary(messages: &[Value], from: usize, needed: usize) -> Option<usize> {
    let mut removed = 0;
    let mut last = None;
    for (i, m) in messages.iter().enumerate().skip(from) {
        if i > from && m.get("role").and_then(Value::as_str) == Some("user") {
            last = Some(i);
            if removed >= needed {
                return Some(i);
            }
        }
        removed += m.to_string().len() / 4 + 4;
    }
    last
}

/// Formats messages as upstream's raw archive: `[RAW] {n} messages` then one
/// `[YYYY-MM-DDTHH:MM] ROLE[ [tools: a, b]]: content` line each, capped at 16 000 chars.
pub fn raw_archive(messages: &[Value]) -> String {
    let mut out = format!("[RAW] {} messages\n", messages.len());
    for m in messages {
        let ts: String = m
            .get("timestamp")
            .and_then(Value::as_str)
            .unwrap_or("")
            .chars()
            .take(16)
            .collect();
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_uppercase();
        let tools: Vec<&str> = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| c.pointer("/function/name").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        let tools = if tools.is_empty() {
            String::new()
        } else {
            format!(" [tools: {}]", tools.join(", "))
        };
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        out.push_str(&format!("[{ts}] {role}{tools}: {content}\n"));
    }
    out.chars().take(RAW_ARCHIVE_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_increase_and_survive_a_missing_cursor_file() {
        let ws = tempfile::tempdir().unwrap();
        assert_eq!(append_history(ws.path(), "first", None).unwrap(), 1);
        assert_eq!(
            append_history(ws.path(), "second", Some("cli:direct")).unwrap(),
            2
        );
        std::fs::remove_file(ws.path().join("memory/.cursor")).unwrap();
        assert_eq!(append_history(ws.path(), "third", None).unwrap(), 3);
        let text = std::fs::read_to_string(ws.path().join("memory/history.jsonl")).unwrap();
        let rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows[1]["session_key"], "cli:direct");
        assert_eq!(rows[2]["content"], "third");
    }

    #[test]
    fn concurrent_writers_never_share_a_cursor() {
        let ws = tempfile::tempdir().unwrap();
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let p = ws.path().to_path_buf();
                std::thread::spawn(move || append_history(&p, &format!("e{i}"), None).unwrap())
            })
            .collect();
        let mut cursors: Vec<i64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        cursors.sort();
        assert_eq!(cursors, (1..=8).collect::<Vec<_>>());
    }

    #[test]
    fn boundary_is_user_aligned_and_raw_archive_matches_upstream_format() {
        let msgs = vec![
            json!({"role": "user", "content": "a".repeat(400), "timestamp": "2026-01-01T10:00:00"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "exec"}}], "timestamp": "2026-01-01T10:00:05"}),
            json!({"role": "tool", "content": "ok"}),
            json!({"role": "user", "content": "b"}),
            json!({"role": "assistant", "content": "c"}),
            json!({"role": "user", "content": "d"}),
        ];
        assert_eq!(pick_boundary(&msgs, 0, 50), Some(3));
        assert_eq!(pick_boundary(&msgs, 0, 100_000), Some(5));
        assert_eq!(pick_boundary(&msgs[..2], 0, 1), None);
        let raw = raw_archive(&msgs[..2]);
        assert!(raw.starts_with("[RAW] 2 messages\n[2026-01-01T10:00] USER: aaa"));
        assert!(
            raw.contains("[2026-01-01T10:00] ASSISTANT [tools: exec]: \n"),
            "{raw}"
        );
    }
}
