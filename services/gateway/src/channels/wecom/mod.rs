//! WeCom (企业微信 intelligent bot). Scaffold: builds no channel yet.

use std::sync::Arc;

use nanobot_runtime::config::Config;

use super::{Channel, ChannelDeps};

/// Builds the WeCom (企业微信 intelligent bot) channel of every bot that enables it (no network yet).
pub fn all(cfg: &Config, _deps: &ChannelDeps) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    let _ = cfg.wecom_bots();
    Ok(Vec::new())
}
