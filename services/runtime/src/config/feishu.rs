//! `channels.feishu` (and `bots.<id>.channels.feishu`): Feishu / Lark, 0.3.5's keys, resolved per bot like
//! the other channels (a bot's own section laid over the shared one).
//!
//! Scaffold: only `enabled` and `allowFrom` are typed so far; every other key is kept in
//! `extra` until the channel module types it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::Config;

/// `channels.feishu`: 0.3.5's keys and defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct FeishuConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// Who may talk to the bot: sender ids or `"*"`. Empty denies everyone.
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Every other key, kept as given.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// One bot's Feishu / Lark settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct FeishuBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: FeishuConfig,
}

impl Config {
    /// Returns every bot with Feishu / Lark enabled and its resolved settings (problems are
    /// reported by config validation; a bot whose section does not parse is skipped here).
    pub fn feishu_bots(&self) -> Vec<FeishuBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<FeishuBot> {
    let global = config.channels.feishu.clone();
    super::sections::resolve(config, "feishu", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| FeishuBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the Feishu / Lark sections.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, _unknown: &mut Vec<String>) {
    resolve(config, problems);
}
