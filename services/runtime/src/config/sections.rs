//! A chat channel's per-bot sections: with `bots`, each bot's `channels.<name>` merged over the
//! global `channels.<name>`; without, the global section as the default bot's. One resolver
//! for every channel.

use std::path::PathBuf;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::load::norm;
use super::schema::{BotConfig, Config};
use super::telegram::merge;
use super::{DEFAULT_BOT, expand_home};

/// One bot's enabled section of a channel.
#[derive(Debug, Clone)]
pub(crate) struct Section<T> {
    /// Bot id.
    pub bot: String,
    /// That bot's workspace.
    pub workspace: PathBuf,
    /// The merged settings.
    pub config: T,
}

/// Returns every bot's enabled section of channel `name` (`global` is `channels.<name>`); a
/// bot section that does not parse is a problem and is skipped.
pub(crate) fn resolve<T>(
    config: &Config,
    name: &str,
    global: Option<T>,
    enabled: impl Fn(&T) -> bool,
    problems: &mut Vec<String>,
) -> Vec<Section<T>>
where
    T: Serialize + DeserializeOwned + Default,
{
    let default_workspace = || expand_home(&config.agents.defaults.workspace);
    if config.bots.is_empty() {
        return global
            .filter(|c| enabled(c))
            .map(|c| Section {
                bot: DEFAULT_BOT.into(),
                workspace: default_workspace(),
                config: c,
            })
            .into_iter()
            .collect();
    }
    let base = serde_json::to_value(global.unwrap_or_default()).unwrap_or(Value::Null);
    let mut out = Vec::new();
    for (id, bot) in &config.bots {
        match merged::<T>(&base, bot, name) {
            Some(Ok(c)) if enabled(&c) => out.push(Section {
                bot: id.clone(),
                // The bot's own workspace, as `Config::bot` gives it (not looked up by id: that
                // made resolving every bot's sections quadratic in the bots).
                workspace: expand_home(
                    bot.workspace
                        .as_deref()
                        .unwrap_or(&config.agents.defaults.workspace),
                ),
                config: c,
            }),
            Some(Ok(_)) | None => {}
            Some(Err(e)) => problems.push(format!("bots.{id}.channels.{name}: {e}")),
        }
    }
    out
}

/// Whether bot `id` has an enabled section of channel `name`: [`resolve`] for that one bot
/// (the runner asks this of every bot it builds; resolving every bot each time made building
/// 1,000 bots take minutes). A section that does not parse is not enabled.
pub(crate) fn enabled_for<T>(
    config: &Config,
    id: &str,
    name: &str,
    global: Option<T>,
    enabled: impl Fn(&T) -> bool,
) -> bool
where
    T: Serialize + DeserializeOwned + Default,
{
    if config.bots.is_empty() {
        return id == DEFAULT_BOT && global.is_some_and(|c| enabled(&c));
    }
    let Some(bot) = config.bots.get(id) else {
        return false;
    };
    let base = serde_json::to_value(global.unwrap_or_default()).unwrap_or(Value::Null);
    matches!(merged::<T>(&base, bot, name), Some(Ok(c)) if enabled(&c))
}

/// `bot`'s own `channels.<name>` merged over `base` (the global section), typed; `None` when
/// the bot has no such section.
fn merged<T: DeserializeOwned>(
    base: &Value,
    bot: &BotConfig,
    name: &str,
) -> Option<Result<T, serde_json::Error>> {
    let (_, own) = bot.channels.iter().find(|(k, _)| norm(k) == name)?;
    let mut merged = base.clone();
    merge(&mut merged, own.clone());
    Some(serde_json::from_value::<T>(merged))
}

/// Where `bot`'s section of channel `name` is, for problem messages.
pub(crate) fn path(config: &Config, name: &str, bot: &str) -> String {
    if config.bots.is_empty() {
        format!("channels.{name}")
    } else {
        format!("bots.{bot}.channels.{name}")
    }
}
