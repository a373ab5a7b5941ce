//! An automation turn (a cron fire, the heartbeat) under its session's lease, at most once:
//! its id is the turn's idempotency key, so a fire published twice runs once.

use nanobot_core::session::SessionWriter;
use nanobot_proto::keys;

use super::acquire::{self, Held, Until};
use super::attempts;
use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::base::error::{Error, Result};
use crate::base::input::TurnInput;
use crate::base::outbox::{self, Outbox};
use crate::turn::parts::Turn;

/// Runs `input` as a turn of its session under the session's lease, unless a turn with its id
/// was already answered there; with `keep`, first trims the session to its last `keep` rows
/// (from a user row). Returns whether the turn ran here.
pub async fn run_once(
    deps: &Deps,
    bot: &Bot,
    input: &TurnInput,
    outbox: &Outbox,
    keep: Option<usize>,
) -> Result<bool> {
    let session_key = &input.session_key;
    let marker = keys::inbound_seen(&bot.spec.id, session_key, &input.id);
    let mut ran_here = false;
    while let Some(Held { lease, permit, .. }) =
        acquire::acquire(deps, bot, session_key, Until::Seen(&marker)).await?
    {
        let sessions = bot.sessions.fenced(lease.fence());
        let ran = async {
            outbox::flush(&deps.js, &sessions, session_key).await?;
            if let Some(keep) = keep {
                trim(&sessions, session_key, keep).await?;
            }
            let turn = Turn {
                deps,
                bot,
                input,
                outbox,
                sessions: &sessions,
                seq: None,
                follow_ups: None,
            };
            let Some(started) = attempts::start(deps, bot, session_key, &input.id).await? else {
                return Ok(false);
            };
            attempts::guarded(&turn, &lease, started).await?;
            Ok::<_, Error>(true)
        }
        .await;
        lease.release().await;
        drop(permit);
        ran_here |= ran?;
    }
    Ok(ran_here)
}

/// Keeps the last `keep` rows of a session (starting at a user row).
async fn trim(sessions: &SessionWriter, key: &str, keep: usize) -> Result<()> {
    let session = sessions.load(key).await?;
    let from = nanobot_core::heartbeat::retain_from(&session.messages, keep);
    if from > 0 {
        sessions.clear(key).await?;
        sessions.append(key, &session.messages[from..]).await?;
    }
    Ok(())
}
