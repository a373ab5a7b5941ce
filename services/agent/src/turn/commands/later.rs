//! Commands answered at once and reported on later, as upstream: `/dream` answers
//! `Dreaming...` and sends the run's report when the memory worker finishes it; `/compact`
//! answers upstream's "started" notice (`Compressing context…`) and sends its outcome
//! (`Context compacted.` / `Unable to compact context.`) when the archive job is done. The
//! report is a second final message to the same chat, with a delivery id made of the
//! command's message id, so a command redone after a crash reports once.

use std::time::{Duration, Instant};

use nanobot_proto::{ConsolidationResult, MemoryJobKind, OutboundKind};

use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::base::input::TurnInput;
use crate::base::outbox::{self, Outbox};
use crate::turn::memory_jobs::{self, Pending};

/// Upstream's acknowledgement of `/dream`.
pub const DREAMING: &str = "Dreaming...";
/// Upstream's compaction notices (`bus/outbound_events.py`).
pub const COMPACT_STARTED: &str = "Compressing context…";
/// The compaction finished.
pub const COMPACT_DONE: &str = "Context compacted.";
/// The compaction failed.
pub const COMPACT_FAILED: &str = "Unable to compact context.";

/// Returns the report of a `/dream` run from its `result` (`None`: none came in time),
/// `secs` after it was asked for.
pub fn dream_report(result: Option<ConsolidationResult>, secs: f64) -> String {
    match result {
        Some(r) if r.error.is_empty() => r.reply,
        Some(r) => format!("Dream failed after {secs:.1}s: {}", r.error),
        None => memory_jobs::NOT_ANSWERED.to_string(),
    }
}

/// Returns the outcome notice of a `/compact` from its job's `result`.
pub fn compact_report(result: Option<ConsolidationResult>, _secs: f64) -> String {
    match result {
        Some(r) if r.error.is_empty() => COMPACT_DONE.to_string(),
        Some(_) => COMPACT_FAILED.to_string(),
        None => memory_jobs::NOT_ANSWERED.to_string(),
    }
}

/// `/dream`: asks the memory workers for a run and answers [`DREAMING`]; the run's report
/// follows.
pub async fn dream(deps: &Deps, bot: &Bot, input: &TurnInput) -> anyhow::Result<String> {
    let request = memory_jobs::dream_request(
        bot,
        &input.id,
        &input.session_key,
        MemoryJobKind::Dream,
        None,
    );
    let pending = memory_jobs::submit(deps, &request).await?;
    report_later(
        deps,
        bot,
        input,
        "dream",
        pending,
        memory_jobs::DREAM_WAIT,
        dream_report,
    );
    Ok(DREAMING.into())
}

/// `/compact`: asks the memory workers to archive the chat now and answers
/// [`COMPACT_STARTED`]; the outcome follows.
pub async fn compact(deps: &Deps, bot: &Bot, input: &TurnInput) -> anyhow::Result<String> {
    let pending = memory_jobs::compact(deps, bot, &input.id, &input.session_key).await?;
    report_later(
        deps,
        bot,
        input,
        "compact",
        pending,
        memory_jobs::COMMAND_WAIT,
        compact_report,
    );
    Ok(COMPACT_STARTED.into())
}

/// Sends `report(result, seconds)` to the input's chat once `pending` is answered (or
/// `wait` passed), as a final message with delivery id `<message id>:<what>-report`.
fn report_later(
    deps: &Deps,
    bot: &Bot,
    input: &TurnInput,
    what: &str,
    pending: Pending,
    wait: Duration,
    report: fn(Option<ConsolidationResult>, f64) -> String,
) {
    let outbox = Outbox {
        js: deps.js.clone(),
        bot: bot.spec.id.clone(),
        channel: input.channel.clone(),
        chat_id: input.chat_id.clone(),
        reply_to: input.id.clone(),
        session_key: input.session_key.clone(),
    };
    let id = format!("{}:{what}-report", input.id);
    let asked = Instant::now();
    tokio::spawn(async move {
        let result = pending.result(wait).await;
        let text = report(result, asked.elapsed().as_secs_f64());
        let mut msg = outbox.message(OutboundKind::Final, &text, 0);
        msg.id = id;
        if let Err(e) = outbox::publish(&outbox.js, &msg).await {
            tracing::warn!(error = %e, session_id = %outbox.session_key, "failed to send a command's report");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_use_the_worker_text_or_upstream_failure_notices() {
        let ok = |reply: &str| {
            Some(ConsolidationResult {
                reply: reply.into(),
                ..Default::default()
            })
        };
        let failed = Some(ConsolidationResult {
            error: "memory is busy, try again shortly".into(),
            ..Default::default()
        });
        assert_eq!(
            dream_report(ok("Dream completed in 2.5s. (commit 52e55e2b)"), 3.0),
            "Dream completed in 2.5s. (commit 52e55e2b)"
        );
        assert_eq!(
            dream_report(failed.clone(), 3.04),
            "Dream failed after 3.0s: memory is busy, try again shortly"
        );
        assert_eq!(dream_report(None, 600.0), memory_jobs::NOT_ANSWERED);
        assert_eq!(compact_report(ok(""), 1.0), "Context compacted.");
        assert_eq!(compact_report(failed, 1.0), "Unable to compact context.");
    }
}
