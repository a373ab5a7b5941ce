//! The agent runner loop (upstream `agent/runner.py`, reference §3): call the model, run its
//! tool calls through the executors with checkpoints around each batch, append results,
//! repeat. Blank replies are retried, then finalized without tools; replies cut at the token
//! limit are continued (up to 3 times) and joined, unless the provider caps replies on purpose
//! ([`RunSpec::capped_replies`], the local default model); model errors end the turn with the error
//! text and a transcript placeholder; an exhausted iteration budget gets one no-tools
//! finalization request, then upstream's template (with [`OnBudgetExhausted::Template`] the
//! template alone; with [`OnBudgetExhausted::Stop`], as upstream's subagents, no final text at
//! all).
//!
//! # Layout
//! - `prompts`: upstream's fixed texts.
//! - `request`: model requests, timeouts, malformed-tool-call recovery.
//! - `execute`: tool batches.
//! - `compact`: in-flight compaction of this turn's large results when a request would
//!   overflow the context window.
//! - `snip`: then, still over budget, the oldest history left out of the request.

pub mod compact;
mod execute;
pub mod prompts;
mod request;
pub mod snip;
mod step;
pub mod stop;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::checkpoint::{Checkpoint, CheckpointSink};
use crate::hooks::{AgentHook, IterationContext};
use crate::provider::{ChatModel, ChatResponse, ToolCall, Usage};
use crate::tools::{Offered, ToolExecutor, ToolScope};
pub use prompts::{EMPTY_FINAL_RESPONSE_MESSAGE, LLM_ERROR_MESSAGE, max_iterations_message};
pub use request::traced_chat;
use request::{Cost, Requester};
use step::{Progress, Step};
pub use stop::StopReason;

/// Blank replies before the finalization retry (upstream `_MAX_EMPTY_RETRIES`).
pub const MAX_EMPTY_RETRIES: u32 = 2;
/// Continuations after `finish_reason: length` (upstream `_MAX_LENGTH_RECOVERIES`).
pub const MAX_LENGTH_RECOVERIES: usize = 3;
/// Follow-up messages taken per drain (upstream `_MAX_INJECTIONS_PER_TURN`).
pub const MAX_INJECTIONS_PER_DRAIN: usize = 3;
/// Drains that may inject into one run (upstream `_MAX_INJECTION_CYCLES`).
pub const MAX_INJECTION_CYCLES: u32 = 5;

/// Follow-up user messages that arrived while the run is going (mid-turn injection).
#[async_trait::async_trait]
pub trait Injections: Send + Sync {
    /// Takes up to `max` waiting messages as `{"role": "user", "content": …}` rows.
    async fn drain(&self, max: usize) -> Vec<Value>;

    /// A user row asking the run to go on when the model answered and nothing else is
    /// waiting (upstream's `continuation_callback`: an active sustained goal); not counted as
    /// a follow-up.
    async fn continuation(&self) -> Option<Value> {
        None
    }
}

/// What a run needs.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    /// Messages so far (system, history, current user).
    pub messages: Vec<Value>,
    /// Model name.
    pub model: String,
    /// Completion cap.
    pub max_tokens: u32,
    /// `contextWindowTokens`: with it, this turn's large tool results are compacted, then the
    /// oldest history snipped, when a request would overflow (0: never).
    pub context_window_tokens: u32,
    /// `contextBlockLimit`: the input budget itself, in place of the one derived from the
    /// window (`None`: derived).
    pub context_block_limit: Option<u32>,
    /// Temperature.
    pub temperature: f64,
    /// `reasoning_effort`, when set.
    pub reasoning_effort: Option<String>,
    /// Iteration cap (`maxToolIterations`).
    pub max_iterations: u32,
    /// Wall timeout of one model request.
    pub llm_timeout: Option<Duration>,
    /// Who tool calls run for.
    pub scope: ToolScope,
    /// The provider caps replies on purpose (the local default model, whose proxy limits
    /// completions): a reply cut at the token limit is final, never continued.
    pub capped_replies: bool,
    /// How the run's LLM calls are traced and counted.
    pub telemetry: Telemetry,
    /// Where results over `maxToolResultChars` are saved (upstream §6.5).
    pub offload: crate::tool_results::Offload,
}

/// How a run's LLM calls are traced (OpenTelemetry GenAI spans) and counted (metrics).
#[derive(Debug, Clone, Default)]
pub struct Telemetry {
    /// Provider name (`gen_ai.provider.name`, the metrics' `provider` label).
    pub provider: String,
    /// Record message contents on spans (`telemetry.captureContent`).
    pub capture_content: bool,
}

