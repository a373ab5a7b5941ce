//! Which endpoint serves a bot's model, by upstream's detection order (reference §16.3):
//! an explicit provider; a `provider/…` model prefix naming a registry entry or a custom
//! provider; a model keyword with a usable key; a configured local server; the first
//! provider with a key (gateways first); a custom provider with an `apiBase`. With nothing
//! usable, the local default model the fleet starts (`runner.localModelUrl`).

use std::time::Duration;

use nanobot_runtime::config::{BotSpec, Config, FallbackModel, ModelPreset, ProviderConfig};

use crate::provider::{AnthropicProvider, Endpoint, Fallback, Fallbacks, OpenAiProvider, Provider};
use crate::registry::{self, Backend, ProviderSpec};

/// The resolved target of a bot's LLM calls.
#[derive(Debug, Clone)]
pub struct Target {
    /// Provider name (`custom`, `openrouter`, `anthropic`, a custom name, or `local`).
    pub provider: String,
    /// How it is called.
    pub backend: Backend,
    /// Model name sent on the wire.
    pub model: String,
    /// Endpoint.
    pub endpoint: Endpoint,
    /// Temperature forced by a per-model override.
    pub temperature: Option<f64>,
    /// The provider honours `cache_control` markers (registry `supports_prompt_caching`).
    pub prompt_caching: bool,
}

/// Reads an environment variable (injected so tests never touch the process environment).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Provider name of the local default model the fleet starts when nothing else is usable.
pub const LOCAL_PROVIDER: &str = "local";

impl Target {
    /// Returns whether the provider caps replies on purpose, so a reply cut at the token limit
    /// must not be continued: the local default model (its server limits completions to keep
    /// a small CPU model answering in seconds).
    pub fn caps_replies(&self) -> bool {
        self.provider == LOCAL_PROVIDER
    }
}

struct Candidate<'a> {
    name: &'a str,
    config: &'a ProviderConfig,
    /// The registry entry (for custom names: inferred from key prefix or base keyword).
    spec: Option<&'static ProviderSpec>,
    key: String,
}

impl Candidate<'_> {
    fn is_registry(&self) -> bool {
        registry::find(self.name).is_some()
    }

    /// Usable: has a key, or is local/direct with an `apiBase` (or a local default base).
    fn usable(&self) -> bool {
        if !self.key.is_empty() {
            return true;
        }
        match self.spec {
            Some(s) if s.is_local => self.config.api_base.is_some(),
            Some(s) if s.is_direct => self.config.api_base.is_some(),
            _ => !self.is_registry() && self.config.api_base.is_some(),
        }
    }

    fn target(&self, model: &str) -> Target {
        let spec = self.spec;
        let default_base = spec.map_or("", |s| s.default_api_base);
        let wire = match (self.is_registry(), spec) {
            (true, Some(s)) => s.wire_model(model),
            _ => model.to_string(),
        };
        Target {
            provider: self.name.to_string(),
            backend: spec.map_or(Backend::OpenAiCompat, |s| s.backend),
            temperature: spec.and_then(|s| s.temperature_override(model)),
            prompt_caching: spec.is_some_and(|s| s.supports_prompt_caching),
            model: wire,
            endpoint: Endpoint {
                api_base: self
                    .config
                    .api_base
                    .clone()
                    .unwrap_or_else(|| default_base.to_string()),
                api_key: self.key.clone(),
                headers: self
                    .config
                    .extra_headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
        }
    }
}

fn candidates<'a>(cfg: &'a Config, env: EnvLookup<'_>) -> Vec<Candidate<'a>> {
    let mut out: Vec<Candidate<'a>> = Vec::new();
    // Registry entries first, in registry order; then custom providers in config order.
    for spec in registry::PROVIDERS {
        let entry = cfg
            .providers
            .iter()
            .find(|(name, _)| registry::find(name).is_some_and(|s| s.name == spec.name));
        if let Some((name, config)) = entry {
            let key = if config.api_key.is_empty() && !spec.env_key.is_empty() {
                env(spec.env_key).unwrap_or_default()
            } else {
                config.api_key.clone()
            };
            out.push(Candidate {
                name,
                config,
                spec: Some(spec),
                key,
            });
        }
    }
    for (name, config) in &cfg.providers {
        if registry::find(name).is_none() {
            let spec = registry::by_key_prefix(&config.api_key).or_else(|| {
                config
                    .api_base
                    .as_deref()
                    .and_then(registry::by_base_keyword)
            });
            out.push(Candidate {
                name,
                config,
                spec,
                key: config.api_key.clone(),
            });
        }
    }
    out
}

