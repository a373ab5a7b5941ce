//! How the turns a handler waits on ended. A cron fire records its run's status in
//! `jobs.json` (upstream's `lastStatus` / `lastError`), but the turn runs deep below its
//! handler, through code shared with chat messages; the handler watches its turn id here, and
//! the turn's hook (the run's stop reason) and the outbox (upstream's error reply to a turn
//! that failed every attempt) report into it. Only watched ids are kept, so other turns cost a
//! map lookup. In-process only: a fire's turn runs on the runner that took the fire.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It produced its answer.
    Ok,
    /// It ended with an error (the model failed, or every attempt failed); the text says what.
    Failed(String),
}

/// Watched turn ids: how many watch each, and the outcome reported.
type Watched = HashMap<String, (usize, Option<Outcome>)>;

static WATCHED: LazyLock<Mutex<Watched>> = LazyLock::new(Default::default);

fn watched() -> std::sync::MutexGuard<'static, Watched> {
    WATCHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Interest in the outcome of the turn with one id, dropped with it. Several may watch one id
/// (copies of a fire handled at once); the entry goes with the last.
#[derive(Debug)]
pub struct Watch(String);

impl Watch {
    /// Starts watching turn `id`.
    pub fn new(id: &str) -> Self {
        watched().entry(id.to_string()).or_default().0 += 1;
        Self(id.to_string())
    }

    /// The turn's last reported outcome, if it reported one.
    pub fn outcome(&self) -> Option<Outcome> {
        watched().get(&self.0).and_then(|(_, o)| o.clone())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut map = watched();
        if let Some(entry) = map.get_mut(&self.0) {
            entry.0 -= 1;
            if entry.0 == 0 {
                map.remove(&self.0);
            }
        }
    }
}

/// Reports how turn `id` ended (ignored unless someone watches it).
pub fn report(id: &str, outcome: Outcome) {
    if let Some((_, slot)) = watched().get_mut(id) {
        *slot = Some(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_watched_turns_are_kept_and_the_last_report_wins() {
        report("a", Outcome::Ok);
        let watch = Watch::new("a");
        assert_eq!(watch.outcome(), None, "reported before watching");
        report("a", Outcome::Failed("boom".into()));
        report("a", Outcome::Ok);
        assert_eq!(watch.outcome(), Some(Outcome::Ok));
        let copy = Watch::new("a");
        drop(copy);
        assert_eq!(
            watch.outcome(),
            Some(Outcome::Ok),
            "a second watcher leaving keeps the first's"
        );
        drop(watch);
        assert!(!watched().contains_key("a"));
    }
}
