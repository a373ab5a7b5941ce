//! Recovery of an interrupted turn (a runner died, or `/stop`): its saved rows and checkpoint
//! are restored into the session's history (upstream's runtime checkpoint and
//! `pending_user_turn`, see `nanobot_core::checkpoint`), so the next turn sees them. A
//! message redelivered after its own turn was interrupted resumes that turn instead.

use serde_json::Value;

use nanobot_core::checkpoint::{self, Restore};
use nanobot_core::session::{Commit, Session, SessionWriter, meta};
use nanobot_proto::keys;

use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::base::input::TurnInput;
use crate::turn::checkpoints;
use crate::turn::parts::TurnCtx;

/// Restores what an interrupted turn left in `session` before the turn of `input`; returns
/// whether the turn resumes (`input` is the interrupted turn's own message, redelivered).
pub async fn prepare(
    deps: &Deps,
    bot: &Bot,
    ctx: TurnCtx<'_>,
    input: &TurnInput,
    session: &mut Session,
) -> anyhow::Result<bool> {
    let resume = session
        .metadata
        .get(meta::PENDING_TURN_ID)
        .and_then(Value::as_str)
        == Some(input.id.as_str());
    let how = if resume {
        Restore::Resume
    } else {
        Restore::Close
    };
    let taken = checkpoints::taken_from(&session.metadata);
    recover(deps, bot, ctx.sessions, session, how).await?;
    if resume && let (Some(f), Some(taken)) = (ctx.follow_ups, taken) {
        // Follow-ups a previous attempt injected and saved are in the history already.
        f.resume(taken);
    }
    Ok(resume)
}

/// Restores an interrupted turn of `session` into its history (next turn, or `/stop`), in
/// the store and in `session`. Closing a turn marks its message as answered, so a redelivery
/// of it is dropped.
pub async fn recover(
    deps: &Deps,
    bot: &Bot,
    sessions: &SessionWriter,
    session: &mut Session,
    how: Restore,
) -> anyhow::Result<usize> {
    if !session.metadata.contains_key(meta::RUNTIME_CHECKPOINT)
        && !session.metadata.contains_key(meta::PENDING_USER_TURN)
    {
        return Ok(0);
    }
    nanobot_runtime::metrics::get().lease_takeover(&bot.spec.id);
    let interrupted = session
        .metadata
        .get(meta::PENDING_TURN_ID)
        .and_then(Value::as_str)
        .map(str::to_string);
    let rows = checkpoint::restore(&session.messages, &mut session.metadata, how);
    sessions
        .commit(
            &session.key,
            &Commit {
                rows: rows.clone(),
                metadata: Some(session.metadata.clone()),
                ..Default::default()
            },
        )
        .await?;
    let restored = rows.len();
    session.messages.extend(rows);
    if how == Restore::Close
        && let Some(id) = interrupted
    {
        deps.mark_seen(&keys::inbound_seen(&bot.spec.id, &session.key, &id))
            .await;
    }
    tracing::info!(session_id = %session.key, rows = restored, resumed = how == Restore::Resume, "restored interrupted turn");
    Ok(restored)
}
