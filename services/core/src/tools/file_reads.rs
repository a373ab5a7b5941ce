//! Upstream's read deduplication across runners: a session's `read_file` results (path,
//! offset, limit, mtime, hash) live in its metadata ([`meta::FILE_READS`]), travel with each
//! `read_file` call ([`ToolCallRequest::file_reads`]) and come back updated
//! ([`ToolCallResult::file_read`]), so the executor that takes the call, on whatever replica,
//! answers an unchanged file with `[File unchanged since last read: …]`.
//!
//! The reads of a turn are stored when it commits: a turn redone after a SIGKILL reads its
//! files in full again (never a stale "unchanged").

use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use nanobot_proto::FileRead;

use crate::session::meta;

/// The tool whose calls carry the session's reads.
pub const READ_FILE: &str = "read_file";
/// Most reads kept per session (the most recent, one per file).
pub const MAX_READS: usize = 64;

/// A session's file reads, shared by the calls of a run.
#[derive(Debug, Clone, Default)]
pub struct FileReads(Arc<Mutex<Vec<FileRead>>>);

impl FileReads {
    /// Returns the reads stored in session `metadata` (none when absent or malformed).
    pub fn from_metadata(metadata: &Map<String, Value>) -> Self {
        let reads = metadata
            .get(meta::FILE_READS)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| {
                Some(FileRead {
                    path: v.get("path")?.as_str()?.to_string(),
                    offset: u32::try_from(v.get("offset")?.as_u64()?).ok()?,
                    limit: u32::try_from(v.get("limit")?.as_u64()?).ok()?,
                    mtime_ns: v.get("mtime_ns")?.as_i64()?,
                    sha256: v.get("sha256")?.as_str()?.to_string(),
                })
            })
            .collect();
        Self(Arc::new(Mutex::new(reads)))
    }

    /// Writes the reads into session `metadata`.
    pub fn write(&self, metadata: &mut Map<String, Value>) {
        let reads: Vec<Value> = self
            .snapshot()
            .iter()
            .map(|r| {
                json!({"path": r.path, "offset": r.offset, "limit": r.limit,
                       "mtime_ns": r.mtime_ns, "sha256": r.sha256})
            })
            .collect();
        if reads.is_empty() {
            metadata.remove(meta::FILE_READS);
        } else {
            metadata.insert(meta::FILE_READS.into(), Value::Array(reads));
        }
    }

    /// Returns the reads, oldest first.
    pub fn snapshot(&self) -> Vec<FileRead> {
        self.0.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Records a read, replacing the file's earlier one and keeping the newest [`MAX_READS`].
    pub fn record(&self, read: FileRead) {
        let Ok(mut reads) = self.0.lock() else {
            return;
        };
        reads.retain(|r| r.path != read.path);
        reads.push(read);
        let excess = reads.len().saturating_sub(MAX_READS);
        reads.drain(..excess);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &str, sha: &str) -> FileRead {
        FileRead {
            path: path.into(),
            offset: 1,
            limit: 0,
            mtime_ns: 7,
            sha256: sha.into(),
        }
    }

    #[test]
    fn reads_round_trip_through_metadata_one_per_file_newest_kept() {
        let reads = FileReads::default();
        reads.record(read("/w/a", "1"));
        reads.record(read("/w/a", "2"));
        for i in 0..MAX_READS {
            reads.record(read(&format!("/w/f{i}"), "x"));
        }
        let mut metadata = Map::new();
        reads.write(&mut metadata);
        let back = FileReads::from_metadata(&metadata).snapshot();
        assert_eq!(back.len(), MAX_READS);
        assert!(
            back.iter().all(|r| r.path != "/w/a"),
            "the oldest file dropped"
        );
        assert_eq!(back.last().unwrap().path, format!("/w/f{}", MAX_READS - 1));
        FileReads::default().write(&mut metadata);
        assert!(!metadata.contains_key(meta::FILE_READS));
    }
}
