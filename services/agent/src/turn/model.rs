//! The model's part of a turn, in named steps ([`Turn::model`]): the turn's input persisted
//! before the first LLM call (`pending_user_turn`), the prompt, the run with hooks, tools and
//! checkpoints, and what is left to commit. [`crate::turn`] shows the whole turn.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use nanobot_core::goal;
use nanobot_core::history::MAX_REPLAY_MESSAGES;
use nanobot_core::hooks::{AgentHook, CompositeHook, LoggingHook, UsageHook};
use nanobot_core::memory as core_memory;
use nanobot_core::resolve;
use nanobot_core::resolve::Runtime;
use nanobot_core::runner::{
    self, Injections, OnBudgetExhausted, RunDeps, RunOptions, RunResult, RunSpec, StopReason,
};
use nanobot_core::session::{Commit, Session, meta, now_iso};
use nanobot_core::subagent;
use nanobot_core::tool_results::Offload;
use nanobot_core::tools::{FileReads, Offered, ToolScope};

use crate::base::error::Result;
use crate::base::input::TurnInput;
use crate::turn::checkpoints::SessionCheckpoints;
use crate::turn::goal::{self as goal_turn, GoalInjections};
use crate::turn::goal_tools::GoalTools;
use crate::turn::hook::{Gates, TurnHook};
use crate::turn::message_tool::TurnTools;
use crate::turn::parts::{Measured, Reply, Turn};
use crate::turn::subagent::Spawner;

/// What the model's part of a turn carries from step to step.
struct Draft<'a> {
    /// The turn's model: its session's `/model` preset, else the bot's configured one.
    model: &'a Runtime,
    /// The session's replayable history (the prompt takes it).
    replay: Vec<Value>,
    /// Rows in it.
    replay_len: usize,
    /// The history the next turn replays: the replay, the turn's stored input, the run's rows.
    after: Vec<Value>,
    /// Rows of the session stored before the turn.
    stored_before: usize,
    /// The session's summary section.
    summary: Option<String>,
    /// Files the session's turns read.
    file_reads: FileReads,
    /// The goal's runtime guidance.
    goal_block: Option<String>,
    /// A user's turn (not an automation's, nor a subagent's announcement).
    user_turn: bool,
    /// A run that reaches its tool budget asks the model for a final answer.
    finalize: bool,
    /// The message's own interrupted turn continues.
    resume: bool,
    /// The session's metadata, with the turn's pending markers.
    metadata: Map<String, Value>,
    /// The row the turn's input is stored as; `None` when it is stored already, or not stored.
    row: Option<Value>,
    /// The system prompt the turn sent.
    system: String,
}

/// What the run left: its result, and what its hooks and tools saw.
struct Ran {
    result: RunResult,
    /// Stream deltas sent.
    streamed: u32,
    /// The `message` tool sent to the current chat.
    sent: bool,
    /// The tools the turn offered.
    offered: Arc<Offered>,
    /// The run reached its tool budget with a goal that continues in a new turn.
    continued: bool,
}

impl<'a> Turn<'a> {
    /// Runs the model over `session` (loaded and recovered): the turn's input is persisted
    /// first (with its pending markers), checkpoints are saved as the run goes, and the rest
    /// of the turn is returned as a [`Reply`] for [`Turn::commit`], with what the turn measured
    /// of the prompt. `resume`: the message's own interrupted turn continues.
    pub async fn model(&self, session: Session, resume: bool) -> Result<(Reply, Measured)> {
        let mut draft = self.draft(session, resume);
        self.persist_input(&mut draft).await?;
        let messages = self.prompt(&mut draft);
        let sink = SessionCheckpoints::new(
            self.sessions.clone(),
            &self.input.session_key,
            std::mem::take(&mut draft.metadata),
            self.deps.cfg.agents.defaults.max_tool_result_chars,
            self.follow_ups,
        );
        let ran = self.run_model(&draft, messages, &sink).await;
        self.finish_run(draft, ran, &sink).await
    }

