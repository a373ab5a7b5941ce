//! Runner lifecycle hooks (upstream `agent/hook.py`): `before_run`, `before_iteration`,
//! `on_stream`, `on_stream_end`, `before_execute_tools`, `after_execute_tool`,
//! `after_iteration`, `finalize_content`, `on_error`, `after_run`. [`CompositeHook`] fans
//! out in registration order and isolates a hook that errors or panics, so one broken hook
//! never breaks a turn. Built-ins: [`LoggingHook`] and [`UsageHook`] (tokens and cost).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::provider::{ChatResponse, ToolCall, Usage};
use crate::runner::stop::StopReason;
use crate::tools::ToolOutcome;

/// What a hook method returns; an error is logged and ignored.
pub type HookResult = anyhow::Result<()>;

/// The state of one runner iteration, as hooks see it.
#[derive(Debug, Clone, Copy)]
pub struct IterationContext<'a> {
    /// Iteration number, from 0.
    pub iteration: u32,
    /// The transcript so far.
    pub messages: &'a [Value],
    /// The model's response in this iteration (after it arrived).
    pub response: Option<&'a ChatResponse>,
    /// Usage of this iteration's requests.
    pub usage: Usage,
    /// The final text, when this iteration ended the run.
    pub final_content: Option<&'a str>,
    /// The stop reason, when this iteration ended the run.
    pub stop_reason: Option<StopReason>,
}

/// The outcome of a run, as hooks see it.
#[derive(Debug, Clone, Copy)]
pub struct RunSummary<'a> {
    /// Final text for the user.
    pub content: &'a str,
    /// Why the run ended.
    pub stop_reason: StopReason,
    /// Usage of the whole run.
    pub usage: Usage,
    /// LLM requests made.
    pub llm_calls: u32,
    /// Tools that ran, in order.
    pub tools_used: &'a [String],
    /// Tool calls that failed.
    pub tool_errors: u32,
}

/// A runner lifecycle observer. Every method has a no-op default.
pub trait AgentHook: Send + Sync {
    /// Name used in logs when the hook fails.
    fn name(&self) -> &str {
        "hook"
    }
    /// Whether the runner should stream and call [`on_stream`](Self::on_stream).
    fn wants_streaming(&self) -> bool {
        false
    }
    /// Before the first model call.
    fn before_run(&self, _messages: &[Value]) -> HookResult {
        Ok(())
    }
    /// Before each model call.
    fn before_iteration(&self, _ctx: &IterationContext<'_>) -> HookResult {
        Ok(())
    }
    /// Each streamed text delta.
    fn on_stream(&self, _delta: &str) -> HookResult {
        Ok(())
    }
    /// A streamed segment ended; `resuming` when more output follows (tools, retries).
    fn on_stream_end(&self, _resuming: bool) -> HookResult {
        Ok(())
    }
    /// Before a response's tool calls (`response.tool_calls`) run.
    fn before_execute_tools(&self, _response: &ChatResponse) -> HookResult {
        Ok(())
    }
    /// After one tool call finished.
    fn after_execute_tool(&self, _call: &ToolCall, _outcome: &ToolOutcome) -> HookResult {
        Ok(())
    }
    /// After each iteration.
    fn after_iteration(&self, _ctx: &IterationContext<'_>) -> HookResult {
        Ok(())
    }
    /// Post-processes final text.
    fn finalize_content(&self, content: String) -> String {
        content
    }
    /// The run ended with an error.
    fn on_error(&self, _error: &str) -> HookResult {
        Ok(())
    }
    /// After the run.
    fn after_run(&self, _summary: &RunSummary<'_>) -> HookResult {
        Ok(())
    }
}

/// A hook that does nothing.
#[derive(Debug, Default)]
pub struct NoopHook;

impl AgentHook for NoopHook {}

/// Fans out to hooks in order; a hook that errors or panics is logged and skipped.
#[derive(Default)]
pub struct CompositeHook {
    hooks: Vec<Arc<dyn AgentHook>>,
}

