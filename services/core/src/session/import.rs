//! `nanobot sessions import`: upstream's JSONL session files into Redis.
//!
//! A file is a metadata line (`{"_type":"metadata","key",…,"last_consolidated"}`), an optional
//! `provider_state` line (provider-side state, not carried over) and one message row per line.
//! Rows are stored as they are (the fleet keeps nanobot's row format). Each session is written
//! by one fenced script under its lease ([`super::SessionWriter::import`]), so a process killed
//! mid-way leaves every session either imported whole or untouched, and running the import
//! again imports the rest: a session already in Redis is skipped unless forced.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value};

use nanobot_proto::keys;
use nanobot_runtime::lease::Leases;

use super::SessionStore;

/// One upstream session file, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// Session key, e.g. `telegram:123`.
    pub key: String,
    /// The file it was read from.
    pub source: PathBuf,
    /// ISO timestamps as upstream wrote them (now when absent).
    pub created_at: String,
    pub updated_at: String,
    /// Archive progress (`last_archived`, else `last_consolidated`, as upstream reads it),
    /// at most the number of rows.
    pub last_consolidated: usize,
    /// Session metadata, kept whole.
    pub metadata: Map<String, Value>,
    /// Message rows.
    pub messages: Vec<Value>,
    /// Lines that were not JSON objects (skipped, as upstream's repair does).
    pub corrupt_lines: usize,
}

/// Why a file could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file could not be read.
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Neither a metadata line nor the file name gives a session key.
    #[error("{path}: no session key (no metadata line with \"key\", and the file name is empty)")]
    NoKey { path: PathBuf },
    /// Writing the session failed.
    #[error("session {key}: {source}")]
    Store {
        key: String,
        #[source]
        source: super::SessionError,
    },
    /// A runner held the session's lease the whole time (a turn was running).
    #[error("session {key}: busy (a runner kept its lease); run the import again later")]
    Busy { key: String },
}

/// Where upstream keeps session files for `workspace`, in the order their copies are
/// preferred: HEAD's `<config dir>/sessions/<workspace id>/` (id from
/// `<workspace>/.nanobot/workspace-id`), then `<workspace>/sessions/` (v0.1.5, and HEAD before
/// migration), then the legacy `~/.nanobot/sessions/`.
pub fn source_dirs(workspace: &Path, config_dir: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(id) = std::fs::read_to_string(workspace.join(".nanobot").join("workspace-id")) {
        let id = id.trim();
        if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()) {
            dirs.push(config_dir.join("sessions").join(id));
        }
    }
    dirs.push(workspace.join("sessions"));
    if let Some(home) = home {
        dirs.push(home.join(".nanobot").join("sessions"));
    }
    dirs
}

/// Returns the `*.jsonl` files of `dirs` (missing directories are skipped), sorted per
/// directory, directories in the given order.
pub fn session_files(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut here: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl") && p.is_file())
            .collect();
        here.sort();
        files.extend(here);
    }
    files
}

/// The key a file name stands for when the file has no metadata key: HEAD's unpadded
/// base64url of the key, else v0.1.5's `key.replace(':', '_')` read back with its first `_`
/// as `:` (lossy, as upstream's own fallback).
fn key_from_file_name(path: &Path) -> Option<String> {
    let stem = path.file_stem()?.to_str()?;
    if stem.is_empty() {
        return None;
    }
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    if let Some(key) = b64
        .decode(stem)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|k| b64.encode(k) == stem && k.contains(':'))
    {
        return Some(key);
    }
    Some(stem.replacen('_', ":", 1))
}

/// Parses one upstream session file.
pub fn parse(path: &Path) -> Result<Imported, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ImportError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let now = super::now_iso();
    let mut out = Imported {
        key: String::new(),
        source: path.to_path_buf(),
        created_at: now.clone(),
        updated_at: now,
        last_consolidated: 0,
        metadata: Map::new(),
        messages: Vec::new(),
        corrupt_lines: 0,
    };
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let Ok(Value::Object(mut row)) = serde_json::from_str::<Value>(line) else {
            out.corrupt_lines += 1;
            continue;
        };
        match row.get("_type").and_then(Value::as_str) {
            Some("metadata") => {
                let text = |v: Option<Value>| match v {
                    Some(Value::String(s)) if !s.is_empty() => Some(s),
                    _ => None,
                };
                if let Some(key) = text(row.remove("key")) {
                    out.key = key;
                }
                if let Some(t) = text(row.remove("created_at")) {
                    out.created_at = t;
                }
                if let Some(t) = text(row.remove("updated_at")) {
                    out.updated_at = t;
                }
                if let Some(Value::Object(m)) = row.remove("metadata") {
                    out.metadata = m;
                }
                out.last_consolidated = ["last_archived", "last_consolidated"]
                    .iter()
                    .find_map(|f| row.get(*f).and_then(Value::as_u64))
                    .unwrap_or(0) as usize;
            }
            Some(_) => {}
            None => out.messages.push(Value::Object(row)),
        }
    }
    if out.key.is_empty() {
        out.key = key_from_file_name(path).ok_or_else(|| ImportError::NoKey {
            path: path.to_path_buf(),
        })?;
    }
    out.last_consolidated = out.last_consolidated.min(out.messages.len());
    Ok(out)
}