    /// Reads what the turn needs from `session`, writing nothing.
    fn draft(&self, session: Session, resume: bool) -> Draft<'a> {
        let input = self.input;
        let model = self.bot.models.for_session(&session.metadata);
        // 0.3.5 replays with no row cap (`MAX_REPLAY_MESSAGES`) within a token budget.
        let mut replay = session.replay_within(
            MAX_REPLAY_MESSAGES,
            core_memory::budget::Budget::replay_tokens(
                model.context_window_tokens,
                model.max_tokens,
            ),
        );
        // A user turn whose budget runs out with a goal that may continue skips the finalization
        // request (upstream `should_finalize_on_max_iterations`, decided as the turn starts).
        let user_turn = !input.in_cron && input.announced.is_none();
        let finalize = !(user_turn && goal::budget_continuation_available(&session.metadata));
        // An announcement is stored once per task (upstream de-duplicates by task id): a turn
        // redone after its row was stored does not store it again.
        let stored_announcement = input.announced.as_ref().is_some_and(|task| {
            session
                .messages
                .iter()
                .any(|m| subagent::is_result_row(m, task))
        });
        // Its row replayed last: the turn (resumed or redone) starts over from it, so the model
        // reads the announcement as the turn's input, never as a trailing assistant row.
        let announcement_last = stored_announcement
            && replay.last().is_some_and(|r| {
                r["role"] == "assistant" && r["content"] == input.content.as_str()
            });
        let resume = resume && !announcement_last;
        let after = replay.clone();
        if announcement_last {
            replay.pop();
        }
        // A goal continuation's text goes to the model only (upstream: not stored as input).
        let stored = stored_announcement || input.continuation;
        let summary = core_memory::summary_section(&session.metadata);
        let file_reads = FileReads::from_metadata(&session.metadata);
        let goal_block = goal::runtime_block(&session.metadata, input.goal_requested);
        let mut metadata = session.metadata;
        metadata.insert(meta::PENDING_USER_TURN.into(), json!(true));
        metadata.insert(meta::PENDING_TURN_ID.into(), json!(input.id));
        Draft {
            model,
            replay_len: replay.len() + usize::from(announcement_last),
            replay,
            after,
            stored_before: session.first_index + session.messages.len(),
            summary,
            file_reads,
            goal_block,
            user_turn,
            finalize,
            resume,
            row: (!resume && !stored).then(|| input_row(input)),
            metadata,
            system: String::new(),
        }
    }

    /// Persists the turn's input before the first LLM call (crash recovery), its pending
    /// markers in the same write: a retry after a failure in between would otherwise store the
    /// message twice. A resumed turn writes only the markers.
    async fn persist_input(&self, draft: &mut Draft<'_>) -> Result<()> {
        let key = &self.input.session_key;
        if draft.resume {
            // A redelivered message whose turn was interrupted: continue from its saved rows.
            self.sessions.set_metadata(key, &draft.metadata).await?;
            return Ok(());
        }
        if let Some(row) = &draft.row {
            draft.after.push(row.clone());
        }
        let first = Commit {
            rows: draft.row.take().into_iter().collect(),
            metadata: Some(draft.metadata.clone()),
            ..Default::default()
        };
        self.sessions.commit(key, &first).await?;
        Ok(())
    }

    /// The messages sent to the model: the system prompt, the replayed history and the turn's
    /// input (a resumed turn: its saved rows), with the session's summary.
    fn prompt(&self, draft: &mut Draft<'_>) -> Vec<Value> {
        let (context, input) = (&self.bot.context, self.input);
        let replay = std::mem::take(&mut draft.replay);
        let mut messages = if draft.resume {
            let mut messages = context.resumed_messages(replay, &input.channel);
            if let Some(block) = &draft.goal_block {
                goal_turn::append_to_last_user(&mut messages, block);
            }
            messages
        } else {
            context.messages_with(
                replay,
                &input.content,
                &input.media,
                &input.channel,
                draft.goal_block.take(),
            )
        };
        if let Some(section) = &draft.summary {
            nanobot_core::context::inject_summary(&mut messages, section);
        }
        draft.system = messages
            .first()
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        messages
    }

    /// Runs the model on `messages` with the turn's tools, hooks, checkpoints (`sink`) and
    /// follow-ups.
    async fn run_model(
        &self,
        draft: &Draft<'_>,
        messages: Vec<Value>,
        sink: &SessionCheckpoints<'_>,
    ) -> Ran {
        let Turn {
            deps,
            bot,
            input,
            outbox,
            ..
        } = *self;
        let offered = bot.tools.offered().await;
        let quiet = input.session_key == nanobot_core::heartbeat::SESSION;
        let tools = TurnTools::new(
            &bot.tools,
            outbox,
            &bot.spec.workspace,
            &bot.chat_channels,
            quiet,
        )
        .with_spawner(Spawner {
            deps,
            bot,
            input,
            outbox,
        })
        .with_goals(GoalTools::new(sink, input.goal_requested));
        let injections = GoalInjections {
            follow_ups: self.follow_ups,
            sink,
        };
        let gates = Gates {
            stream: input.stream,
            progress: deps.cfg.channels.send_progress,
            tool_hints: deps.cfg.channels.send_tool_hints,
        };
        let output = Arc::new(TurnHook::start(outbox.clone(), gates));
        let usage_hook = Arc::new(UsageHook::default());
        let hook = CompositeHook::new(vec![
            Arc::new(LoggingHook) as Arc<dyn AgentHook>,
            usage_hook.clone(),
            Arc::new(crate::turn::limits::UsageRecorder::new(
                deps.redis.clone(),
                &bot.spec.id,
                &draft.model.target.model,
            )),
            output.clone(),
        ]);
        let run_deps = RunDeps {
            model: &draft.model.provider,
            tools: &tools,
            specs: &offered,
            hook: &hook,
            checkpoints: Some(sink),
            injections: Some(&injections as &dyn Injections),
        };
        let options = RunOptions {
            on_budget_exhausted: if draft.finalize {
                OnBudgetExhausted::Finalize
            } else {
                OnBudgetExhausted::Template
            },
        };
        let mut result = runner::run_with(run_deps, self.run_spec(draft, messages), options).await;
        let continued = draft.user_turn
            && result.stop_reason == StopReason::MaxIterations
            && sink.edit(|m| goal::budget_continuation_available(m)).await;
        if continued {
            goal_turn::strip_terminal_reply(&mut result.new_messages, &result.content);
            result.content.clear();
        }
        let streamed = output.finish().await;
        log_usage(&result, &usage_hook);
        Ran {
            sent: tools.sent_to_current_chat(),
            result,
            streamed,
            offered,
            continued,
        }
    }

    /// What the run is asked: the model and its limits, the messages and the tools' scope.
    fn run_spec(&self, draft: &Draft<'_>, messages: Vec<Value>) -> RunSpec {
        let (cfg, input, model) = (&self.deps.cfg, self.input, draft.model);
        let d = &cfg.agents.defaults;
        RunSpec {
            messages,
            model: model.target.model.clone(),
            max_tokens: model.max_tokens,
            context_window_tokens: model.context_window_tokens,
            context_block_limit: d.context_block_limit,
            temperature: model.temperature,
            reasoning_effort: model.reasoning_effort.clone(),
            max_iterations: d.max_tool_iterations,
            llm_timeout: resolve::llm_timeout(cfg),
            capped_replies: model.target.caps_replies(),
            telemetry: runner::Telemetry::of(&model.target, cfg),
            scope: ToolScope {
                session_key: input.session_key.clone(),
                channel: input.channel.clone(),
                chat_id: input.chat_id.clone(),
                in_cron: input.in_cron,
                file_reads: draft.file_reads.clone(),
            },
            offload: Offload {
                workspace: Some(self.bot.spec.workspace.clone()),
                max_chars: d.max_tool_result_chars,
            },
        }
    }

    /// Ends the model's part: the run's rows and the session's metadata are made ready to
    /// commit, a goal that continues gets its continuation published, and the reply is chosen.
    async fn finish_run(
        &self,
        draft: Draft<'_>,
        ran: Ran,
        sink: &SessionCheckpoints<'_>,
    ) -> Result<(Reply, Measured)> {
        let Ran {
            result,
            streamed,
            sent,
            offered,
            continued,
        } = ran;
        let mut next = None;
        let (rows, metadata) = sink
            .finish(&result.new_messages, |m| {
                m.remove(meta::RUNTIME_CHECKPOINT);
                m.remove(meta::PENDING_USER_TURN);
                m.remove(meta::PENDING_TURN_ID);
                m.remove(meta::INJECTED_IDS);
                m.remove(meta::INJECTED_SEQ);
                draft.file_reads.write(m);
                meta::Usage {
                    prompt_tokens: result.usage.prompt_tokens,
                    completion_tokens: result.usage.completion_tokens,
                    cached_tokens: result.usage.cached_tokens,
                }
                .write(m);
                if continued {
                    next = Some((goal::budget_continuation(m), goal::count_continuation(m)));
                }
                goal::clear_rounds_if_inactive(m);
            })
            .await?;
        if let (Some((prompt, round)), Some(origin)) = (next, &self.input.message) {
            let continuation = goal_turn::continuation(origin, prompt, round);
            goal_turn::publish(&self.deps.js, &continuation).await?;
        }
        let mut after = draft.after;
        after.extend(result.new_messages.iter().cloned());
        let measured = Measured {
            stored: draft.stored_before + after.len() - draft.replay_len,
            replay: after,
            system: draft.system,
            tools: offered,
        };
        // The `message` tool already answered this chat: the final text is not sent again.
        let answered = sent && result.injected == 0;
        let reply = Reply {
            rows,
            metadata: Some(metadata),
            streamed,
            usage: Some(nanobot_proto::Usage {
                prompt_tokens: result.usage.prompt_tokens,
                completion_tokens: result.usage.completion_tokens,
                total_tokens: result.usage.total(),
            }),
            model: result.model.clone().unwrap_or_default(),
            ..if answered || continued {
                Reply::default()
            } else {
                Reply::text(&result.content)
            }
        };
        Ok((reply, measured))
    }
}

