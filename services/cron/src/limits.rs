//! Bounds on what the `cron` tool schedules (`tools.cron`; nanobot 0.3.5 has none): checked
//! arithmetic on `every_seconds`, a shortest period for `every` and `cron` jobs, `at` times
//! that lie ahead and within the calendar, and a number of jobs per chat. Each refusal is a
//! tool error the model reads; nothing is stored.

use nanobot_runtime::config::CronToolConfig;

use crate::schedule;
use crate::store::{JobsFile, SYSTEM_EVENT, Schedule};

/// The latest time a job may run: 9999-12-31T23:59:59.999Z (Python's `datetime.max`).
pub const MAX_TIME_MS: i64 = 253_402_300_799_999;
/// The longest `every_seconds`: a hundred years.
pub const MAX_EVERY_S: i64 = 100 * 365 * 86_400;
/// Runs of a cron expression whose gaps are compared with the shortest period.
const GAP_SAMPLES: usize = 16;

/// The bounds in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Shortest period, in seconds.
    pub min_interval_s: u64,
    /// Most jobs per chat.
    pub max_jobs_per_chat: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self::from(&CronToolConfig::default())
    }
}

impl From<&CronToolConfig> for Limits {
    fn from(cfg: &CronToolConfig) -> Self {
        Self {
            min_interval_s: cfg.min_interval_s,
            max_jobs_per_chat: cfg.max_jobs_per_chat,
        }
    }
}

impl Limits {
    fn min_ms(&self) -> i64 {
        i64::try_from(self.min_interval_s)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000)
    }

    /// Returns the period of `every_seconds` in ms, or the error text when it is outside
    /// `[minIntervalS, MAX_EVERY_S]` (the product never overflows).
    pub fn every_ms(&self, seconds: i64) -> Result<i64, String> {
        let min = i64::try_from(self.min_interval_s).unwrap_or(i64::MAX);
        if seconds < min.max(1) || seconds > MAX_EVERY_S {
            return Err(format!(
                "every_seconds {seconds} is out of range: it must be between {} and \
                 {MAX_EVERY_S} seconds (the shortest period is tools.cron.minIntervalS)",
                min.max(1)
            ));
        }
        seconds
            .checked_mul(1000)
            .ok_or_else(|| format!("every_seconds {seconds} is out of range"))
    }

    /// Refuses a cron expression two of whose next runs (from `now_ms`) are closer than the
    /// shortest period.
    pub fn check_cron(&self, sched: &Schedule, now_ms: i64) -> Result<(), String> {
        let mut last = match schedule::next_run(sched, now_ms) {
            Some(first) => first,
            None => return Ok(()),
        };
        for _ in 0..GAP_SAMPLES {
            let Some(next) = schedule::next_run(sched, last) else {
                break;
            };
            let gap = next.saturating_sub(last);
            if gap < self.min_ms() {
                return Err(format!(
                    "cron expression '{}' runs {} s apart; the shortest period is {} s \
                     (tools.cron.minIntervalS)",
                    sched.expr.as_deref().unwrap_or_default(),
                    gap as f64 / 1000.0,
                    self.min_interval_s
                ));
            }
            last = next;
        }
        Ok(())
    }

    /// Refuses another job for `session_key` of `bot` when the chat holds the most allowed
    /// (its jobs of every state; the system jobs belong to no chat).
    pub fn check_room(&self, file: &JobsFile, bot: &str, session_key: &str) -> Result<(), String> {
        let held = file
            .jobs
            .iter()
            .filter(|j| j.payload.kind != SYSTEM_EVENT)
            .filter(|j| j.bot.as_deref().is_none_or(|b| b == bot))
            .filter(|j| j.payload.session_key.as_deref() == Some(session_key))
            .count();
        if held >= self.max_jobs_per_chat {
            return Err(format!(
                "this chat already has {held} scheduled jobs, the most allowed \
                 (tools.cron.maxJobsPerChat is {}); remove one first (action='remove')",
                self.max_jobs_per_chat
            ));
        }
        Ok(())
    }
}

/// Refuses an `at` time (`given` as the model wrote it) that is not ahead of `now_ms` or lies
/// past [`MAX_TIME_MS`].
pub fn check_at(given: &str, at_ms: i64, now_ms: i64) -> Result<(), String> {
    if at_ms > MAX_TIME_MS {
        return Err(format!(
            "at '{given}' is out of range: the latest time is 9999-12-31T23:59:59Z"
        ));
    }
    if at_ms <= now_ms {
        return Err(format!(
            "at '{given}' is in the past: a one-time job needs a time ahead"
        ));
    }
    Ok(())
}
