//! `channels.napcat` (and `bots.<id>.channels.napcat`): NapCat / OneBot v11, 0.3.5's keys, resolved per bot like
//! the other channels (a bot's own section laid over the shared one).
//!
//! Scaffold: only `enabled` and `allowFrom` are typed so far; every other key is kept in
//! `extra` until the channel module types it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::Config;

/// `channels.napcat`: 0.3.5's keys and defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct NapcatConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// Who may talk to the bot: sender ids or `"*"`. Empty denies everyone.
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Every other key, kept as given.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// One bot's NapCat / OneBot v11 settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct NapcatBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: NapcatConfig,
}

impl Config {
    /// Returns every bot with NapCat / OneBot v11 enabled and its resolved settings (problems are
    /// reported by config validation; a bot whose section does not parse is skipped here).
    pub fn napcat_bots(&self) -> Vec<NapcatBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<NapcatBot> {
    let global = config.channels.napcat.clone();
    super::sections::resolve(config, "napcat", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| NapcatBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the NapCat / OneBot v11 sections.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, _unknown: &mut Vec<String>) {
    resolve(config, problems);
}
