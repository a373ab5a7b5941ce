//! `channels.wecom` (and `bots.<id>.channels.wecom`): WeCom (企业微信 intelligent bot), 0.3.5's keys, resolved per bot like
//! the other channels (a bot's own section laid over the shared one).
//!
//! Scaffold: only `enabled` and `allowFrom` are typed so far; every other key is kept in
//! `extra` until the channel module types it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::Config;

/// `channels.wecom`: 0.3.5's keys and defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct WeComConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// Who may talk to the bot: sender ids or `"*"`. Empty denies everyone.
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Every other key, kept as given.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// One bot's WeCom (企业微信 intelligent bot) settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct WeComBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: WeComConfig,
}

impl Config {
    /// Returns every bot with WeCom (企业微信 intelligent bot) enabled and its resolved settings (problems are
    /// reported by config validation; a bot whose section does not parse is skipped here).
    pub fn wecom_bots(&self) -> Vec<WeComBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<WeComBot> {
    let global = config.channels.wecom.clone();
    super::sections::resolve(config, "wecom", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| WeComBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the WeCom (企业微信 intelligent bot) sections.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, _unknown: &mut Vec<String>) {
    resolve(config, problems);
}
