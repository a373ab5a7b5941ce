//! Subagent tasks → subagent runs. The task is acknowledged once its announcement is
//! published (or it was stopped): a runner dying before that leaves it to JetStream, which
//! redelivers it to another runner. The outcome is kept in Redis before the announcement, so
//! a redelivered task that already ran is only announced again (and the announcement, with
//! the same id, is dropped as a duplicate).

use async_nats::jetstream;
use prost::Message as _;
use tracing::Instrument as _;

use nanobot_proto::SubagentTask;
use nanobot_runtime::telemetry;

use super::{keep_alive, terminate};
use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::turn::subagent::{self, Slot};

/// Handles one subagent task.
pub async fn handle(deps: &Deps, msg: jetstream::Message) {
    let task = match SubagentTask::decode(msg.payload.clone()) {
        Ok(t) => t,
        Err(e) => return terminate(&msg, &format!("undecodable subagent task: {e}")).await,
    };
    let Some(bot) = deps.bot(&task.bot) else {
        return terminate(&msg, &format!("unknown bot {:?}", task.bot)).await;
    };
    let span = tracing::info_span!("subagent", task_id = %task.id, session_id = %task.origin_session_key, label = %task.label);
    telemetry::set_parent_in_conversation(&span, msg.headers.as_ref(), &task.origin_session_key);
    let work = async {
        let outcome = keep_alive(&msg, deps.ack_wait(), run(deps, &bot, &task)).await;
        super::settle(deps, &msg, outcome).await;
    };
    let scope = nanobot_runtime::metrics::Scope::new(&bot.spec.id, "subagent");
    nanobot_runtime::metrics::scoped(scope, work.instrument(span)).await;
}

async fn run(deps: &Deps, bot: &Bot, task: &SubagentTask) -> anyhow::Result<()> {
    let slot = Slot::hold(deps, &task.bot, &task.id);
    let (ok, result) = match subagent::kept(&deps.redis, task).await? {
        Some(kept) => kept,
        None => {
            let _permit = tokio::select! {
                _ = deps.cancel.cancelled() => anyhow::bail!("runner shutting down"),
                p = deps.turns.clone().acquire_owned() => p?,
            };
            // `/stop` in the origin session cancels it like the session's turns.
            let registration = deps.active.register(&task.bot, &task.origin_session_key);
            tracing::info!("subagent started");
            let (ok, result) = tokio::select! {
                r = subagent::execute(deps, bot, task) => r,
                _ = registration.token.cancelled() => {
                    tracing::info!("subagent stopped by /stop");
                    drop(slot);
                    return Ok(());
                }
                _ = deps.cancel.cancelled() => anyhow::bail!("runner shutting down mid-subagent"),
            };
            subagent::keep(&deps.redis, task, ok, &result).await?;
            (ok, result)
        }
    };
    subagent::announce(deps, task, ok, &result).await?;
    drop(slot);
    Ok(())
}