impl std::fmt::Debug for CompositeHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.hooks.iter().map(|h| h.name()).collect();
        f.debug_struct("CompositeHook")
            .field("hooks", &names)
            .finish()
    }
}

impl CompositeHook {
    /// Returns a composite of `hooks`.
    pub fn new(hooks: Vec<Arc<dyn AgentHook>>) -> Self {
        Self { hooks }
    }

    /// Adds a hook at the end.
    pub fn push(&mut self, hook: Arc<dyn AgentHook>) {
        self.hooks.push(hook);
    }

    fn each(&self, method: &str, f: impl Fn(&dyn AgentHook) -> HookResult) {
        for hook in &self.hooks {
            match catch_unwind(AssertUnwindSafe(|| f(hook.as_ref()))) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(hook = hook.name(), method, "hook failed: {e:#}"),
                Err(_) => tracing::warn!(hook = hook.name(), method, "hook panicked"),
            }
        }
    }
}

impl AgentHook for CompositeHook {
    fn name(&self) -> &str {
        "composite"
    }
    fn wants_streaming(&self) -> bool {
        self.hooks
            .iter()
            .any(|h| catch_unwind(AssertUnwindSafe(|| h.wants_streaming())).unwrap_or(false))
    }
    fn before_run(&self, messages: &[Value]) -> HookResult {
        self.each("before_run", |h| h.before_run(messages));
        Ok(())
    }
    fn before_iteration(&self, ctx: &IterationContext<'_>) -> HookResult {
        self.each("before_iteration", |h| h.before_iteration(ctx));
        Ok(())
    }
    fn on_stream(&self, delta: &str) -> HookResult {
        self.each("on_stream", |h| h.on_stream(delta));
        Ok(())
    }
    fn on_stream_end(&self, resuming: bool) -> HookResult {
        self.each("on_stream_end", |h| h.on_stream_end(resuming));
        Ok(())
    }
    fn before_execute_tools(&self, response: &ChatResponse) -> HookResult {
        self.each("before_execute_tools", |h| h.before_execute_tools(response));
        Ok(())
    }
    fn after_execute_tool(&self, call: &ToolCall, outcome: &ToolOutcome) -> HookResult {
        self.each("after_execute_tool", |h| {
            h.after_execute_tool(call, outcome)
        });
        Ok(())
    }
    fn after_iteration(&self, ctx: &IterationContext<'_>) -> HookResult {
        self.each("after_iteration", |h| h.after_iteration(ctx));
        Ok(())
    }
    fn finalize_content(&self, content: String) -> String {
        let mut content = content;
        for hook in &self.hooks {
            let input = content.clone();
            match catch_unwind(AssertUnwindSafe(|| hook.finalize_content(input))) {
                Ok(next) => content = next,
                Err(_) => tracing::warn!(
                    hook = hook.name(),
                    method = "finalize_content",
                    "hook panicked"
                ),
            }
        }
        content
    }
    fn on_error(&self, error: &str) -> HookResult {
        self.each("on_error", |h| h.on_error(error));
        Ok(())
    }
    fn after_run(&self, summary: &RunSummary<'_>) -> HookResult {
        self.each("after_run", |h| h.after_run(summary));
        Ok(())
    }
}

/// Logs tool calls and per-iteration usage.
#[derive(Debug, Default)]
pub struct LoggingHook;

impl AgentHook for LoggingHook {
    fn name(&self) -> &str {
        "logging"
    }
    fn before_execute_tools(&self, response: &ChatResponse) -> HookResult {
        for call in &response.tool_calls {
            let args: String = call.arguments.chars().take(200).collect();
            tracing::info!(tool = %call.name, call_id = %call.id, %args, "tool call");
        }
        Ok(())
    }
    fn after_iteration(&self, ctx: &IterationContext<'_>) -> HookResult {
        tracing::debug!(
            iteration = ctx.iteration,
            prompt_tokens = ctx.usage.prompt_tokens,
            completion_tokens = ctx.usage.completion_tokens,
            "iteration finished"
        );
        Ok(())
    }
    fn on_error(&self, error: &str) -> HookResult {
        tracing::warn!(%error, "run ended with an error");
        Ok(())
    }
}