/// Resolves the endpoint for `bot`, reading missing keys from the process environment.
pub fn resolve(cfg: &Config, bot: &BotSpec) -> Target {
    resolve_with(cfg, bot, &|k| {
        std::env::var(k).ok().filter(|v| !v.is_empty())
    })
}

/// Resolves the endpoint for `bot` with an explicit environment.
pub fn resolve_with(cfg: &Config, bot: &BotSpec, env: EnvLookup<'_>) -> Target {
    let all = candidates(cfg, env);
    let model = bot.model.to_lowercase();
    let same =
        |a: &str, b: &str| a.to_lowercase().replace('-', "_") == b.to_lowercase().replace('-', "_");
    // 1. An explicit provider.
    if bot.provider != "auto"
        && let Some(c) = all.iter().find(|c| same(c.name, &bot.provider))
        && c.usable()
    {
        return c.target(&bot.model);
    }
    // 2–3. A `provider/…` prefix naming a registry entry or a custom provider.
    if let Some((prefix, _)) = model.split_once('/')
        && let Some(c) = all.iter().find(|c| same(c.name, prefix) && c.usable())
    {
        return c.target(&bot.model);
    }
    // 4. A model keyword with a usable key (local servers only with an apiBase).
    let foreign_prefix = model
        .split_once('/')
        .is_some_and(|(p, _)| registry::find(p).is_some());
    for c in all.iter().filter(|c| c.is_registry() && c.usable()) {
        let Some(spec) = c.spec else { continue };
        if spec.is_local && foreign_prefix {
            continue;
        }
        if spec.matches_model(&model) {
            return c.target(&bot.model);
        }
    }
    // 5. A configured local server (one whose apiBase names it first).
    let is_local =
        |c: &&Candidate<'_>| c.spec.is_some_and(|s| s.is_local) && c.config.api_base.is_some();
    let base_named = |c: &&Candidate<'_>| {
        c.spec.is_some_and(|s| {
            c.config
                .api_base
                .as_deref()
                .is_some_and(|b| !s.base_keyword.is_empty() && b.contains(s.base_keyword))
        })
    };
    if let Some(c) = all
        .iter()
        .filter(is_local)
        .find(base_named)
        .or_else(|| all.iter().find(is_local))
    {
        return c.target(&bot.model);
    }
    // 6. The first provider with a key, gateways first.
    let keyed = |c: &&Candidate<'_>| !c.key.is_empty();
    let gateway = |c: &&Candidate<'_>| c.spec.is_some_and(|s| s.is_gateway);
    if let Some(c) = all
        .iter()
        .filter(keyed)
        .find(gateway)
        .or_else(|| all.iter().find(keyed))
    {
        return c.target(&bot.model);
    }
    // 7. A custom endpoint with an apiBase.
    if let Some(c) = all
        .iter()
        .find(|c| c.config.api_base.is_some() && c.spec.is_none_or(|s| s.is_direct))
    {
        return c.target(&bot.model);
    }
    local(cfg)
}

fn local(cfg: &Config) -> Target {
    Target {
        provider: LOCAL_PROVIDER.into(),
        backend: Backend::OpenAiCompat,
        model: cfg.runner.local_model.clone(),
        temperature: None,
        prompt_caching: false,
        endpoint: Endpoint {
            api_base: cfg.runner.local_model_url.clone(),
            api_key: String::new(),
            headers: Vec::new(),
        },
    }
}

/// Returns the provider client for a resolved target (the runner applies the wall timeout).
pub fn provider(target: &Target) -> Provider {
    match target.backend {
        Backend::Anthropic => {
            Provider::Anthropic(AnthropicProvider::new(target.endpoint.clone(), None))
        }
        Backend::OpenAiCompat => Provider::OpenAi(
            OpenAiProvider::new(target.endpoint.clone(), None)
                .with_prompt_caching(target.prompt_caching),
        ),
    }
}

