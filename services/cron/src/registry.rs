//! The cron scheduler's side of the bot registry ([`nanobot_runtime::bot_registry`]): the
//! leader fires the jobs (heartbeat and Dream included) of the bots the registry holds now
//! ([`LiveConfig`], read each tick). A bot added there has its `cron/jobs.json` read from the
//! next tick (half a second); a removed one's jobs stop firing and stay in the file
//! (`nanobot bots remove --purge` deletes them).
//!
//! SIGKILL: nothing is kept here; a restarted replica lays the registry's bots over its config
//! before its first tick.

pub use nanobot_runtime::bot_registry::LiveConfig as Live;