impl Telemetry {
    /// Returns the telemetry of calls to `target` under `cfg`.
    pub fn of(target: &crate::resolve::Target, cfg: &nanobot_runtime::config::Config) -> Self {
        Self {
            provider: target.provider.clone(),
            capture_content: cfg.telemetry.capture_content,
        }
    }
}

/// How a run whose iterations ran out ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnBudgetExhausted {
    /// One no-tools finalization request, then upstream's template (the main loop).
    #[default]
    Finalize,
    /// No finalization pass and no final text (upstream's subagents, whose caller reports
    /// "Task completed but no final response was generated.").
    Stop,
    /// No finalization request, upstream's template as the final text (upstream's
    /// `finalize_on_max_iterations=False`: a turn whose sustained goal may continue).
    Template,
}

/// How a run behaves, beyond its [`RunSpec`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// How a run whose iterations ran out ends.
    pub on_budget_exhausted: OnBudgetExhausted,
}

/// What the run talks to.
#[derive(Clone, Copy)]
pub struct RunDeps<'a> {
    /// The model.
    pub model: &'a dyn ChatModel,
    /// The tool executors.
    pub tools: &'a dyn ToolExecutor,
    /// The tools offered to the model.
    pub specs: &'a Offered,
    /// Lifecycle hooks.
    pub hook: &'a dyn AgentHook,
    /// Where checkpoints go.
    pub checkpoints: Option<&'a dyn CheckpointSink>,
    /// Where follow-up messages come from.
    pub injections: Option<&'a dyn Injections>,
}

/// What a run produced.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    /// The final text for the user.
    pub content: String,
    /// Messages appended during the run (assistant and tool rows, final placeholders).
    pub new_messages: Vec<Value>,
    /// Why the run ended.
    pub stop_reason: StopReason,
    /// The error text, when the run ended with one.
    pub error: Option<String>,
    /// Accumulated usage.
    pub usage: Usage,
    /// Prompt tokens of the last request (the context size).
    pub context_tokens: u64,
    /// LLM requests made.
    pub llm_calls: u32,
    /// Tools that ran, in call order.
    pub tools_used: Vec<String>,
    /// Tool calls that failed.
    pub tool_errors: u32,
    /// Whether text was streamed.
    pub streamed: bool,
    /// Follow-up messages injected into the run.
    pub injected: usize,
    /// The model that gave the run's last answer: the requested one, or a fallback's when
    /// the primary failed (`None` until a request succeeds).
    pub model: Option<String>,
}

fn is_blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// Returns an assistant message with optional tool calls and reasoning.
fn assistant_message(content: Option<&str>, response: &ChatResponse, calls: &[ToolCall]) -> Value {
    let mut row = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        row["tool_calls"] = Value::Array(calls.iter().map(call_json).collect());
    }
    if let Some(r) = &response.reasoning_content {
        row["reasoning_content"] = json!(r);
    }
    if !response.thinking_blocks.is_empty() {
        row["thinking_blocks"] = Value::Array(response.thinking_blocks.clone());
    }
    row
}

fn call_json(c: &ToolCall) -> Value {
    json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
}

/// The loop's state.
struct Run<'a> {
    deps: RunDeps<'a>,
    spec: &'a RunSpec,
    requester: Requester<'a>,
    definitions: &'a [Value],
    /// Tools that may run concurrently with their neighbours (upstream `concurrency_safe`:
    /// read-only and not exclusive).
    concurrent: HashSet<String>,
    /// Names of the tools offered to the model (the only ones metric labels carry).
    offered: HashSet<String>,
    /// Call ids whose results were compacted in the model's copy ([`compact`]).
    compacted: HashSet<String>,
    /// Estimated tokens of the tool definitions.
    tool_tokens: u64,
    /// `web_fetch` URLs / `web_search` queries looked up this turn, with their counts.
    lookups: std::collections::HashMap<String, u32>,
    messages: Vec<Value>,
    initial: usize,
    result: RunResult,
    injection_cycles: u32,
}

