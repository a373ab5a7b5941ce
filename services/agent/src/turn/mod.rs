//! The lower layer: what one attempt at a turn does, top to bottom. The message was decoded
//! and classified when it was read ([`crate::base::input::Incoming`]); the caller holds the
//! session's lease and counted the attempt ([`crate::session`]). Then:
//!
//! 1. **command**: a command is answered without the model ([`Turn::answer_command`], in
//!    `commands/`);
//! 2. **load**: the session's replayable tail, read once, when the attempt started
//!    ([`crate::session::attempts::start`]: in the round trip that checked and counted it);
//! 3. **limits**: a message over one of the bot's limits is refused without the model
//!    ([`limits::refusal`]);
//! 4. **recover**: an interrupted turn's rows are restored, or resumed ([`Turn::recover`], in
//!    `recovery.rs`);
//! 5. **model**: persist the input, build the prompt, run the model with tools, hooks and
//!    checkpoints, finish the run ([`Turn::model`], in `model.rs`);
//! 6. **commit** and 7. **publish**: one fenced write, then the reply ([`Turn::commit`], in
//!    `commit.rs`).
//!
//! May import: `crate::base` only. Imported by `crate::session` and `crate::handlers`.
//!
//! # Layout
//! - `parts`: the values the steps share; `model`: the model's part of a turn;
//!   `commit`: commit, then publish; `recovery`: interrupted turns.
//! - `checkpoints`: turn state in Redis; `follow_ups`: messages injected into a running turn.
//! - `commands`: commands' answers; `limits`: per-bot limits and usage; `memory_jobs`:
//!   consolidation, `/new` archives and the Dream commands, answered by the memory workers.
//! - `message_tool`: the tools the runner serves itself (`message`, and in front of
//!   `subagent`'s `spawn` and `goal_tools`' goal tools); `goal`: goal mode around a turn.
//! - `hook`: stream deltas, progress and tool hints.
//! - `subagent`: the `spawn` tool, subagent slots, runs and announcements.

pub mod checkpoints;
pub mod commands;
pub mod commit;
pub mod follow_ups;
pub mod goal;
pub mod goal_tools;
pub mod hook;
pub mod limits;
pub mod memory_jobs;
pub mod message_tool;
pub mod model;
pub mod parts;
pub mod recovery;
pub mod subagent;

use nanobot_core::session::Session;

use crate::base::error::Result;

pub use parts::{Measured, Reply, Turn};

impl Turn<'_> {
    /// Runs the turn on `session` (its replayable tail, loaded when the attempt started) and
    /// publishes its reply; returns what it measured of the session's prompt (`None` for a
    /// command). Command, recover, model, commit:
    pub async fn run(&self, mut session: Session) -> Result<Option<Measured>> {
        let input = self.input;
        if goal::stale(input.continuation, &session.metadata) {
            // Its goal ended (or its turn was redone to the end) after it was published.
            tracing::info!(session_id = %input.session_key, "dropped a goal continuation: no active goal");
            self.commit(Reply::default()).await?;
            return Ok(None);
        }
        if let Some(reply) = self.answer_command().await? {
            self.commit(Reply::text(&reply)).await?;
            return Ok(None);
        }
        if let Some(refusal) = limits::refusal(self.deps, &self.bot.spec.id, input).await? {
            self.commit(Reply::text(&refusal)).await?;
            return Ok(None);
        }
        self.sessions.note_indexed(&session);
        let resume = self.recover(&mut session).await?;
        let (reply, measured) = self.model(session, resume).await?;
        self.commit(reply).await?;
        Ok(Some(measured))
    }
}