/// What happened to one session.
#[derive(Debug)]
pub enum Outcome {
    /// Written to Redis.
    Imported(Imported),
    /// Already in Redis (and not forced): left alone.
    Exists(Imported),
    /// Another file holds a newer copy of the same key (this one was not imported).
    Superseded(Imported),
    /// The file could not be imported.
    Failed(PathBuf, ImportError),
}

/// Imports `files` into `store`'s bot. Of several files with one key, the copy with the latest
/// `updated_at` is imported (the earlier file on a tie). Each session is written under its
/// lease (taken by `leases`, waited for up to `wait`), so it never races a runner's turn.
pub async fn import_files(
    store: &SessionStore,
    leases: &Leases,
    files: &[PathBuf],
    force: bool,
    wait: Duration,
) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    let mut chosen: Vec<Imported> = Vec::new();
    for file in files {
        match parse(file) {
            Err(e) => outcomes.push(Outcome::Failed(file.clone(), e)),
            Ok(s) => match chosen.iter_mut().find(|c| c.key == s.key) {
                Some(c) if s.updated_at > c.updated_at => {
                    outcomes.push(Outcome::Superseded(std::mem::replace(c, s)));
                }
                Some(_) => outcomes.push(Outcome::Superseded(s)),
                None => chosen.push(s),
            },
        }
    }
    for session in chosen {
        outcomes.push(import_one(store, leases, session, force, wait).await);
    }
    outcomes
}

async fn import_one(
    store: &SessionStore,
    leases: &Leases,
    session: Imported,
    force: bool,
    wait: Duration,
) -> Outcome {
    let key = session.key.clone();
    let Some(lease) = leases
        .acquire_within(
            &keys::session_lease(&store.bot, &key),
            &keys::session_fence(&store.bot, &key),
            wait,
        )
        .await
    else {
        return Outcome::Failed(session.source, ImportError::Busy { key });
    };
    let written = store.fenced(lease.fence()).import(&session, force).await;
    lease.release().await;
    match written {
        Ok(true) => Outcome::Imported(session),
        Ok(false) => Outcome::Exists(session),
        Err(source) => Outcome::Failed(session.source, ImportError::Store { key, source }),
    }
}

#[cfg(test)]
mod tests {
    use nanobot_runtime::testsuite::Redis;
    use serde_json::json;

    use super::*;