/// Returns the target and provider client of `bot`'s configured model (its preset when
/// `agents.defaults.modelPreset` applies), with upstream's `agents.defaults.fallbackModels`
/// behind it when any are configured.
pub fn provider_for(cfg: &Config, bot: &BotSpec) -> (Target, Provider) {
    let runtime = runtime(cfg, bot, DEFAULT_PRESET, &configured_preset(cfg, bot));
    (runtime.target, runtime.provider)
}

/// The name of the preset `agents.defaults` stands for (upstream's implicit `default`).
pub const DEFAULT_PRESET: &str = "default";

/// Upstream's `LLMRuntime` of one preset: where a turn's LLM calls go and with which settings.
#[derive(Debug)]
pub struct Runtime {
    /// `default` or the preset's name.
    pub preset: String,
    /// Where the calls go.
    pub target: Target,
    /// The client (with the fallback models behind it, when configured).
    pub provider: Provider,
    /// Completion cap.
    pub max_tokens: u32,
    /// Context window.
    pub context_window_tokens: u32,
    /// Temperature (a per-model override wins over the preset's).
    pub temperature: f64,
    /// `reasoning_effort`.
    pub reasoning_effort: Option<String>,
}

/// Every runtime of a bot, built once per runner: `default` (the bot's model, or the preset
/// `agents.defaults.modelPreset` names) and one per `modelPresets` entry. Each has its own
/// fallback chain and circuit breaker.
#[derive(Debug)]
pub struct Models {
    runtimes: Vec<Runtime>,
    /// The runtime a session without a selection uses.
    configured: usize,
}

impl Models {
    /// Builds the runtimes of `bot`.
    pub fn build(cfg: &Config, bot: &BotSpec) -> Self {
        let mut runtimes = vec![runtime(cfg, bot, DEFAULT_PRESET, &default_preset(cfg, bot))];
        for (name, preset) in &cfg.model_presets {
            runtimes.push(runtime(cfg, bot, name, preset));
        }
        let configured = bot_preset_name(cfg, bot)
            .and_then(|name| runtimes.iter().position(|r| r.preset == name))
            .unwrap_or(0);
        Self {
            runtimes,
            configured,
        }
    }

    /// The runtime of sessions without a `/model` selection.
    pub fn configured(&self) -> &Runtime {
        &self.runtimes[self.configured]
    }

    /// Preset names as `/model` lists them: `default` first, then the others sorted.
    pub fn names(&self) -> Vec<&str> {
        self.runtimes.iter().map(|r| r.preset.as_str()).collect()
    }

    /// The runtime of preset `name` (exact, else the one case-insensitive match); the error is
    /// upstream's `model_preset 'x' not found. Available: …`.
    pub fn named(&self, name: &str) -> Result<&Runtime, String> {
        let name = name.trim();
        if name.is_empty() {
            return Err("model_preset must be a non-empty string".into());
        }
        if let Some(r) = self.runtimes.iter().find(|r| r.preset == name) {
            return Ok(r);
        }
        let folded: Vec<&Runtime> = self
            .runtimes
            .iter()
            .filter(|r| r.preset.to_lowercase() == name.to_lowercase())
            .collect();
        match folded[..] {
            [one] => Ok(one),
            _ => {
                // Upstream lists the catalog in config order with `default` last.
                let mut names: Vec<&str> = self.names()[1..].to_vec();
                names.push(DEFAULT_PRESET);
                Err(format!(
                    "model_preset '{name}' not found. Available: {}",
                    names.join(", ")
                ))
            }
        }
    }

    /// The runtime a session's turn uses: its `/model` selection, else the configured one. A
    /// selection naming a preset no longer configured falls back to the configured runtime.
    pub fn for_session(&self, metadata: &serde_json::Map<String, serde_json::Value>) -> &Runtime {
        self.selected(metadata).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "session selects a removed model preset, using the configured model");
            self.configured()
        })
    }

    /// The runtime a session selected with `/model` (the configured one without a selection);
    /// the error of a selection naming no configured preset.
    pub fn selected(
        &self,
        metadata: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<&Runtime, String> {
        match metadata.get(crate::session::meta::MODEL_PRESET) {
            None => Ok(self.configured()),
            Some(serde_json::Value::String(name)) => self.named(name),
            Some(_) => Err("session model preset must be a non-empty string".into()),
        }
    }
}

