//! the QQ official bot. Scaffold: builds no channel yet.

use std::sync::Arc;

use nanobot_runtime::config::Config;

use super::{Channel, ChannelDeps};

/// Builds the the QQ official bot channel of every bot that enables it (no network yet).
pub fn all(cfg: &Config, _deps: &ChannelDeps) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    let _ = cfg.qq_bots();
    Ok(Vec::new())
}