/// The row a turn's input is stored as: a user row, or for a subagent's announcement
/// upstream's assistant row tagged with its task.
fn input_row(input: &TurnInput) -> Value {
    match &input.announced {
        Some(task) => {
            let mut row = subagent::result_row(&input.content, task);
            row["timestamp"] = json!(now_iso());
            row
        }
        None => {
            let mut row = json!({"role": "user", "content": input.content, "timestamp": now_iso()});
            if !input.media.is_empty() {
                row["media"] = json!(input.media);
            }
            row
        }
    }
}

/// Logs how the run went, and records its tokens on the turn's span (each model call's are
/// on its own span too).
fn log_usage(result: &RunResult, usage_hook: &UsageHook) {
    let (usage, iterations) = usage_hook.totals();
    let (span, int) = (tracing::Span::current(), |n: u64| {
        i64::try_from(n).unwrap_or(i64::MAX)
    });
    span.record("gen_ai.usage.input_tokens", int(usage.prompt_tokens));
    span.record("gen_ai.usage.output_tokens", int(usage.completion_tokens));
    tracing::info!(
        stop_reason = %result.stop_reason,
        llm_calls = result.llm_calls,
        iterations,
        injected = result.injected,
        prompt_tokens = usage.prompt_tokens,
        completion_tokens = usage.completion_tokens,
        tool_errors = result.tool_errors,
        "turn finished"
    );
}