impl Run<'_> {
    /// Appends waiting follow-up messages; returns whether any came.
    async fn inject(&mut self, phase: &str) -> bool {
        let Some(source) = self.deps.injections else {
            return false;
        };
        if self.injection_cycles >= MAX_INJECTION_CYCLES {
            return false;
        }
        let rows = source.drain(MAX_INJECTIONS_PER_DRAIN).await;
        if rows.is_empty() {
            return false;
        }
        self.injection_cycles += 1;
        self.result.injected += rows.len();
        tracing::info!(
            count = rows.len(),
            phase,
            cycle = self.injection_cycles,
            "injected follow-up messages"
        );
        self.messages.extend(rows);
        true
    }

    /// Appends the caller's continuation when no follow-up is waiting; returns whether one
    /// came (upstream `_try_drain_injections` with `allow_continuation`).
    async fn inject_or_continue(&mut self) -> bool {
        if self.inject("before the final reply").await {
            return true;
        }
        let Some(row) = (match self.deps.injections {
            Some(source) => source.continuation().await,
            None => None,
        }) else {
            return false;
        };
        tracing::info!("injected caller-requested continuation before the final reply");
        self.messages.push(row);
        true
    }

    /// Records which model answered (a fallback names itself on the response).
    fn answered(&mut self, response: &ChatResponse) {
        if response.finish_reason != "error" {
            let model = response
                .model
                .as_deref()
                .unwrap_or(&self.requester.spec.model);
            self.result.model = Some(model.to_string());
        }
    }

    fn charge(&mut self, cost: Cost) {
        self.result.usage.add(&cost.usage);
        self.result.llm_calls += cost.calls;
        if cost.usage.prompt_tokens > 0 {
            self.result.context_tokens = cost.usage.prompt_tokens;
        }
    }

    fn turn_messages(&self) -> &[Value] {
        &self.messages[self.initial..]
    }

    async fn emit(&self, checkpoint: Checkpoint) {
        if let Some(sink) = self.deps.checkpoints {
            sink.checkpoint(checkpoint, self.turn_messages()).await;
        }
    }

    fn iteration_ctx<'b>(
        &'b self,
        iteration: u32,
        response: Option<&'b ChatResponse>,
        usage: Usage,
    ) -> IterationContext<'b> {
        IterationContext {
            iteration,
            messages: &self.messages,
            response,
            usage,
            final_content: None,
            stop_reason: None,
        }
    }

    /// Appends `content` as the final assistant message unless the transcript already ends
    /// with it (upstream `_append_final_message`).
    fn append_final(&mut self, content: &str) {
        let in_turn = self.messages.len() > self.initial;
        if let Some(last) = self.messages.last_mut()
            && in_turn
            && last["role"] == "assistant"
            && last.get("tool_calls").is_none()
        {
            if last["content"] != content {
                *last = json!({"role": "assistant", "content": content});
            }
            return;
        }
        self.messages
            .push(json!({"role": "assistant", "content": content}));
    }

    /// Ends the run as 0.3.5 ends a turn whose request still does not fit after snipping
    /// (`ContextWindowExceededError`): no request is sent, no reply row is added, the user is
    /// answered [`prompts::TURN_ERROR_MESSAGE`].
    fn unfit(&mut self, error: String) {
        tracing::error!(%error, "request does not fit the context window");
        self.result.stop_reason = StopReason::Error;
        self.result.error = Some(error);
        self.result.content = prompts::TURN_ERROR_MESSAGE.into();
    }

    async fn finish_budget_exhausted(&mut self, parts: &[String], request: bool) {
        self.result.stop_reason = StopReason::MaxIterations;
        let terminal = if request {
            self.finalization().await
        } else {
            None
        };
        let terminal = terminal.unwrap_or_else(|| max_iterations_message(self.spec.max_iterations));
        self.result.content = if parts.is_empty() {
            terminal.clone()
        } else {
            format!("{}\n\n{}", parts.concat().trim_end(), terminal.trim_start())
                .trim()
                .to_string()
        };
        self.append_final(&terminal);
    }

    /// The no-tools finalization request's usable text, if any.
    async fn finalization(&mut self) -> Option<String> {
        let (response, cost) = self
            .requester
            .finalize(
                &self.messages,
                prompts::BUDGET_EXHAUSTED_FINALIZATION_PROMPT,
            )
            .await;
        self.charge(cost);
        self.answered(&response);
        let clean = self
            .deps
            .hook
            .finalize_content(response.content.clone().unwrap_or_default());
        let usable = response.finish_reason != "error"
            && response.tool_calls.is_empty()
            && !is_blank(&clean);
        usable.then_some(clean)
    }
}

/// Runs the LLM/tool loop with the default [`RunOptions`].
pub async fn run(deps: RunDeps<'_>, spec: RunSpec) -> RunResult {
    run_with(deps, spec, RunOptions::default()).await
}

/// Runs the LLM/tool loop.
pub async fn run_with(deps: RunDeps<'_>, mut spec: RunSpec, options: RunOptions) -> RunResult {
    let messages = std::mem::take(&mut spec.messages);
    let mut run = Run::new(deps, &spec, messages);
    let budget = compact::input_budget(
        spec.context_window_tokens,
        spec.max_tokens,
        spec.context_block_limit,
    );
    let _ = deps.hook.before_run(&run.messages);
    let mut progress = Progress::default();
    let mut finished = false;
    for iteration in 0..spec.max_iterations {
        if let Step::Done = run.iterate(iteration, budget, &mut progress).await {
            finished = true;
            break;
        }
    }
    if !finished {
        run.out_of_iterations(options, &progress.parts).await;
    }
    run.into_result()
}