    fn write_session(dir: &Path, name: &str, lines: &[Value]) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(name);
        let text: Vec<String> = lines.iter().map(Value::to_string).collect();
        std::fs::write(&path, text.join("\n") + "\n").unwrap();
        path
    }

    fn upstream_session(key: &str, updated_at: &str, rows: usize) -> Vec<Value> {
        let mut lines = vec![
            json!({"_type": "metadata", "key": key, "created_at": "2026-04-01T10:00:00.000001",
                   "updated_at": updated_at, "metadata": {"title": "trip", "_last_summary": "s"},
                   "last_consolidated": 2}),
            json!({"_type": "provider_state", "state": {"kind": "x"}}),
        ];
        for i in 0..rows {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            lines.push(json!({"role": role, "content": format!("m{i}"),
                              "timestamp": "2026-04-01T10:00:00"}));
        }
        lines
    }

    #[test]
    fn a_session_file_keeps_its_key_rows_archive_progress_and_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let mut lines = upstream_session("telegram:42", "2026-04-02T09:00:00", 4);
        lines.insert(3, json!("not an object"));
        let path = write_session(dir.path(), "telegram_42.jsonl", &lines);
        let s = parse(&path).unwrap();
        assert_eq!(s.key, "telegram:42");
        assert_eq!(
            s.messages.len(),
            4,
            "metadata and provider_state are not rows"
        );
        assert_eq!(s.messages[0]["content"], "m0");
        assert_eq!(s.last_consolidated, 2);
        assert_eq!(s.metadata["title"], "trip");
        assert_eq!(s.created_at, "2026-04-01T10:00:00.000001");
        assert_eq!(s.updated_at, "2026-04-02T09:00:00");
        assert_eq!(s.corrupt_lines, 1);
    }

    #[test]
    fn without_a_metadata_key_the_file_name_gives_it() {
        let dir = tempfile::tempdir().unwrap();
        let row = json!({"role": "user", "content": "hi"});
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("api:my_chat");
        let head = write_session(
            dir.path(),
            &format!("{b64}.jsonl"),
            std::slice::from_ref(&row),
        );
        assert_eq!(parse(&head).unwrap().key, "api:my_chat");
        let old = write_session(dir.path(), "cli_direct.jsonl", &[row]);
        assert_eq!(parse(&old).unwrap().key, "cli:direct");
        // HEAD's newer field name wins over the old one, as upstream reads it.
        let both = write_session(
            dir.path(),
            "x.jsonl",
            &[
                json!({"_type": "metadata", "key": "k:1", "last_archived": 1, "last_consolidated": 0}),
                json!({"role": "user", "content": "a"}),
                json!({"role": "assistant", "content": "b"}),
            ],
        );
        assert_eq!(parse(&both).unwrap().last_consolidated, 1);
    }

    #[test]
    fn sources_are_head_runtime_dir_then_workspace_then_legacy_home() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        std::fs::create_dir_all(ws.join(".nanobot")).unwrap();
        std::fs::write(ws.join(".nanobot/workspace-id"), "0123abcd\n").unwrap();
        let cfg = root.path().join("cfg");
        let home = root.path().join("home");
        assert_eq!(
            source_dirs(&ws, &cfg, Some(&home)),
            vec![
                cfg.join("sessions/0123abcd"),
                ws.join("sessions"),
                home.join(".nanobot/sessions")
            ]
        );
    }

    #[tokio::test]
    async fn importing_twice_stores_each_session_once_and_force_replaces_it() {
        let redis = Redis::start().await.unwrap();
        let conn = redis.conn().await.unwrap();
        let store = SessionStore::new(conn.clone(), "b");
        let leases = Leases::new(conn, "import-test", Duration::from_secs(5));
        let dir = tempfile::tempdir().unwrap();
        let newer = dir.path().join("head");
        let older = dir.path().join("legacy");
        let files = vec![
            write_session(
                &newer,
                "a.jsonl",
                &upstream_session("cli:direct", "2026-04-03T00:00:00", 6),
            ),
            write_session(
                &older,
                "cli_direct.jsonl",
                &upstream_session("cli:direct", "2026-04-01T00:00:00", 2),
            ),
            write_session(
                &older,
                "tg.jsonl",
                &upstream_session("telegram:7", "2026-04-01T00:00:00", 4),
            ),
        ];
        let wait = Duration::from_secs(5);
        let first = import_files(&store, &leases, &files, false, wait).await;
        let imported: Vec<&str> = first
            .iter()
            .filter_map(|o| match o {
                Outcome::Imported(s) => Some(s.key.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(imported, ["cli:direct", "telegram:7"], "{first:?}");
        let s = store.load("cli:direct").await.unwrap();
        assert_eq!(s.messages.len(), 6, "the newest copy");
        assert_eq!(s.last_consolidated, 2);
        assert_eq!(s.metadata["title"], "trip");
        assert_eq!(s.created_at, "2026-04-01T10:00:00.000001");
        assert_eq!(store.list().await.unwrap(), ["cli:direct", "telegram:7"]);

        // Again: nothing written twice.
        let second = import_files(&store, &leases, &files, false, wait).await;
        assert!(
            second
                .iter()
                .all(|o| matches!(o, Outcome::Exists(_) | Outcome::Superseded(_))),
            "{second:?}"
        );
        assert_eq!(store.load("cli:direct").await.unwrap().messages.len(), 6);

        // A session the fleet already continued is not overwritten unless forced.
        let lease = leases
            .try_acquire(
                keys::session_lease("b", "telegram:7"),
                keys::session_fence("b", "telegram:7"),
            )
            .await
            .unwrap()
            .unwrap();
        store
            .fenced(lease.fence())
            .append("telegram:7", &[json!({"role": "user", "content": "new"})])
            .await
            .unwrap();
        lease.release().await;
        import_files(&store, &leases, &files[2..], false, wait).await;
        assert_eq!(store.load("telegram:7").await.unwrap().messages.len(), 5);
        let forced = import_files(&store, &leases, &files[2..], true, wait).await;
        assert!(matches!(forced[..], [Outcome::Imported(_)]), "{forced:?}");
        let s = store.load("telegram:7").await.unwrap();
        assert_eq!(s.messages.len(), 4, "replaced, not appended to");
        assert_eq!(s.last_consolidated, 2);
    }

    #[tokio::test]
    async fn a_session_whose_lease_a_runner_holds_is_not_written() {
        let redis = Redis::start().await.unwrap();
        let conn = redis.conn().await.unwrap();
        let store = SessionStore::new(conn.clone(), "b");
        let runner = Leases::new(conn.clone(), "runner", Duration::from_secs(30));
        let _turn = runner
            .try_acquire(
                keys::session_lease("b", "cli:busy"),
                keys::session_fence("b", "cli:busy"),
            )
            .await
            .unwrap()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = write_session(
            dir.path(),
            "busy.jsonl",
            &upstream_session("cli:busy", "2026-04-01T00:00:00", 2),
        );
        let importer = Leases::new(conn, "import", Duration::from_secs(5));
        let out = import_files(
            &store,
            &importer,
            &[file],
            false,
            Duration::from_millis(300),
        )
        .await;
        assert!(
            matches!(out[..], [Outcome::Failed(_, ImportError::Busy { .. })]),
            "{out:?}"
        );
        assert!(store.load("cli:busy").await.unwrap().messages.is_empty());
    }
}
