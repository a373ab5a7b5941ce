//! One iteration of the LLM/tool loop ([`super::run_with`]), in named steps: build the
//! request, run the tools, retry a blank reply, continue a truncated one, finish.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{
    EMPTY_FINAL_RESPONSE_MESSAGE, LLM_ERROR_MESSAGE, MAX_EMPTY_RETRIES, MAX_LENGTH_RECOVERIES,
    OnBudgetExhausted, Requester, Run, RunDeps, RunOptions, RunResult, RunSpec, StopReason,
    assistant_message, compact, is_blank, prompts, snip,
};
use crate::checkpoint::{Checkpoint, Phase};
use crate::hooks::RunSummary;
use crate::provider::{ChatResponse, Usage};

/// What an iteration decided.
pub(super) enum Step {
    /// Go on with the next iteration.
    Next,
    /// The turn has its answer (or its error).
    Done,
}

/// What the loop carries from one iteration to the next.
#[derive(Default)]
pub(super) struct Progress {
    /// Blank replies in a row.
    empty_retries: u32,
    /// Pieces of a reply cut by `finish_reason: length`, in order.
    pub(super) parts: Vec<String>,
}

/// A finish reason that ends the turn even with tool calls.
fn is_terminal(response: &ChatResponse) -> bool {
    matches!(
        response.finish_reason.as_str(),
        "error" | "length" | "refusal" | "content_filter"
    )
}

impl<'a> Run<'a> {
    pub(super) fn new(deps: RunDeps<'a>, spec: &'a RunSpec, messages: Vec<Value>) -> Self {
        let streaming = deps.hook.wants_streaming();
        let specs = deps.specs.specs();
        let mut run = Run {
            deps,
            spec,
            requester: Requester {
                model: deps.model,
                spec,
                hook: deps.hook,
                streaming,
            },
            definitions: deps.specs.definitions(),
            compacted: HashSet::new(),
            // The byte heuristic of the definitions as one JSON array.
            tool_tokens: deps.specs.definitions_bytes().div_ceil(4) as u64,
            offered: specs.iter().map(|s| s.name.clone()).collect(),
            concurrent: specs
                .iter()
                .filter(|s| s.read_only && !s.exclusive)
                .map(|s| s.name.clone())
                .collect(),
            lookups: Default::default(),
            initial: messages.len(),
            messages,
            result: RunResult::default(),
            injection_cycles: 0,
        };
        run.result.streamed = streaming;
        run
    }
}

