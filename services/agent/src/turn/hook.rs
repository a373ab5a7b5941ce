//! The turn's hook: publishes stream deltas, progress text and tool hints to the outbox, in
//! order, through one publisher task. Progress and tool hints are gated by
//! `channels.sendProgress` / `channels.sendToolHints`.

use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::mpsc;

use nanobot_core::hooks::{AgentHook, HookResult, RunSummary};
use nanobot_core::provider::{ChatResponse, ToolCall};
use nanobot_proto::OutboundKind;

use crate::base::outbox::Outbox;
use crate::base::outcomes::{self, Outcome};

/// What the turn publishes while it runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gates {
    /// Forward stream deltas (the caller asked for streaming).
    pub stream: bool,
    /// `channels.sendProgress`.
    pub progress: bool,
    /// `channels.sendToolHints`.
    pub tool_hints: bool,
}

/// Publishes a turn's interim output.
pub struct TurnHook {
    gates: Gates,
    /// The inbound id the turn answers (its outcome is reported under it).
    turn_id: String,
    tx: Mutex<Option<mpsc::UnboundedSender<(OutboundKind, String)>>>,
    task: Mutex<Option<tokio::task::JoinHandle<u32>>>,
}

impl std::fmt::Debug for TurnHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnHook")
            .field("gates", &self.gates)
            .finish_non_exhaustive()
    }
}

impl TurnHook {
    /// Starts the publisher task for `outbox`.
    pub fn start(outbox: Outbox, gates: Gates) -> Self {
        let turn_id = outbox.reply_to.clone();
        let (tx, mut rx) = mpsc::unbounded_channel::<(OutboundKind, String)>();
        let task = tokio::spawn(async move {
            let mut deltas = 0;
            while let Some((kind, content)) = rx.recv().await {
                let seq = if kind == OutboundKind::StreamDelta {
                    deltas += 1;
                    deltas
                } else {
                    0
                };
                if let Err(e) = outbox.send(kind, &content, seq).await {
                    tracing::warn!(error = %e, kind = kind.as_str_name(), "failed to publish interim output");
                }
            }
            deltas
        });
        Self {
            gates,
            turn_id,
            tx: Mutex::new(Some(tx)),
            task: Mutex::new(Some(task)),
        }
    }

    fn send(&self, kind: OutboundKind, content: String) {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = tx.as_ref() {
            let _ = tx.send((kind, content));
        }
    }

    /// Waits until everything queued is published; returns the number of stream deltas.
    pub async fn finish(&self) -> u32 {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        match task {
            Some(t) => t.await.unwrap_or(0),
            None => 0,
        }
    }
}

/// Returns upstream's tool hint `name("first argument")`, the argument cut at 40 chars.
pub fn tool_hint(call: &ToolCall) -> String {
    let arg = serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .and_then(|v| v.as_object().and_then(|o| o.values().next().cloned()))
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())
        })
        .unwrap_or_default();
    let short: String = arg.chars().take(40).collect();
    let ellipsis = if arg.chars().count() > 40 { "…" } else { "" };
    format!("{}(\"{short}{ellipsis}\")", call.name)
}

impl AgentHook for TurnHook {
    fn name(&self) -> &str {
        "turn-output"
    }
    fn wants_streaming(&self) -> bool {
        self.gates.stream
    }
    fn on_stream(&self, delta: &str) -> HookResult {
        if self.gates.stream && !delta.is_empty() {
            self.send(OutboundKind::StreamDelta, delta.to_string());
        }
        Ok(())
    }
    /// A segment streamed before tools run ends here (upstream's `_stream_end` with
    /// `_resuming`): channels close the streamed message and start a new one for the text
    /// after the tools. The turn's last segment is ended by the turn itself, after commit.
    fn on_stream_end(&self, resuming: bool) -> HookResult {
        if self.gates.stream && resuming {
            self.send(OutboundKind::StreamEnd, String::new());
        }
        Ok(())
    }
    /// A run that ended on a model error failed (its content is the error text).
    fn after_run(&self, summary: &RunSummary<'_>) -> HookResult {
        let outcome = if summary.stop_reason == nanobot_core::runner::StopReason::Error {
            Outcome::Failed(summary.content.to_string())
        } else {
            Outcome::Ok
        };
        outcomes::report(&self.turn_id, outcome);
        Ok(())
    }
    fn before_execute_tools(&self, response: &ChatResponse) -> HookResult {
        let text = response.content.as_deref().unwrap_or("").trim();
        if self.gates.progress && !self.gates.stream && !text.is_empty() {
            self.send(OutboundKind::Progress, text.to_string());
        }
        if self.gates.tool_hints {
            for call in &response.tool_calls {
                self.send(OutboundKind::ToolHint, tool_hint(call));
            }
        }
        Ok(())
    }
}
