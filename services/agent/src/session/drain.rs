//! Running a session's turns across runners. Every runner holding an unanswered message of a
//! session waits for the session's lease; whoever takes it drains the session's mailbox in
//! stream order (so a holder that dies is replaced by any waiter once its lease expires, or by
//! JetStream redelivering its own messages). Each turn runs [`attempts::guarded`]: retried a
//! few times, then answered with upstream's error text.

use tracing::Instrument as _;

use nanobot_core::session::{Commit, Progress, SessionWriter};
use nanobot_runtime::{metrics, telemetry};

use crate::base::bots::Bot;
use crate::base::command::Kind;
use crate::base::deps::Deps;
use crate::base::error::{Error, Result};
use crate::base::input::Incoming;
use crate::base::input::TurnInput;
use crate::base::lease::Lease;
use crate::base::outbox::{self, Outbox};
use crate::session::attempts::{self, Started};
use crate::turn::follow_ups::FollowUps;
use crate::turn::parts::Turn;

/// Answers the session's waiting messages in order while `lease` holds; returns how many
/// mailbox entries it went through and the cursor it left. `progress`: the session's, read
/// under the lease when it was taken (read here otherwise).
pub async fn drain(
    deps: &Deps,
    bot: &Bot,
    session_key: &str,
    subject: &str,
    lease: &Lease,
    progress: Option<Progress>,
) -> Result<(usize, u64)> {
    let sessions = bot.sessions.fenced(lease.fence());
    // Read once under the lease; then this holder is the only one moving the cursor, and a
    // cursor kept here that lags (the script only moves it forward) costs a skipped entry.
    let Progress {
        mut cursor,
        outbox: unpublished,
    } = match progress {
        Some(progress) => progress,
        None => sessions.progress(session_key).await?,
    };
    if let Some(payload) = unpublished {
        outbox::publish_left(&deps.js, &sessions, session_key, payload).await?;
    }
    let mut entries = 0;
    loop {
        if lease.lost().is_cancelled() {
            return Err(Error::LeaseLost);
        }
        if deps.cancel.is_cancelled() {
            return Ok((entries, cursor));
        }
        let Some(entry) = deps.mailbox.next_after(subject, cursor).await? else {
            return Ok((entries, cursor));
        };
        entries += 1;
        let turn = match entry.incoming {
            // A priority command was answered by its receiver.
            Some(Incoming {
                kind: Kind::Priority(_),
                ..
            })
            | None => None,
            Some(incoming) => {
                // A bot at its limit of concurrent turns: this drain stops, the lease and the
                // turn permit go back, and the message is redelivered later (other bots'
                // messages go on meanwhile).
                let slot = crate::turn::limits::TurnSlot::take(deps, &bot.spec.id).await?;
                attempts::start(deps, bot, session_key, &incoming.message.id)
                    .await?
                    .map(|started| (incoming, started, slot))
            }
        };
        match turn {
            Some((incoming, started, slot)) => {
                // Each message is its own trace, whichever runner's receipt drains it: the
                // turn continues the trace of the message's publisher.
                let m = &incoming.message;
                let span = tracing::info_span!(
                    "turn",
                    session_id = %session_key,
                    channel = %m.origin().0,
                    message_id = %m.id,
                    "gen_ai.usage.input_tokens" = tracing::field::Empty,
                    "gen_ai.usage.output_tokens" = tracing::field::Empty,
                );
                telemetry::set_parent_in_conversation(&span, entry.headers.as_ref(), session_key);
                // Its metrics' labels, resolved once for the whole turn.
                let scope = metrics::Scope::new(&bot.spec.id, &m.origin().0);
                let waited = entry.stored.and_then(|t| t.elapsed().ok());
                let last = async {
                    if let Some(waited) = waited {
                        metrics::get().queue_wait(waited);
                    }
                    run_one(deps, bot, &sessions, lease, entry.seq, &incoming, started).await
                };
                cursor = metrics::scoped(scope, last.instrument(span)).await?;
                if let Some(slot) = slot {
                    slot.release().await;
                }
            }
            None => {
                let skip = Commit {
                    cursor: Some(entry.seq),
                    ..Default::default()
                };
                sessions.commit(session_key, &skip).await?;
                cursor = entry.seq;
            }
        }
    }
}

/// Runs the turn of one mailbox message; returns the cursor its commit wrote (past the
/// message and the follow-ups the turn took).
async fn run_one(
    deps: &Deps,
    bot: &Bot,
    sessions: &SessionWriter,
    lease: &Lease,
    seq: u64,
    incoming: &Incoming,
    started: Started,
) -> Result<u64> {
    let msg = &incoming.message;
    let subject = msg.subject();
    let input = TurnInput::chat(incoming);
    let session_key = input.session_key.clone();
    let outbox = Outbox::for_message(&deps.js, msg);
    let follow_ups = FollowUps::new(
        deps.mailbox.clone(),
        deps.redis.clone(),
        &bot.spec.id,
        &session_key,
        &msg.id,
        &subject,
        seq,
    );
    let turn = Turn {
        deps,
        bot,
        input: &input,
        outbox: &outbox,
        sessions,
        seq: Some(seq),
        follow_ups: Some(&follow_ups),
    };
    attempts::guarded(&turn, lease, started).await?;
    Ok(seq.max(follow_ups.taken().last_seq))
}
