//! One chat or automation turn, top to bottom. The message was decoded and classified when
//! it was read ([`crate::mailbox::Incoming`]); the caller holds the session's lease
//! ([`crate::handlers::session`]). Then:
//!
//! 1. **classify**: a command is answered without the model ([`commands::answer`]);
//! 2. **load**: the session's replayable tail, read once, when the attempt started
//!    ([`crate::attempts::start`]: in the round trip that checked and counted it);
//! 3. **recover**: an interrupted turn's rows are restored, or resumed ([`recovery`]);
//! 4. **limits**: a message over one of the bot's limits is refused without the model
//!    ([`crate::limits`]);
//! 5. **run**: the model, with tools, hooks and checkpoints ([`turn::run`]);
//! 6. **commit** and 7. **publish**: one fenced write, then the reply ([`commit::finish`]).

use nanobot_core::session::Session;

use crate::bots::Bot;
use crate::commands;
use crate::commit::{self, Reply};
use crate::goal_turn;
use crate::handlers::Deps;
use crate::outbox::Outbox;
use crate::recovery;
use crate::turn::{self, Measured, TurnCtx, TurnInput};

/// Runs the turn of `input` and publishes its reply to `outbox`; returns what it measured of
/// the session's prompt (`None` for a command).
pub async fn run(
    deps: &Deps,
    bot: &Bot,
    ctx: TurnCtx<'_>,
    input: &TurnInput,
    outbox: &Outbox,
    mut session: Session,
) -> anyhow::Result<Option<Measured>> {
    if goal_turn::stale(input.continuation, &session.metadata) {
        // Its goal ended (or its turn was redone to the end) after it was published.
        tracing::info!(session_id = %input.session_key, "dropped a goal continuation: no active goal");
        commit::finish(deps, ctx, input, outbox, Reply::default()).await?;
        return Ok(None);
    }
    if let Some(reply) = commands::answer(deps, bot, ctx.sessions, input).await? {
        commit::finish(deps, ctx, input, outbox, Reply::text(&reply)).await?;
        return Ok(None);
    }
    if let Some(refusal) = crate::limits::refusal(deps, &bot.spec.id, input).await? {
        commit::finish(deps, ctx, input, outbox, Reply::text(&refusal)).await?;
        return Ok(None);
    }
    ctx.sessions.note_indexed(&session);
    let resume = recovery::prepare(deps, bot, ctx, input, &mut session).await?;
    let (reply, measured) = turn::run(deps, bot, ctx, input, outbox, session, resume).await?;
    commit::finish(deps, ctx, input, outbox, reply).await?;
    Ok(Some(measured))
}
