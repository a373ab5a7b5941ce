//! The model's part of a turn: the user message persisted before the first LLM call
//! (`pending_user_turn`), the prompt, the run with hooks and checkpoints, and what is left to
//! commit. [`crate::turn`] shows the whole turn.

use std::sync::Arc;

use serde_json::{Value, json};

use nanobot_core::goal;
use nanobot_core::history::MAX_REPLAY_MESSAGES;
use nanobot_core::hooks::{AgentHook, CompositeHook, LoggingHook, UsageHook};
use nanobot_core::memory as core_memory;
use nanobot_core::resolve;
use nanobot_core::runner::{
    self, Injections, OnBudgetExhausted, RunDeps, RunOptions, RunSpec, StopReason,
};
use nanobot_core::session::{Commit, Session, meta, now_iso};
use nanobot_core::subagent;
use nanobot_core::tool_results::Offload;
use nanobot_core::tools::{FileReads, ToolScope};

use crate::turn::checkpoints::SessionCheckpoints;
use crate::turn::goal::{self as goal_turn, GoalInjections};
use crate::turn::goal_tools::GoalTools;
use crate::turn::hook::{Gates, TurnHook};
use crate::turn::message_tool::TurnTools;
use crate::turn::parts::{Measured, Reply, Turn};
use crate::turn::subagent::Spawner;

