//! What a memory worker keeps per bot: its session store, LLM client, prompt builder and tool
//! list (the archive call offers the bot's tools with `tool_choice: none`, as upstream).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nanobot_runtime::store::Store;
use serde_json::Value;

use nanobot_core::context::ContextBuilder;
use nanobot_core::memory::MemoryFiles;
use nanobot_core::provider::Provider;
use nanobot_core::resolve::{self, Target};
use nanobot_core::session::SessionStore;
use nanobot_core::tools::ToolClient;
use nanobot_runtime::config::{BotSpec, Config};

/// One bot as the memory worker sees it.
#[derive(Debug)]
pub struct MemoryBot {
    /// The bot's resolved config.
    pub spec: BotSpec,
    /// Its sessions (reads; writes go through a fenced store under the session lease).
    pub sessions: SessionStore,
    /// Its LLM client.
    pub provider: Provider,
    /// Where the LLM calls go.
    pub target: Target,
    /// Its system prompt builder.
    pub context: ContextBuilder,
    /// Its tool list, from the executors.
    pub tools: ToolClient,
}

impl MemoryBot {
    /// Returns the bot's memory files.
    pub fn files(&self) -> MemoryFiles {
        MemoryFiles::new(&self.spec.workspace)
    }

    /// Returns the bot's tool definitions (empty when no executor answers).
    pub async fn tool_definitions(&self) -> Vec<Value> {
        let specs = self.tools.specs().await;
        ToolClient::definitions(&specs)
    }
}

/// Builds the state of every configured bot, by id.
pub fn build(
    cfg: &Config,
    nats: &async_nats::Client,
    redis: &Store,
) -> HashMap<String, Arc<MemoryBot>> {
    cfg.bots()
        .into_iter()
        .map(|spec| (spec.id.clone(), Arc::new(build_one(cfg, spec, nats, redis))))
        .collect()
}

/// Builds the state of bot `spec` of `cfg`.
pub fn build_one(
    cfg: &Config,
    spec: BotSpec,
    nats: &async_nats::Client,
    redis: &Store,
) -> MemoryBot {
    let tool_timeout = Duration::from_secs(cfg.bus.tool_timeout_secs.max(1));
    let (target, provider) = resolve::provider_for(cfg, &spec);
    MemoryBot {
        sessions: SessionStore::new(redis.clone(), &spec.id),
        provider,
        target,
        context: ContextBuilder::new(
            spec.workspace.clone(),
            None,
            cfg.agents.defaults.timezone.clone(),
            nanobot_core::skills::disabled_skills(cfg),
        ),
        tools: ToolClient::new(nats.clone(), &spec.id, tool_timeout),
        spec,
    }
}
