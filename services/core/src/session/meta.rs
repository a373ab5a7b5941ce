//! Every key of a session's free-form metadata (the `metadata` JSON of the session hash), in
//! one place: the agent, the checkpoint code and memory name them only through these.

/// The in-flight turn state (upstream's `runtime_checkpoint`).
pub const RUNTIME_CHECKPOINT: &str = "runtime_checkpoint";
/// Set while a persisted user message awaits its reply (upstream's `pending_user_turn`).
pub const PENDING_USER_TURN: &str = "pending_user_turn";
/// The id of the message whose turn is pending (fleet extension: a redelivered message with
/// this id resumes its own turn instead of starting a new one).
pub const PENDING_TURN_ID: &str = "pending_turn_id";
/// Ids of follow-ups injected into the running turn and saved with it.
pub const INJECTED_IDS: &str = "_injected_ids";
/// Stream sequence of the last follow-up saved with the running turn.
pub const INJECTED_SEQ: &str = "_injected_seq";
/// The last turn's token usage (for `/status`), a [`Usage`].
pub const LAST_USAGE: &str = "last_usage";
/// The session's `/model` preset (upstream's `SESSION_MODEL_PRESET_METADATA_KEY`).
pub const MODEL_PRESET: &str = "_nanobot_model_preset";
/// The last archive summary (`{"text", "last_active"}`), written by memory, read into the
/// next turn's prompt and removed by `/new`.
pub const LAST_SUMMARY: &str = "_last_summary";

/// The session's `read_file` results (path, offset, limit, mtime, hash) for upstream's read
/// deduplication ([`crate::tools::file_reads`]).
pub const FILE_READS: &str = "file_reads";

/// The value of [`LAST_USAGE`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Usage {
    /// Prompt tokens of the turn.
    pub prompt_tokens: u64,
    /// Completion tokens of the turn.
    pub completion_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    pub cached_tokens: u64,
}

impl Usage {
    /// Reads it from session `metadata` (zeros when absent or malformed).
    pub fn read(metadata: &serde_json::Map<String, serde_json::Value>) -> Self {
        metadata
            .get(LAST_USAGE)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    }

    /// Writes it into session `metadata`.
    pub fn write(self, metadata: &mut serde_json::Map<String, serde_json::Value>) {
        if let Ok(v) = serde_json::to_value(self) {
            metadata.insert(LAST_USAGE.into(), v);
        }
    }
}