/// The preset `bot` is configured with: `agents.defaults.modelPreset`, unless the bot sets its
/// own `model` under `bots.<id>`.
fn bot_preset_name<'a>(cfg: &'a Config, bot: &BotSpec) -> Option<&'a str> {
    let own_model = cfg.bots.get(&bot.id).is_some_and(|b| b.model.is_some());
    cfg.agents
        .defaults
        .model_preset
        .as_deref()
        .filter(|_| !own_model)
}

/// The settings of `bot`'s `default` preset (upstream `resolve_default_preset`).
fn default_preset(cfg: &Config, bot: &BotSpec) -> ModelPreset {
    let d = &cfg.agents.defaults;
    ModelPreset {
        model: bot.model.clone(),
        provider: bot.provider.clone(),
        max_tokens: d.max_tokens,
        context_window_tokens: d.context_window_tokens,
        temperature: d.temperature,
        reasoning_effort: d.reasoning_effort.clone(),
    }
}

/// The settings of `bot`'s configured preset.
fn configured_preset(cfg: &Config, bot: &BotSpec) -> ModelPreset {
    bot_preset_name(cfg, bot)
        .and_then(|name| cfg.model_presets.get(name))
        .cloned()
        .unwrap_or_else(|| default_preset(cfg, bot))
}

/// Builds the runtime of `preset` (named `name`) for `bot`.
fn runtime(cfg: &Config, bot: &BotSpec, name: &str, preset: &ModelPreset) -> Runtime {
    let spec = |p: &ModelPreset| BotSpec {
        model: p.model.clone(),
        provider: p.provider.clone(),
        ..bot.clone()
    };
    let target = resolve(cfg, &spec(preset));
    let primary = provider(&target);
    let chain: Vec<Fallback> = fallback_presets(cfg, preset)
        .iter()
        .map(|fallback| {
            let t = resolve(cfg, &spec(fallback));
            Fallback {
                provider: provider(&t),
                temperature: t.temperature.unwrap_or(fallback.temperature),
                max_tokens: fallback.max_tokens,
                reasoning_effort: fallback.reasoning_effort.clone(),
                model: t.model,
            }
        })
        .collect();
    let provider = if chain.is_empty() {
        primary
    } else {
        let cooldown = Duration::from_secs_f64(cfg.runner.fallback_cooldown_secs.max(0.0));
        Provider::Fallback(std::sync::Arc::new(Fallbacks::new(
            primary,
            target.model.clone(),
            chain,
            cooldown,
        )))
    };
    Runtime {
        preset: name.to_string(),
        temperature: target.temperature.unwrap_or(preset.temperature),
        max_tokens: preset.max_tokens,
        context_window_tokens: preset.context_window_tokens,
        reasoning_effort: preset.reasoning_effort.clone(),
        provider,
        target,
    }
}

/// The models `agents.defaults.fallbackModels` stands for behind `primary`, in order: a
/// preset's settings, or an inline entry whose unset fields are the primary's (upstream
/// `_inline_fallback_preset`; its `reasoningEffort` is its own). Names of no preset (the
/// config check rejects them) are skipped.
pub fn fallback_presets(cfg: &Config, primary: &ModelPreset) -> Vec<ModelPreset> {
    cfg.agents
        .defaults
        .fallback_models
        .iter()
        .filter_map(|entry| match entry {
            FallbackModel::Preset(name) => cfg.model_presets.get(name).cloned(),
            FallbackModel::Inline(f) => Some(ModelPreset {
                model: f.model.clone(),
                provider: f.provider.clone(),
                max_tokens: f.max_tokens.unwrap_or(primary.max_tokens),
                context_window_tokens: f
                    .context_window_tokens
                    .unwrap_or(primary.context_window_tokens),
                temperature: f.temperature.unwrap_or(primary.temperature),
                reasoning_effort: f.reasoning_effort.clone(),
            }),
        })
        .collect()
}

