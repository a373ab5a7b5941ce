//! Per-bot state of a runner: session store, tool client, provider and context builder.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nanobot_runtime::store::Store;

use nanobot_core::context::ContextBuilder;
use nanobot_core::resolve;
use nanobot_core::session::SessionStore;
use nanobot_core::tools::{Replies, ToolClient};
use nanobot_runtime::config::{BotLimits, BotSpec, Config};

/// Everything a turn of one bot needs.
#[derive(Debug)]
pub struct Bot {
    /// The bot's resolved config.
    pub spec: BotSpec,
    /// Its sessions.
    pub sessions: SessionStore,
    /// Its tools.
    pub tools: ToolClient,
    /// Its models: the configured one and one per model preset, each with its LLM client
    /// (and fallback models); a turn picks its session's ([`resolve::Models::for_session`]).
    pub models: resolve::Models,
    /// Its prompt builder.
    pub context: ContextBuilder,
    /// Its enabled chat channels (where the `message` tool and the heartbeat may deliver).
    pub chat_channels: Vec<String>,
    /// Its limits (`bots.<id>.limits`), changed live with the rest of the bot.
    pub limits: BotLimits,
}

pub use nanobot_runtime::skills_dir::builtin_skills_dir;

/// The bots of a runner by id, changed live by the registry watcher (`crate::handlers::registry`).
pub type Bots = std::sync::RwLock<HashMap<String, Arc<Bot>>>;

/// Builds the per-bot state of every configured bot, by id.
pub fn build(cfg: &Config, nats: &async_nats::Client, redis: &Store) -> HashMap<String, Arc<Bot>> {
    // One reply subscription for every tool call of this runner, whatever the bot.
    let replies = Replies::new(nats.clone());
    cfg.bots()
        .into_iter()
        .map(|spec| {
            let bot = build_one(cfg, spec, nats, redis, &replies);
            (bot.spec.id.clone(), Arc::new(bot))
        })
        .collect()
}

/// Builds the per-bot state of bot `spec` of `cfg`.
pub fn build_one(
    cfg: &Config,
    spec: BotSpec,
    nats: &async_nats::Client,
    redis: &Store,
    replies: &Replies,
) -> Bot {
    let skills = builtin_skills_dir();
    let tool_timeout = Duration::from_secs(cfg.bus.tool_timeout_secs.max(1));
    let models = resolve::Models::build(cfg, &spec);
    let target = &models.configured().target;
    tracing::info!(bot = %spec.id, provider = %target.provider, model = %target.model, presets = models.names().len() - 1, "bot ready");
    Bot {
        sessions: SessionStore::new(redis.clone(), &spec.id),
        // The runner serves `message`, `spawn` and the goal tools itself.
        tools: ToolClient::new(nats.clone(), &spec.id, tool_timeout)
            .with_replies(replies.clone())
            .with_local(super::served_tools::all()),
        models,
        context: ContextBuilder::new(
            spec.workspace.clone(),
            skills,
            cfg.agents.defaults.timezone.clone(),
            nanobot_core::skills::disabled_skills(cfg),
        ),
        chat_channels: cfg.chat_channels(&spec.id),
        limits: cfg.bot_limits(&spec.id),
        spec,
    }
}