/// Prices in US dollars per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prices {
    /// Per million uncached prompt tokens.
    pub input: f64,
    /// Per million cached prompt tokens.
    pub cached_input: f64,
    /// Per million completion tokens.
    pub output: f64,
}

/// Accumulates token usage and its cost over every iteration it sees.
#[derive(Debug, Default)]
pub struct UsageHook {
    prices: Prices,
    totals: Mutex<(Usage, u32)>,
}

impl UsageHook {
    /// Returns a hook pricing tokens at `prices`.
    pub fn new(prices: Prices) -> Self {
        Self {
            prices,
            totals: Mutex::default(),
        }
    }

    /// Returns the usage seen so far and the number of iterations.
    pub fn totals(&self) -> (Usage, u32) {
        *self.totals.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns the cost of the usage seen so far, in US dollars.
    pub fn cost(&self) -> f64 {
        let (u, _) = self.totals();
        let uncached = u.prompt_tokens.saturating_sub(u.cached_tokens) as f64;
        (uncached * self.prices.input
            + u.cached_tokens as f64 * self.prices.cached_input
            + u.completion_tokens as f64 * self.prices.output)
            / 1_000_000.0
    }
}

impl AgentHook for UsageHook {
    fn name(&self) -> &str {
        "usage"
    }
    fn after_iteration(&self, ctx: &IterationContext<'_>) -> HookResult {
        let mut totals = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        totals.0.add(&ctx.usage);
        totals.1 += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Failing;
    impl AgentHook for Failing {
        fn name(&self) -> &str {
            "failing"
        }
        fn on_stream(&self, _: &str) -> HookResult {
            anyhow::bail!("boom")
        }
        fn after_iteration(&self, _: &IterationContext<'_>) -> HookResult {
            panic!("hook bug")
        }
        fn finalize_content(&self, _: String) -> String {
            panic!("finalize bug")
        }
    }

    #[derive(Default)]
    struct Recording(Mutex<Vec<String>>);
    impl AgentHook for Recording {
        fn wants_streaming(&self) -> bool {
            true
        }
        fn on_stream(&self, d: &str) -> HookResult {
            self.0.lock().unwrap().push(d.to_string());
            Ok(())
        }
        fn finalize_content(&self, c: String) -> String {
            format!("{c}!")
        }
    }

    fn ctx(usage: Usage) -> IterationContext<'static> {
        IterationContext {
            iteration: 0,
            messages: &[],
            response: None,
            usage,
            final_content: None,
            stop_reason: None,
        }
    }

    #[test]
    fn a_failing_or_panicking_hook_does_not_stop_the_others() {
        let recording = Arc::new(Recording::default());
        let usage = Arc::new(UsageHook::default());
        let hook = CompositeHook::new(vec![Arc::new(Failing), recording.clone(), usage.clone()]);
        assert!(hook.wants_streaming());
        hook.on_stream("hi").unwrap();
        hook.after_iteration(&ctx(Usage {
            prompt_tokens: 3,
            completion_tokens: 2,
            cached_tokens: 0,
        }))
        .unwrap();
        assert_eq!(*recording.0.lock().unwrap(), vec!["hi"]);
        assert_eq!(
            usage.totals().0.total(),
            5,
            "hooks after the panicking one still ran"
        );
        assert_eq!(hook.finalize_content("done".into()), "done!");
    }

    #[test]
    fn usage_hook_prices_cached_and_uncached_tokens() {
        let hook = UsageHook::new(Prices {
            input: 3.0,
            cached_input: 0.3,
            output: 15.0,
        });
        let u = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 100_000,
            cached_tokens: 500_000,
        };
        hook.after_iteration(&ctx(u)).unwrap();
        hook.after_iteration(&ctx(u)).unwrap();
        assert_eq!(hook.totals().1, 2);
        assert!(
            (hook.cost() - 2.0 * (1.5 + 0.15 + 1.5)).abs() < 1e-9,
            "{}",
            hook.cost()
        );
    }
}
