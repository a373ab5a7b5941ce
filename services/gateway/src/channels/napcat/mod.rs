//! QQ through NapCat / OneBot v11. Scaffold: builds no channel yet.

use std::sync::Arc;

use nanobot_runtime::config::Config;

use super::{Channel, ChannelDeps};

/// Builds the QQ through NapCat / OneBot v11 channel of every bot that enables it (no network yet).
pub fn all(cfg: &Config, _deps: &ChannelDeps) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    let _ = cfg.napcat_bots();
    Ok(Vec::new())
}
