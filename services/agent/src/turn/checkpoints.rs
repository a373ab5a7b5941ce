//! Where a turn's checkpoints go: the Redis session. At `awaiting_tools` the checkpoint is
//! written to the session metadata; at `tools_completed` the batch's rows are appended to
//! the session first (so a crash later in the turn loses nothing) and the checkpoint then
//! records them as saved. At `final_response` (a reply followed by injected follow-ups) the
//! rows so far are saved and no checkpoint is kept: a resumed turn continues from them.
//! Whenever rows holding injected follow-ups are saved, the ids and last stream sequence of
//! those follow-ups are saved with them (one atomic write), so a resumed turn neither
//! injects them twice nor forgets to answer them.
//!
//! A save that fails has an unknown outcome: Redis may have run it and lost only the reply
//! (a restart or failover mid-call). The turn goes on (the model's work is not thrown away
//! for a checkpoint), but it saves nothing more: later saves and [`SessionCheckpoints::finish`]
//! fail, the turn is retried, and the retry resumes from what the session really holds, so the rows of
//! that save are stored once whichever way it went.

use serde_json::{Map, Value, json};
use tokio::sync::Mutex;

use nanobot_core::checkpoint::{Checkpoint, CheckpointSink, Phase};
use nanobot_core::history;
use nanobot_core::session::{Commit, SessionWriter, meta};

use crate::base::error::{Error, Result};
use crate::turn::follow_ups::{FollowUps, Taken};

/// Restores what a resumed turn had taken from its mailbox, from the session `metadata`.
pub fn taken_from(metadata: &Map<String, Value>) -> Option<Taken> {
    let seq = metadata.get(meta::INJECTED_SEQ)?.as_u64()?;
    let ids = metadata
        .get(meta::INJECTED_IDS)?
        .as_array()?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    Some(Taken { last_seq: seq, ids })
}

/// The session side of one turn.
#[derive(Debug)]
pub struct SessionCheckpoints<'a> {
    sessions: SessionWriter,
    key: String,
    max_tool_result_chars: usize,
    state: Mutex<State>,
    follow_ups: Option<&'a FollowUps>,
}

#[derive(Debug)]
struct State {
    metadata: Map<String, Value>,
    /// Turn messages already appended to the session.
    persisted: usize,
    /// Why a save failed, when one did: from then on the turn cannot commit.
    unknown: Option<String>,
}

impl<'a> SessionCheckpoints<'a> {
    /// Returns the sink of session `key` with its current `metadata`.
    pub fn new(
        sessions: SessionWriter,
        key: &str,
        metadata: Map<String, Value>,
        max_tool_result_chars: usize,
        follow_ups: Option<&'a FollowUps>,
    ) -> Self {
        Self {
            sessions,
            key: key.to_string(),
            max_tool_result_chars,
            state: Mutex::new(State {
                metadata,
                persisted: 0,
                unknown: None,
            }),
            follow_ups,
        }
    }

    /// Edits the turn's copy of the metadata with `f` without writing it: the change is saved
    /// with the turn's next save (its rows and metadata in one write) or its final commit.
    pub async fn edit<R>(&self, f: impl FnOnce(&mut Map<String, Value>) -> R) -> R {
        f(&mut self.state.lock().await.metadata)
    }

    /// Updates the metadata with `f` and writes it.
    pub async fn update(&self, f: impl FnOnce(&mut Map<String, Value>)) -> Result<()> {
        let mut state = self.state.lock().await;
        f(&mut state.metadata);
        self.sessions
            .set_metadata(&self.key, &state.metadata)
            .await?;
        Ok(())
    }

    /// Returns the rows of the turn messages not yet saved (for the turn's final commit) and
    /// the metadata after `f`, without writing either; fails when a save of this turn failed
    /// (its rows may or may not be stored: committing would store them twice or not at all).
    pub async fn finish(
        &self,
        turn_messages: &[Value],
        f: impl FnOnce(&mut Map<String, Value>),
    ) -> Result<(Vec<Value>, Map<String, Value>)> {
        let mut state = self.state.lock().await;
        if let Some(why) = &state.unknown {
            return Err(Error::Other(anyhow::anyhow!(
                "a save of this turn failed ({why}); the turn resumes from the session"
            )));
        }
        let rest = turn_messages.get(state.persisted..).unwrap_or(&[]);
        let rows = history::rows_to_save(rest, self.max_tool_result_chars);
        state.persisted = turn_messages.len();
        f(&mut state.metadata);
        Ok((rows, state.metadata.clone()))
    }

    /// Appends the turn messages not yet saved, with the follow-ups injected so far, in one
    /// write; returns how many rows were written. `clear_checkpoint` also drops the stored
    /// checkpoint.
    pub async fn save_rest(
        &self,
        turn_messages: &[Value],
        clear_checkpoint: bool,
    ) -> Result<usize> {
        let mut state = self.state.lock().await;
        if let Some(why) = &state.unknown {
            return Err(Error::Other(anyhow::anyhow!(
                "not saved after an earlier save failed ({why})"
            )));
        }
        let rest = turn_messages.get(state.persisted..).unwrap_or(&[]);
        let rows = history::rows_to_save(rest, self.max_tool_result_chars);
        let taken = self.follow_ups.map(FollowUps::taken).unwrap_or_default();
        if !taken.ids.is_empty() {
            state
                .metadata
                .insert(meta::INJECTED_IDS.into(), json!(taken.ids));
            state
                .metadata
                .insert(meta::INJECTED_SEQ.into(), json!(taken.last_seq));
        }
        if clear_checkpoint {
            state.metadata.remove(meta::RUNTIME_CHECKPOINT);
        }
        let commit = Commit {
            rows: rows.clone(),
            metadata: Some(state.metadata.clone()),
            ..Default::default()
        };
        if let Err(e) = self.sessions.commit(&self.key, &commit).await {
            state.unknown = Some(format!("{e:#}"));
            return Err(e.into());
        }
        state.persisted = turn_messages.len();
        Ok(rows.len())
    }
}

#[async_trait::async_trait]
impl CheckpointSink for SessionCheckpoints<'_> {
    async fn checkpoint(&self, mut checkpoint: Checkpoint, turn_messages: &[Value]) {
        if checkpoint.phase == Phase::FinalResponse {
            if let Err(e) = self.save_rest(turn_messages, true).await {
                tracing::warn!(session_id = %self.key, "failed to save the turn so far: {e:#}");
            }
            return;
        }
        if checkpoint.phase == Phase::ToolsCompleted {
            match self.save_rest(turn_messages, false).await {
                Ok(_) => {
                    // Record the results as stored, so recovery recognises them in history.
                    let results = &checkpoint.completed_tool_results;
                    let saved = history::rows_to_save(results, self.max_tool_result_chars);
                    checkpoint.completed_tool_results = saved
                        .into_iter()
                        .map(|mut r| {
                            r.as_object_mut().map(|o| o.remove("timestamp"));
                            r
                        })
                        .collect();
                }
                Err(e) => {
                    tracing::warn!(session_id = %self.key, "failed to save tool batch: {e:#}")
                }
            }
        }
        let outcome = self
            .update(|m| {
                m.insert(meta::RUNTIME_CHECKPOINT.into(), checkpoint.to_json());
            })
            .await;
        if let Err(e) = outcome {
            tracing::warn!(session_id = %self.key, "failed to write checkpoint: {e:#}");
        }
    }
}
