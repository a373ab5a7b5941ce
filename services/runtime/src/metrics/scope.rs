//! The labels of one unit of work (a turn, a memory job, an executor's tool call), resolved
//! once when it starts and read by every metric it moves: `bot` and `channel`. The work runs
//! inside [`scoped`]; a metric moved outside any scope counts under [`UNKNOWN`].

use std::future::Future;
use std::sync::Arc;

use super::labels::UNKNOWN;

/// Resolved (bounded) `bot` and `channel` label values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    bot: Arc<str>,
    channel: Arc<str>,
}

impl Scope {
    /// Returns the scope of work of `bot` on `channel`, each bounded ([`super::Metrics`]).
    pub fn new(bot: &str, channel: &str) -> Self {
        let m = super::get();
        Self {
            bot: m.bots.label(bot).into(),
            channel: m.channels.label(channel).into(),
        }
    }

    /// The scope of work outside any [`scoped`] future.
    pub fn unknown() -> Self {
        Self {
            bot: UNKNOWN.into(),
            channel: UNKNOWN.into(),
        }
    }

    /// The `bot` label value.
    pub fn bot(&self) -> &str {
        &self.bot
    }

    /// The `channel` label value.
    pub fn channel(&self) -> &str {
        &self.channel
    }
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// Runs `work` with `scope` as the labels of the metrics it moves.
pub async fn scoped<F: Future>(scope: Scope, work: F) -> F::Output {
    SCOPE.scope(scope, work).await
}

/// Returns the scope of the running work ([`Scope::unknown`] outside [`scoped`]).
pub fn current() -> Scope {
    SCOPE
        .try_with(Scope::clone)
        .unwrap_or_else(|_| Scope::unknown())
}
