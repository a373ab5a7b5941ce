//! What the scripted server answers: the [`Reply`] builders and their resolution into a
//! concrete [`Turn`] that the OpenAI and Anthropic renderers share.

use std::time::Duration;

use serde_json::Value;

/// One scripted answer to one LLM request.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    kind: Kind,
    content: Option<String>,
    reasoning: Option<String>,
    tool_calls: Vec<ScriptedCall>,
    finish: Option<Finish>,
    delay: Option<Duration>,
    gate: Option<Gate>,
    pace: Option<Duration>,
    usage: Option<(u64, u64)>,
}

/// A barrier replies can wait at (see [`Reply::held_by`]): closed until [`Gate::open`], so a
/// test decides exactly when held turns may finish instead of guessing a delay.
#[derive(Debug, Clone)]
pub struct Gate(std::sync::Arc<tokio::sync::watch::Sender<bool>>);

impl Gate {
    /// Returns a closed gate.
    pub fn new() -> Self {
        Self(std::sync::Arc::new(tokio::sync::watch::channel(false).0))
    }

    /// Opens the gate: every reply waiting at it, and every later one, goes on.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    /// Waits until the gate is open.
    pub async fn passed(&self) {
        let mut open = self.0.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for Gate {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Message,
    Echo,
    Error {
        status: u16,
        body: String,
        retry_after: Option<u64>,
    },
}

/// A tool call of a scripted reply; the id is assigned by the server when not given.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedCall {
    /// Tool-call id; `None` gets `call_<n>`, numbered over the server's lifetime.
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Raw JSON text of the arguments (may be deliberately invalid).
    pub arguments: String,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Natural end (`stop` / `end_turn`).
    Stop,
    /// The model asked for tools (`tool_calls` / `tool_use`).
    ToolCalls,
    /// The token limit was hit (`length` / `max_tokens`).
    Length,
}

impl Finish {
    /// Returns the OpenAI `finish_reason`.
    pub fn openai(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::ToolCalls => "tool_calls",
            Self::Length => "length",
        }
    }

    /// Returns the Anthropic `stop_reason`.
    pub fn anthropic(self) -> &'static str {
        match self {
            Self::Stop => "end_turn",
            Self::ToolCalls => "tool_use",
            Self::Length => "max_tokens",
        }
    }
}

impl Reply {
    fn message(content: Option<String>) -> Self {
        Self {
            kind: Kind::Message,
            content,
            reasoning: None,
            tool_calls: Vec::new(),
            finish: None,
            delay: None,
            gate: None,
            pace: None,
            usage: None,
        }
    }

