//! The agent's errors: what ends a turn, typed, so the code around a turn tells an
//! interruption (not the message's fault: the attempt is taken back) from a failure (counted,
//! retried, then answered with upstream's error). The turn's body and the session layer return
//! this type; a session write's error keeps its kind ([`SessionError::Fenced`] is
//! [`Error::Fenced`]). `anyhow` stays at the edges (handlers, the memory jobs, the answers of
//! commands that write no session): such an error is [`Error::Other`], a failure.

use nanobot_core::session::SessionError;
use nanobot_runtime::bus::BusError;

/// Why a turn, a drain or a wait for a session ended early.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The session's lease was taken by another runner mid-way.
    #[error("session lease lost")]
    LeaseLost,
    /// A session write carried a fencing token that is no longer current.
    #[error("session {0} is held by another runner (lease lost); write refused")]
    Fenced(String),
    /// The bot runs as many turns as `bots.<id>.limits.maxConcurrentTurns` allows: the
    /// message waits (redelivered later), taking no runner's turn slot meanwhile.
    #[error("bot {0} is at its limit of concurrent turns")]
    BotBusy(String),
    /// This runner is shutting down.
    #[error("runner shutting down")]
    Shutdown,
    /// Redis failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A session read or write failed.
    #[error(transparent)]
    Session(SessionError),
    /// Publishing to NATS failed.
    #[error("bus: {0}")]
    Bus(#[from] BusError),
    /// Anything else (the model run, a tool, a memory job).
    #[error("{0:#}")]
    Other(anyhow::Error),
}

impl Error {
    /// Whether the work was only interrupted (another runner holds the session, or this one
    /// stops): not the message's fault.
    pub fn is_interruption(&self) -> bool {
        matches!(
            self,
            Self::LeaseLost | Self::Fenced(_) | Self::Shutdown | Self::BotBusy(_)
        )
    }
}

impl From<SessionError> for Error {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Fenced { session } => Self::Fenced(session),
            e => Self::Session(e),
        }
    }
}

/// An error from code that returns `anyhow` (a memory job, a command's answer that writes no
/// session): a failure, never an interruption.
impl From<anyhow::Error> for Error {
    fn from(e: anyhow::Error) -> Self {
        Self::Other(e)
    }
}

impl From<tokio::sync::AcquireError> for Error {
    fn from(_: tokio::sync::AcquireError) -> Self {
        Self::Shutdown
    }
}

/// Result alias of the agent's turn code.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_write_inside_a_turn_reads_as_an_interruption_and_a_model_failure_does_not() {
        let fenced = Error::from(SessionError::Fenced {
            session: "cli:x".into(),
        });
        assert!(matches!(&fenced, Error::Fenced(s) if s == "cli:x"));
        assert!(fenced.is_interruption());
        assert!(Error::LeaseLost.is_interruption());
        assert!(!Error::from(anyhow::anyhow!("provider down")).is_interruption());
    }
}