impl Run<'_> {
    /// Runs iteration `iteration`: one model request and what its reply asks for.
    pub(super) async fn iterate(
        &mut self,
        iteration: u32,
        budget: u64,
        progress: &mut Progress,
    ) -> Step {
        let hook = self.deps.hook;
        let _ = hook.before_iteration(&self.iteration_ctx(iteration, None, Usage::default()));
        let Some((response, mut usage)) = self.request(budget).await else {
            return Step::Done;
        };
        let terminal = is_terminal(&response);
        if !response.tool_calls.is_empty() && !terminal {
            self.tools(iteration, &response).await;
            self.inject("after tools").await;
            progress.empty_retries = 0;
            progress.parts.clear();
            let _ = hook.after_iteration(&self.iteration_ctx(iteration, Some(&response), usage));
            return Step::Next;
        }
        let clean = hook.finalize_content(response.content.clone().unwrap_or_default());
        let (response, clean) = if !terminal && is_blank(&clean) {
            match self.blank(iteration, response, &mut usage, progress).await {
                Some(retried) => retried,
                None => return Step::Next,
            }
        } else {
            (response, clean)
        };
        let recover = !self.spec.capped_replies && progress.parts.len() < MAX_LENGTH_RECOVERIES;
        if response.finish_reason == "length" && recover {
            self.continue_truncated(iteration, &response, clean, usage, progress);
            return Step::Next;
        }
        if self.requester.streaming {
            let _ = hook.on_stream_end(false);
        }
        if response.finish_reason == "error" {
            self.model_error(clean);
        } else if is_blank(&clean) && progress.parts.is_empty() {
            self.empty_final();
        } else if let Step::Next = self.reply(iteration, &response, clean, progress).await {
            let _ = hook.after_iteration(&self.iteration_ctx(iteration, Some(&response), usage));
            return Step::Next;
        }
        let mut ctx = self.iteration_ctx(iteration, Some(&response), usage);
        ctx.final_content = Some(&self.result.content);
        ctx.stop_reason = Some(self.result.stop_reason);
        let _ = hook.after_iteration(&ctx);
        Step::Done
    }

    /// Fits the transcript to `budget` and asks the model; `None` when it still does not fit
    /// (the turn then answers the error).
    async fn request(&mut self, budget: u64) -> Option<(ChatResponse, Usage)> {
        let sent = compact::for_model(
            &self.messages,
            self.initial,
            budget,
            self.tool_tokens,
            &mut self.compacted,
        );
        let sent = snip::for_model(sent, budget, self.tool_tokens);
        if let Some(error) = snip::still_over(&sent, budget, self.tool_tokens) {
            drop(sent);
            self.unfit(error);
            return None;
        }
        let (response, cost) = self.requester.with_tools(&sent, self.definitions).await;
        drop(sent);
        self.charge(cost);
        self.answered(&response);
        Some((response, cost.usage))
    }

    /// A blank reply: `None` to retry the iteration, or after [`MAX_EMPTY_RETRIES`] the
    /// finalization request's reply and its cleaned content.
    async fn blank(
        &mut self,
        iteration: u32,
        response: ChatResponse,
        usage: &mut Usage,
        progress: &mut Progress,
    ) -> Option<(ChatResponse, String)> {
        let hook = self.deps.hook;
        progress.empty_retries += 1;
        if self.requester.streaming {
            let _ = hook.on_stream_end(false);
        }
        if progress.empty_retries < MAX_EMPTY_RETRIES {
            let empty_retries = progress.empty_retries;
            tracing::warn!(iteration, empty_retries, "empty response, retrying");
            let _ = hook.after_iteration(&self.iteration_ctx(iteration, Some(&response), *usage));
            return None;
        }
        tracing::warn!(
            iteration,
            "empty response after retries, attempting finalization"
        );
        let (retry, more) = self
            .requester
            .finalize(&self.messages, prompts::FINALIZATION_RETRY_PROMPT)
            .await;
        self.charge(more);
        self.answered(&retry);
        usage.add(&more.usage);
        let clean = hook.finalize_content(retry.content.clone().unwrap_or_default());
        Some((retry, clean))
    }

    /// A reply cut by `finish_reason: length`: keeps the piece and asks the model to go on.
    fn continue_truncated(
        &mut self,
        iteration: u32,
        response: &ChatResponse,
        clean: String,
        usage: Usage,
        progress: &mut Progress,
    ) {
        tracing::info!(
            iteration,
            recoveries = progress.parts.len() + 1,
            "output truncated, continuing"
        );
        self.messages
            .push(assistant_message(Some(&clean), response, &[]));
        self.messages.push(prompts::length_recovery_message(&clean));
        progress.parts.push(clean);
        let _ =
            self.deps
                .hook
                .after_iteration(&self.iteration_ctx(iteration, Some(response), usage));
    }

    /// `finish_reason: error`: the turn answers the model's text or the generic error.
    fn model_error(&mut self, clean: String) {
        let text = if is_blank(&clean) {
            LLM_ERROR_MESSAGE.to_string()
        } else {
            clean
        };
        self.result.stop_reason = StopReason::Error;
        self.result.error = Some(text.clone());
        self.result.content = text;
        let ends_with_reply = self.messages.len() > self.initial
            && self
                .messages
                .last()
                .is_some_and(|m| m["role"] == "assistant" && m.get("tool_calls").is_none());
        if !ends_with_reply {
            self.messages
                .push(json!({"role": "assistant", "content": prompts::MODEL_ERROR_PLACEHOLDER}));
        }
    }

    /// Still blank after the finalization retry.
    fn empty_final(&mut self) {
        self.result.stop_reason = StopReason::EmptyFinalResponse;
        self.result.error = Some(EMPTY_FINAL_RESPONSE_MESSAGE.into());
        self.result.content = EMPTY_FINAL_RESPONSE_MESSAGE.into();
        self.append_final(EMPTY_FINAL_RESPONSE_MESSAGE);
    }

    /// A usable reply: the turn completes with it, unless follow-up messages arrived
    /// ([`Step::Next`]: the model answers them too).
    async fn reply(
        &mut self,
        iteration: u32,
        response: &ChatResponse,
        clean: String,
        progress: &mut Progress,
    ) -> Step {
        let reply = assistant_message(Some(&clean), response, &[]);
        self.messages.push(reply.clone());
        if progress.parts.is_empty() && self.inject_or_continue().await {
            // The reply so far stays in the transcript; the model answers the follow-ups.
            self.emit(Checkpoint {
                phase: Phase::FinalResponse,
                iteration,
                model: self.spec.model.clone(),
                assistant_message: reply,
                completed_tool_results: Vec::new(),
                pending_tool_calls: Vec::new(),
            })
            .await;
            progress.empty_retries = 0;
            return Step::Next;
        }
        self.result.stop_reason = StopReason::Completed;
        self.result.content = if progress.parts.is_empty() {
            clean
        } else {
            format!("{}{clean}", progress.parts.concat())
                .trim()
                .to_string()
        };
        Step::Done
    }

    /// Every iteration used without an answer: ends as `options` says.
    pub(super) async fn out_of_iterations(&mut self, options: RunOptions, parts: &[String]) {
        match options.on_budget_exhausted {
            OnBudgetExhausted::Finalize => self.finish_budget_exhausted(parts, true).await,
            OnBudgetExhausted::Template => self.finish_budget_exhausted(parts, false).await,
            OnBudgetExhausted::Stop => self.result.stop_reason = StopReason::MaxIterations,
        }
    }

    /// Reports the end of the run to the hook and hands back its result.
    pub(super) fn into_result(mut self) -> RunResult {
        let hook = self.deps.hook;
        if let Some(error) = &self.result.error {
            let _ = hook.on_error(error);
        }
        let mut result = self.result;
        result.new_messages = self.messages.split_off(self.initial);
        let _ = hook.after_run(&RunSummary {
            content: &result.content,
            stop_reason: result.stop_reason,
            usage: result.usage,
            llm_calls: result.llm_calls,
            tools_used: &result.tools_used,
            tool_errors: result.tool_errors,
        });
        result
    }
}