/// Returns the LLM wall timeout (`runner.llmTimeoutSecs`, 0 disables).
pub fn llm_timeout(cfg: &Config) -> Option<Duration> {
    (cfg.runner.llm_timeout_secs > 0).then(|| Duration::from_secs(cfg.runner.llm_timeout_secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: &str) -> Config {
        nanobot_runtime::config::load_str(
            Some(json),
            std::path::Path::new("c.json"),
            &Default::default(),
        )
        .unwrap()
    }

    #[test]
    fn custom_api_base_wins_and_no_key_falls_back_to_the_local_model() {
        let c = cfg(r#"{"providers":{"custom":{"apiBase":"http://127.0.0.1:9/v1"}}}"#);
        let t = resolve(&c, &c.bots()[0]);
        assert_eq!(
            (t.provider.as_str(), t.endpoint.api_base.as_str()),
            ("custom", "http://127.0.0.1:9/v1")
        );
        assert_eq!(t.model, "anthropic/claude-opus-4-5");
        let bare = cfg("{}");
        let t = resolve(&bare, &bare.bots()[0]);
        assert_eq!(t.provider, "local");
        assert_eq!(t.endpoint.api_base, "http://127.0.0.1:18080/v1");
        assert!(
            t.caps_replies(),
            "the local model's capped replies are never continued"
        );
        assert!(!resolve(&c, &c.bots()[0]).caps_replies());
    }

    #[test]
    fn vendors_are_detected_by_model_prefix_and_key_prefix() {
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"deepseek/deepseek-chat"}},"providers":{"deepseek":{"apiKey":"k"}}}"#,
        );
        let t = resolve(&c, &c.bots()[0]);
        assert_eq!(
            (t.provider.as_str(), t.model.as_str()),
            ("deepseek", "deepseek-chat")
        );
        assert_eq!(t.endpoint.api_base, "https://api.deepseek.com");
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"meta/llama"}},"providers":{"mine":{"apiKey":"sk-or-123"}}}"#,
        );
        assert_eq!(resolve(&c, &c.bots()[0]).provider, "mine");
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn claude_models_with_an_anthropic_key_use_the_native_backend() {
        let c = cfg(r#"{"providers":{"anthropic":{"apiKey":"sk-ant-1"}}}"#);
        let t = resolve_with(&c, &c.bots()[0], &no_env);
        assert_eq!(t.backend, Backend::Anthropic);
        assert_eq!(t.model, "claude-opus-4-5", "anthropic/ prefix stripped");
        assert_eq!(t.endpoint.api_base, "https://api.anthropic.com");
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"claude-sonnet-4","provider":"anthropic"}},"providers":{"anthropic":{"apiKey":"k","apiBase":"http://127.0.0.1:9"}}}"#,
        );
        let t = resolve_with(&c, &c.bots()[0], &no_env);
        assert_eq!(
            (t.backend, t.model.as_str()),
            (Backend::Anthropic, "claude-sonnet-4")
        );
        assert_eq!(t.endpoint.api_base, "http://127.0.0.1:9");
    }

    #[test]
    fn fallback_models_are_presets_or_inline_entries_inheriting_the_primary() {
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"primary","maxTokens":111,"fallbackModels":["cheap",{"model":"deepseek/deepseek-chat","provider":"auto","reasoningEffort":"low"}]}},
                "modelPresets":{"cheap":{"model":"gpt-4o-mini","provider":"openai","temperature":0.2}}}"#,
        );
        let primary = default_preset(&c, &c.bots()[0]);
        let specs: Vec<(String, String, f64, u32, Option<String>)> = fallback_presets(&c, &primary)
            .into_iter()
            .map(|p| {
                (
                    p.model,
                    p.provider,
                    p.temperature,
                    p.max_tokens,
                    p.reasoning_effort,
                )
            })
            .collect();
        assert_eq!(
            specs,
            [
                ("gpt-4o-mini".into(), "openai".into(), 0.2, 8192, None),
                (
                    "deepseek/deepseek-chat".into(),
                    "auto".into(),
                    0.1,
                    111,
                    Some("low".into())
                ),
            ]
        );
        assert!(fallback_presets(&cfg("{}"), &primary).is_empty());
    }

    #[test]
    fn presets_resolve_by_name_case_insensitively_and_sessions_pick_theirs() {
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"base-model","modelPreset":"fast"}},
                "providers":{"custom":{"apiBase":"http://127.0.0.1:9/v1"}},
                "modelPresets":{"fast":{"model":"fast-model","maxTokens":512,"contextWindowTokens":4096,"temperature":0.7,"reasoningEffort":"low"},
                                "Deep":{"model":"deep-model"}}}"#,
        );
        let models = Models::build(&c, &c.bots()[0]);
        assert_eq!(models.names(), ["default", "Deep", "fast"]);
        let fast = models.configured();
        assert_eq!(
            (
                fast.preset.as_str(),
                fast.target.model.as_str(),
                fast.max_tokens,
                fast.context_window_tokens,
                fast.temperature,
                fast.reasoning_effort.as_deref()
            ),
            ("fast", "fast-model", 512, 4096, 0.7, Some("low"))
        );
        assert_eq!(models.named("deep").unwrap().target.model, "deep-model");
        assert_eq!(models.named("default").unwrap().target.model, "base-model");
        assert_eq!(
            models.named("nope").unwrap_err(),
            "model_preset 'nope' not found. Available: Deep, fast, default"
        );
        let mut meta = serde_json::Map::new();
        assert_eq!(models.for_session(&meta).preset, "fast");
        meta.insert(crate::session::meta::MODEL_PRESET.into(), "Deep".into());
        assert_eq!(models.for_session(&meta).target.model, "deep-model");
        meta.insert(crate::session::meta::MODEL_PRESET.into(), "removed".into());
        assert_eq!(
            models.for_session(&meta).preset,
            "fast",
            "a removed preset falls back"
        );
    }

    #[test]
    fn detection_follows_upstream_order() {
        // A keyword match beats a gateway key; a gateway key beats other keys.
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"qwen-max"}},"providers":{"openrouter":{"apiKey":"sk-or-1"},"dashscope":{"apiKey":"d"}}}"#,
        );
        assert_eq!(
            resolve_with(&c, &c.bots()[0], &no_env).provider,
            "dashscope"
        );
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"mystery"}},"providers":{"deepseek":{"apiKey":"d"},"openrouter":{"apiKey":"sk-or-1"}}}"#,
        );
        let t = resolve_with(&c, &c.bots()[0], &no_env);
        assert_eq!(
            (t.provider.as_str(), t.model.as_str()),
            ("openrouter", "mystery")
        );
        assert!(t.prompt_caching, "OpenRouter honours cache_control");
        assert!(!resolve_with(&cfg("{}"), &cfg("{}").bots()[0], &no_env).prompt_caching);
        // A local server with an apiBase is used for any model.
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"llama3"}},"providers":{"ollama":{"apiBase":"http://127.0.0.1:11434/v1"}}}"#,
        );
        assert_eq!(resolve_with(&c, &c.bots()[0], &no_env).provider, "ollama");
        // Env keys fill in a configured provider without a key.
        let c =
            cfg(r#"{"agents":{"defaults":{"model":"deepseek-chat"}},"providers":{"deepseek":{}}}"#);
        let env = |k: &str| (k == "DEEPSEEK_API_KEY").then(|| "from-env".to_string());
        let t = resolve_with(&c, &c.bots()[0], &env);
        assert_eq!(
            (t.provider.as_str(), t.endpoint.api_key.as_str()),
            ("deepseek", "from-env")
        );
        // A custom provider named by the model prefix.
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"mybox/m1"}},"providers":{"mybox":{"apiBase":"http://h/v1"},"openai":{"apiKey":"k"}}}"#,
        );
        let t = resolve_with(&c, &c.bots()[0], &no_env);
        assert_eq!(
            (t.provider.as_str(), t.model.as_str()),
            ("mybox", "mybox/m1")
        );
    }

    #[test]
    fn per_model_overrides_reach_the_target() {
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"moonshot/kimi-k2.5"}},"providers":{"moonshot":{"apiKey":"k"}}}"#,
        );
        let t = resolve_with(&c, &c.bots()[0], &no_env);
        assert_eq!((t.model.as_str(), t.temperature), ("kimi-k2.5", Some(1.0)));
    }
}