    /// Returns a plain assistant text reply (`finish_reason: stop`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::message(Some(text.into()))
    }

    /// Returns a reply whose text is `echo: <last user message text>` (the default fallback);
    /// a `[Runtime Context]...[/Runtime Context]` block in the message is left out.
    pub fn echo() -> Self {
        Self {
            kind: Kind::Echo,
            ..Self::message(None)
        }
    }

    /// Returns a reply asking for the given tool calls (ids `call_<n>` assigned by the server).
    pub fn tool_calls<I, N>(calls: I) -> Self
    where
        I: IntoIterator<Item = (N, Value)>,
        N: Into<String>,
    {
        let tool_calls = calls
            .into_iter()
            .map(|(name, args)| ScriptedCall {
                id: None,
                name: name.into(),
                arguments: args.to_string(),
            })
            .collect();
        Self {
            tool_calls,
            ..Self::message(None)
        }
    }

    /// Returns a reply with one tool call whose `arguments` text is `raw` verbatim.
    pub fn malformed_tool_args(name: impl Into<String>, raw: impl Into<String>) -> Self {
        let call = ScriptedCall {
            id: None,
            name: name.into(),
            arguments: raw.into(),
        };
        Self {
            tool_calls: vec![call],
            ..Self::message(None)
        }
    }

    /// Returns an HTTP error reply with `status` and `body` (sent as JSON when it parses).
    pub fn error(status: u16, body: impl std::fmt::Display) -> Self {
        let kind = Kind::Error {
            status,
            body: body.to_string(),
            retry_after: None,
        };
        Self {
            kind,
            ..Self::message(None)
        }
    }

    /// Returns a truncated reply: `text` with `finish_reason: length` (`max_tokens`).
    pub fn finish_length(text: impl Into<String>) -> Self {
        Self {
            finish: Some(Finish::Length),
            ..Self::message(Some(text.into()))
        }
    }

    /// Returns a reply with no content and no tool calls.
    pub fn empty() -> Self {
        Self::message(None)
    }

    /// Sets a `Retry-After` header (seconds) on an error reply.
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        if let Kind::Error { retry_after, .. } = &mut self.kind {
            *retry_after = Some(secs);
        }
        self
    }

    /// Waits `delay` before answering.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Waits at `gate` (after any delay) before answering; the request is recorded on arrival.
    pub fn held_by(mut self, gate: &Gate) -> Self {
        self.gate = Some(gate.clone());
        self
    }

    /// Returns the gate the reply waits at, if any.
    pub fn gate(&self) -> Option<&Gate> {
        self.gate.as_ref()
    }

    /// When streamed, waits `pace` before each stream event after the first (so a client sees
    /// the deltas arrive over time, as from a real model).
    pub fn with_stream_pace(mut self, pace: Duration) -> Self {
        self.pace = Some(pace);
        self
    }

    /// Adds reasoning (`reasoning_content`, or an Anthropic `thinking` block).
    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }

    /// Sets the text content (e.g. next to tool calls).
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.content = Some(text.into());
        self
    }

    /// Reports these token counts instead of the length-based estimate.
    pub fn with_usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some((prompt_tokens, completion_tokens));
        self
    }

    /// Returns the delay before answering, if any.
    pub fn delay(&self) -> Option<Duration> {
        self.delay
    }

    /// Resolves the reply against a request: the echo text, tool-call ids and usage.
    pub(crate) fn resolve(
        &self,
        last_user: &str,
        prompt_chars: usize,
        next_id: &mut dyn FnMut() -> String,
    ) -> Resolved {
        if let Kind::Error {
            status,
            body,
            retry_after,
        } = &self.kind
        {
            return Resolved::Error {
                status: *status,
                body: body.clone(),
                retry_after: *retry_after,
            };
        }
        let content = match self.kind {
            Kind::Echo => Some(format!("echo: {}", without_runtime_context(last_user))),
            _ => self.content.clone(),
        };
        let mut calls = Vec::with_capacity(self.tool_calls.len());
        for call in &self.tool_calls {
            let id = call.id.clone().unwrap_or_else(&mut *next_id);
            calls.push(ToolCall {
                id,
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        let finish = self.finish.unwrap_or(if calls.is_empty() {
            Finish::Stop
        } else {
            Finish::ToolCalls
        });
        let out_chars = content.as_deref().map_or(0, str::len)
            + self.reasoning.as_deref().map_or(0, str::len)
            + calls
                .iter()
                .map(|c| c.name.len() + c.arguments.len())
                .sum::<usize>();
        let estimate = (estimate_tokens(prompt_chars), estimate_tokens(out_chars));
        let (prompt_tokens, completion_tokens) = self.usage.unwrap_or(estimate);
        Resolved::Turn(Turn {
            content,
            reasoning: self.reasoning.clone(),
            tool_calls: calls,
            finish,
            prompt_tokens,
            completion_tokens,
            pace: self.pace,
        })
    }
}

/// Returns `text` without the agent's `[Runtime Context ...]...[/Runtime Context]` block, so
/// an echo repeats only what the user wrote.
pub(crate) fn without_runtime_context(text: &str) -> String {
    const OPEN: &str = "[Runtime Context";
    const CLOSE: &str = "[/Runtime Context]";
    let (Some(start), Some(end)) = (text.find(OPEN), text.find(CLOSE)) else {
        return text.to_string();
    };
    if end < start {
        return text.to_string();
    }
    let rest = format!("{}{}", &text[..start], &text[end + CLOSE.len()..]);
    rest.trim().to_string()
}

fn estimate_tokens(chars: usize) -> u64 {
    u64::try_from(chars / 4 + 1).unwrap_or(u64::MAX)
}

/// A reply made concrete for one request.
#[derive(Debug, Clone)]
pub(crate) enum Resolved {
    Turn(Turn),
    Error {
        status: u16,
        body: String,
        retry_after: Option<u64>,
    },
}

/// A concrete assistant turn, ready to render in either API's shape.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    pub(crate) content: Option<String>,
    pub(crate) reasoning: Option<String>,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(crate) finish: Finish,
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
    /// Wait between stream events.
    pub(crate) pace: Option<Duration>,
}

/// A tool call with its final id.
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) arguments: String,
}

/// Splits `text` into up to `parts` non-empty pieces on char boundaries (for stream deltas).
pub(crate) fn pieces(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(parts.max(1));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}
