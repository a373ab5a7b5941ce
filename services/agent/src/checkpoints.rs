//! Where a turn's checkpoints go: the Redis session. At `awaiting_tools` the checkpoint is
//! written to the session metadata; at `tools_completed` the batch's rows are appended to
//! the session first (so a crash later in the turn loses nothing) and the checkpoint then
//! records them as saved.

use serde_json::{Map, Value};
use tokio::sync::Mutex;

use nanobot_core::checkpoint::{CheckpointSink, RUNTIME_CHECKPOINT_KEY};
use nanobot_core::history;
use nanobot_core::session::SessionStore;

/// The session side of one turn.
#[derive(Debug)]
pub struct SessionCheckpoints {
    sessions: SessionStore,
    key: String,
    max_tool_result_chars: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    metadata: Map<String, Value>,
    /// Turn messages already appended to the session.
    persisted: usize,
}

impl SessionCheckpoints {
    /// Returns the sink of session `key` with its current `metadata`.
    pub fn new(
        sessions: SessionStore,
        key: &str,
        metadata: Map<String, Value>,
        max_tool_result_chars: usize,
    ) -> Self {
        Self {
            sessions,
            key: key.to_string(),
            max_tool_result_chars,
            state: Mutex::new(State {
                metadata,
                persisted: 0,
            }),
        }
    }

    /// Updates the metadata with `f` and writes it.
    pub async fn update(&self, f: impl FnOnce(&mut Map<String, Value>)) -> anyhow::Result<()> {
        let mut state = self.state.lock().await;
        f(&mut state.metadata);
        self.sessions
            .set_metadata(&self.key, &state.metadata)
            .await?;
        Ok(())
    }

    /// Returns the rows of the turn messages not yet saved (for the turn's final commit) and
    /// the metadata after `f`, without writing either.
    pub async fn finish(
        &self,
        turn_messages: &[Value],
        f: impl FnOnce(&mut Map<String, Value>),
    ) -> (Vec<Value>, Map<String, Value>) {
        let mut state = self.state.lock().await;
        let rest = turn_messages.get(state.persisted..).unwrap_or(&[]);
        let rows = history::rows_to_save(rest, self.max_tool_result_chars);
        state.persisted = turn_messages.len();
        f(&mut state.metadata);
        (rows, state.metadata.clone())
    }

    /// Appends the turn messages not yet saved; returns how many rows were written.
    pub async fn save_rest(&self, turn_messages: &[Value]) -> anyhow::Result<usize> {
        let mut state = self.state.lock().await;
        let rest = turn_messages.get(state.persisted..).unwrap_or(&[]);
        let rows = history::rows_to_save(rest, self.max_tool_result_chars);
        self.sessions.append(&self.key, &rows).await?;
        state.persisted = turn_messages.len();
        Ok(rows.len())
    }
}

#[async_trait::async_trait]
impl CheckpointSink for SessionCheckpoints {
    async fn checkpoint(&self, mut payload: Value, turn_messages: &[Value]) {
        if payload["phase"] == "tools_completed" {
            match self.save_rest(turn_messages).await {
                Ok(_) => {
                    // Record the results as stored, so recovery recognises them in history.
                    if let Some(results) = payload
                        .get_mut("completed_tool_results")
                        .and_then(Value::as_array_mut)
                    {
                        let saved = history::rows_to_save(results, self.max_tool_result_chars);
                        *results = saved
                            .into_iter()
                            .map(|mut r| {
                                r.as_object_mut().map(|o| o.remove("timestamp"));
                                r
                            })
                            .collect();
                    }
                }
                Err(e) => {
                    tracing::warn!(session_id = %self.key, "failed to save tool batch: {e:#}")
                }
            }
        }
        let outcome = self
            .update(|m| {
                m.insert(RUNTIME_CHECKPOINT_KEY.into(), payload);
            })
            .await;
        if let Err(e) = outcome {
            tracing::warn!(session_id = %self.key, "failed to write checkpoint: {e:#}");
        }
    }
}
