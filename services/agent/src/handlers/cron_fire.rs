//! Cron fires → automation turns. A job made in a chat (or a legacy `deliver` job, migrated)
//! runs in that chat's session and its reply goes to that chat; a fire bound to no chat is
//! dropped (the scheduler disables such jobs, as upstream). A fire runs under its session's
//! lease like a chat turn, so it waits while the session is busy and never overlaps another
//! turn of it on any runner; its id (job and due time) is the turn's idempotency key, so a
//! fire published twice runs once.
//!
//! A fire of a job that stores another bot than the fire's is dropped: bots sharing a workspace
//! never run each other's jobs, whoever published the fire.
//!
//! The runner that ran the turn records the run in `jobs.json` (status `ok`, or `error` with
//! the model's error or upstream's error reply when every attempt failed; its duration), under
//! the store's lock; a repeat replaces the same run. A runner SIGKILLed after the turn but
//! before that write leaves the run unrecorded: the redelivered fire finds the turn answered
//! and does not run it again, so its outcome is unknown and nothing is written.

use std::time::Instant;

use async_nats::jetstream;
use prost::Message as _;
use tracing::Instrument as _;

use nanobot_cron::store::{self as cron_store, Run};
use nanobot_proto::{CronFire, CronFireKind};
use nanobot_runtime::telemetry;

use super::{keep_alive, terminate};
use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::base::input::TurnInput;
use crate::base::outbox::Outbox;
use crate::base::outcomes::{Outcome, Watch};

/// Handles one cron fire.
pub async fn handle(deps: &Deps, msg: jetstream::Message) {
    let fire = match CronFire::decode(msg.payload.clone()) {
        Ok(f) => f,
        Err(e) => return terminate(&msg, &format!("undecodable cron fire: {e}")).await,
    };
    let Some(bot) = deps.bot(&fire.bot) else {
        return terminate(&msg, &format!("unknown bot {:?}", fire.bot)).await;
    };
    if fire.kind() == CronFireKind::Heartbeat {
        return super::heartbeat::handle(deps, &bot, &msg, &fire).await;
    }
    let Some(route) = Route::of(&fire) else {
        return terminate(&msg, "cron fire bound to no chat session").await;
    };
    if let Some(owner) = owner_of(&bot, &fire.job_id).await
        && owner != fire.bot
    {
        let why = format!("cron job {} belongs to bot {owner:?}", fire.job_id);
        return terminate(&msg, &why).await;
    }
    let session_key = route.session_key.clone();
    let span = tracing::info_span!("cron_turn", session_id = %session_key, job_id = %fire.job_id);
    telemetry::set_parent_in_conversation(&span, msg.headers.as_ref(), &session_key);
    let turn = async {
        let input = TurnInput::automation(
            &fire.id,
            &route.channel,
            &route.chat_id,
            reminder_note(&fire),
            &session_key,
        );
        let outbox = Outbox {
            js: deps.js.clone(),
            bot: fire.bot.clone(),
            channel: route.channel,
            chat_id: route.chat_id,
            reply_to: fire.id.clone(),
            session_key: session_key.clone(),
        };
        let watch = Watch::new(&fire.id);
        let started = Instant::now();
        let outcome = keep_alive(&msg, deps.ack_wait(), async {
            let outcome = crate::session::once::run_once(deps, &bot, &input, &outbox, None).await;
            if let (Ok(true), Some(ran)) = (&outcome, watch.outcome()) {
                record_run(&bot, &fire, ran, started.elapsed().as_millis()).await;
            }
            outcome
        })
        .await;
        super::settle(deps, &msg, outcome.map(|_| ()).map_err(Into::into)).await;
    };
    let scope = nanobot_runtime::metrics::Scope::new(&bot.spec.id, "cron");
    nanobot_runtime::metrics::scoped(scope, turn.instrument(span)).await;
}

