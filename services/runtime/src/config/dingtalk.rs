//! `channels.dingtalk` (and `bots.<id>.channels.dingtalk`): DingTalk, 0.3.5's keys, resolved per bot like
//! the other channels (a bot's own section laid over the shared one).
//!
//! Scaffold: only `enabled` and `allowFrom` are typed so far; every other key is kept in
//! `extra` until the channel module types it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::Config;

/// `channels.dingtalk`: 0.3.5's keys and defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct DingTalkConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// Who may talk to the bot: sender ids or `"*"`. Empty denies everyone.
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Every other key, kept as given.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// One bot's DingTalk settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct DingTalkBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: DingTalkConfig,
}

impl Config {
    /// Returns every bot with DingTalk enabled and its resolved settings (problems are
    /// reported by config validation; a bot whose section does not parse is skipped here).
    pub fn dingtalk_bots(&self) -> Vec<DingTalkBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<DingTalkBot> {
    let global = config.channels.dingtalk.clone();
    super::sections::resolve(config, "dingtalk", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| DingTalkBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the DingTalk sections.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, _unknown: &mut Vec<String>) {
    resolve(config, problems);
}