/// Runs the model over `session` (loaded and recovered) and `input`: the user message is
/// persisted first (with its pending markers), checkpoints are saved as the run goes, and the
/// rest of the turn is returned as a [`Reply`] for [`Turn::commit`], with what the
/// turn measured of the prompt. `resume`: the message's own interrupted turn continues.
impl Turn<'_> {
    pub async fn model(&self, session: Session, resume: bool) -> anyhow::Result<(Reply, Measured)> {
        let Turn {
            deps,
            bot,
            input,
            outbox,
            sessions,
            ..
        } = *self;
        let cfg = &deps.cfg;
        let d = &cfg.agents.defaults;
        // The turn's model: its session's `/model` preset, else the bot's configured one.
        let model = bot.models.for_session(&session.metadata);
        // 0.3.5 replays with no row cap (`MAX_REPLAY_MESSAGES`) within a token budget.
        let replay = session.replay_within(
            MAX_REPLAY_MESSAGES,
            core_memory::budget::Budget::replay_tokens(
                model.context_window_tokens,
                model.max_tokens,
            ),
        );
        let replay_len = replay.len();
        let summary = core_memory::summary_section(&session.metadata);
        let file_reads = FileReads::from_metadata(&session.metadata);
        let goal_block = goal::runtime_block(&session.metadata, input.goal_requested);
        // A user turn whose budget runs out with a goal that may continue skips the finalization
        // request (upstream `should_finalize_on_max_iterations`, decided as the turn starts).
        let user_turn = !input.in_cron && input.announced.is_none();
        let finalize = !(user_turn && goal::budget_continuation_available(&session.metadata));
        // The pending markers go with the user message in one write: a retry after a failure
        // in between would otherwise store the message twice.
        let stored_before = session.first_index + session.messages.len();
        let mut metadata = session.metadata;
        metadata.insert(meta::PENDING_USER_TURN.into(), json!(true));
        metadata.insert(meta::PENDING_TURN_ID.into(), json!(input.id));
        let mut after = replay.clone();
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
        let mut messages = if resume {
            // A redelivered message whose turn was interrupted: continue from its saved rows.
            sessions.set_metadata(&input.session_key, &metadata).await?;
            let mut messages = bot.context.resumed_messages(replay, &input.channel);
            if let Some(block) = &goal_block {
                goal_turn::append_to_last_user(&mut messages, block);
            }
            messages
        } else {
            // The message is persisted before the first LLM call (crash recovery): a user row, or
            // for a subagent's announcement upstream's assistant row tagged with its task.
            let row = match &input.announced {
                Some(task) => {
                    let mut row = subagent::result_row(&input.content, task);
                    row["timestamp"] = json!(now_iso());
                    row
                }
                None => {
                    let mut row =
                        json!({"role": "user", "content": input.content, "timestamp": now_iso()});
                    if !input.media.is_empty() {
                        row["media"] = json!(input.media);
                    }
                    row
                }
            };
            let mut replay = replay;
            if announcement_last {
                replay.pop();
            }
            // A goal continuation's text goes to the model only (upstream: not stored as input).
            let stored = stored_announcement || input.continuation;
            if !stored {
                after.push(row.clone());
            }
            let first = Commit {
                rows: if stored { Vec::new() } else { vec![row] },
                metadata: Some(metadata.clone()),
                ..Default::default()
            };
            sessions.commit(&input.session_key, &first).await?;
            bot.context.messages_with(
                replay,
                &input.content,
                &input.media,
                &input.channel,
                goal_block,
            )
        };
        if let Some(section) = &summary {
            nanobot_core::context::inject_summary(&mut messages, section);
        }
        let system = messages
            .first()
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let sink = SessionCheckpoints::new(
            sessions.clone(),
            &input.session_key,
            metadata,
            d.max_tool_result_chars,
            self.follow_ups,
        );

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
        .with_goals(GoalTools::new(&sink, input.goal_requested));
        let injections = GoalInjections {
            follow_ups: self.follow_ups,
            sink: &sink,
        };
        let gates = Gates {
            stream: input.stream,
            progress: cfg.channels.send_progress,
            tool_hints: cfg.channels.send_tool_hints,
        };
        let output = Arc::new(TurnHook::start(outbox.clone(), gates));
        let usage_hook = Arc::new(UsageHook::default());
        let hook = CompositeHook::new(vec![
            Arc::new(LoggingHook) as Arc<dyn AgentHook>,
            usage_hook.clone(),
            Arc::new(crate::turn::limits::UsageRecorder::new(
                deps.redis.clone(),
                &bot.spec.id,
                &model.target.model,
            )),
            output.clone(),
        ]);
        let deps_run = RunDeps {
            model: &model.provider,
            tools: &tools,
            specs: &offered,
            hook: &hook,
            checkpoints: Some(&sink),
            injections: Some(&injections as &dyn Injections),
        };
        let mut result = runner::run_with(
            deps_run,
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
                    file_reads: file_reads.clone(),
                },
                offload: Offload {
                    workspace: Some(bot.spec.workspace.clone()),
                    max_chars: d.max_tool_result_chars,
                },
            },
            RunOptions {
                on_budget_exhausted: if finalize {
                    OnBudgetExhausted::Finalize
                } else {
                    OnBudgetExhausted::Template
                },
            },
        )
        .await;
        let continued = user_turn
            && result.stop_reason == StopReason::MaxIterations
            && sink.edit(|m| goal::budget_continuation_available(m)).await;
        if continued {
            goal_turn::strip_terminal_reply(&mut result.new_messages, &result.content);
            result.content.clear();
        }
        let mut next = None;
        let streamed = output.finish().await;
        let (usage, iterations) = usage_hook.totals();
        // The turn's tokens on its `turn` span (each model call's are on its own span too).
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
        let (rows, metadata) = sink
            .finish(&result.new_messages, |m| {
                m.remove(meta::RUNTIME_CHECKPOINT);
                m.remove(meta::PENDING_USER_TURN);
                m.remove(meta::PENDING_TURN_ID);
                m.remove(meta::INJECTED_IDS);
                m.remove(meta::INJECTED_SEQ);
                file_reads.write(m);
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
        if let (Some((prompt, round)), Some(origin)) = (next, &input.message) {
            goal_turn::publish(&deps.js, &goal_turn::continuation(origin, prompt, round)).await?;
        }
        after.extend(result.new_messages.iter().cloned());
        let measured = Measured {
            stored: stored_before + after.len() - replay_len,
            replay: after,
            system,
            tools: offered,
        };
        // The `message` tool already answered this chat: the final text is not sent again.
        let answered = tools.sent_to_current_chat() && result.injected == 0;
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