/// Returns the bot stored in job `job_id` of `bot`'s workspace: a fire for another bot's job
/// (from a leader older than job owners, or forged) is not run. `None` when the job has no
/// bot, is gone (a one-shot job is deleted once fired) or the file cannot be read.
async fn owner_of(bot: &Bot, job_id: &str) -> Option<String> {
    let workspace = bot.spec.workspace.clone();
    let job_id = job_id.to_string();
    tokio::task::spawn_blocking(move || {
        let file = cron_store::load(&workspace).ok()?;
        file.jobs.into_iter().find(|j| j.id == job_id)?.bot
    })
    .await
    .ok()
    .flatten()
}

/// Writes how a fire's turn ended into its job's state (`lastStatus`, `lastError`, the run
/// history); a failure to write is logged, the turn stands.
async fn record_run(bot: &Bot, fire: &CronFire, outcome: Outcome, elapsed_ms: u128) {
    let (status, error) = match outcome {
        Outcome::Ok => (cron_store::STATUS_OK, None),
        Outcome::Failed(e) => (cron_store::STATUS_ERROR, Some(e)),
    };
    let run = Run {
        run_at_ms: fire.scheduled_ms,
        status: status.into(),
        duration_ms: i64::try_from(elapsed_ms).unwrap_or(i64::MAX),
        error,
    };
    let workspace = bot.spec.workspace.clone();
    let job_id = fire.job_id.clone();
    let written = tokio::task::spawn_blocking(move || {
        cron_store::update(&workspace, |file| {
            let found = file.record_run(&job_id, run);
            (found, found)
        })
    })
    .await;
    match written {
        Ok(Ok(true)) => tracing::info!(status, "cron run recorded"),
        // A one-shot job deleted after its fire, or a job removed since.
        Ok(Ok(false)) => tracing::debug!(status, "cron run not recorded, job gone"),
        Ok(Err(e)) => tracing::warn!(error = %e, "failed to record cron run"),
        Err(e) => tracing::warn!(error = %e, "failed to record cron run"),
    }
}

/// Where a fire's turn runs, and its reply goes.
#[derive(Debug, PartialEq)]
struct Route {
    session_key: String,
    channel: String,
    chat_id: String,
}

impl Route {
    /// The job's chat (filled in by the scheduler, legacy `deliver` jobs migrated); `None`
    /// for a fire bound to no chat.
    fn of(fire: &CronFire) -> Option<Self> {
        let bound = !fire.session_key.is_empty()
            && !fire.origin_channel.is_empty()
            && !fire.origin_chat_id.is_empty();
        bound.then(|| Self {
            session_key: fire.session_key.clone(),
            channel: fire.origin_channel.clone(),
            chat_id: fire.origin_chat_id.clone(),
        })
    }
}

/// The user message of a cron turn, upstream's text.
fn reminder_note(fire: &CronFire) -> String {
    format!(
        "[Scheduled Task] Timer finished.\n\nTask '{}' has been triggered.\nScheduled instruction: {}",
        fire.job_name, fire.message
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_made_in_a_chat_runs_in_that_chats_session_and_answers_there() {
        let fire = CronFire {
            job_id: "ab12cd34".into(),
            job_name: "stretch".into(),
            message: "remind me to stretch".into(),
            session_key: "telegram:42".into(),
            origin_channel: "telegram".into(),
            origin_chat_id: "42".into(),
            ..Default::default()
        };
        let route = Route::of(&fire).expect("bound");
        assert_eq!(route.session_key, "telegram:42");
        assert_eq!(
            (route.channel.as_str(), route.chat_id.as_str()),
            ("telegram", "42")
        );
        assert_eq!(
            reminder_note(&fire),
            "[Scheduled Task] Timer finished.\n\nTask 'stretch' has been triggered.\nScheduled instruction: remind me to stretch"
        );
        let unbound = Route::of(&CronFire {
            job_id: "j".into(),
            ..Default::default()
        });
        assert_eq!(unbound, None, "a fire bound to no chat has nowhere to run");
    }
}
