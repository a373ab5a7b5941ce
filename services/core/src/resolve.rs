//! Which endpoint serves a bot's model, by upstream's detection order (reference §16.3):
//! an explicit provider; a `provider/…` model prefix naming a registry entry or a custom
//! provider; a model keyword with a usable key; a configured local server; the first
//! provider with a key (gateways first); a custom provider with an `apiBase`. With nothing
//! usable, the local default model the fleet starts (`runner.localModelUrl`).

use std::time::Duration;

use nanobot_runtime::config::{BotSpec, Config, ProviderConfig};

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

/// Returns the target and provider client of `bot`, with upstream's
/// `agents.defaults.fallbackModels` behind it when any are configured.
pub fn provider_for(cfg: &Config, bot: &BotSpec) -> (Target, Provider) {
    let target = resolve(cfg, bot);
    let primary = provider(&target);
    let chain: Vec<Fallback> = fallback_specs(cfg, bot)
        .iter()
        .map(|(spec, temperature)| {
            let t = resolve(cfg, spec);
            Fallback {
                provider: provider(&t),
                model: t.model,
                temperature: temperature.or(t.temperature),
            }
        })
        .collect();
    if chain.is_empty() {
        return (target, primary);
    }
    let provider = Provider::Fallback(std::sync::Arc::new(Fallbacks { primary, chain }));
    (target, provider)
}

/// The bots `agents.defaults.fallbackModels` stands for, in order: each entry is a model
/// preset's name (`modelPresets.<name>`) or an inline `{model, provider, temperature}`; the
/// provider defaults to `auto` (detected from the model as for the bot). Entries naming no
/// model are skipped with a warning.
pub fn fallback_specs(cfg: &Config, bot: &BotSpec) -> Vec<(BotSpec, Option<f64>)> {
    let extra = &cfg.agents.defaults.extra;
    let Some(entries) = extra
        .get("fallbackModels")
        .or_else(|| extra.get("fallback_models"))
        .and_then(|v| v.as_array())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries {
        let preset = match entry {
            serde_json::Value::String(name) => cfg.model_presets.get(name),
            other => Some(other),
        };
        let model = preset
            .and_then(|p| p.get("model"))
            .and_then(|m| m.as_str())
            .filter(|m| !m.is_empty());
        let Some(model) = model else {
            tracing::warn!(entry = %entry, "fallback model entry names no model; skipped");
            continue;
        };
        let provider = preset
            .and_then(|p| p.get("provider"))
            .and_then(|m| m.as_str())
            .unwrap_or("auto");
        let temperature = preset
            .and_then(|p| p.get("temperature"))
            .and_then(|t| t.as_f64());
        out.push((
            BotSpec {
                model: model.to_string(),
                provider: provider.to_string(),
                ..bot.clone()
            },
            temperature,
        ));
    }
    out
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
    fn fallback_models_are_presets_or_inline_entries_in_order() {
        let c = cfg(
            r#"{"agents":{"defaults":{"model":"primary","fallbackModels":["cheap",{"model":"deepseek/deepseek-chat"},{"provider":"x"},"missing"]}},
                "modelPresets":{"cheap":{"model":"gpt-4o-mini","provider":"openai","temperature":0.2}}}"#,
        );
        let specs: Vec<(String, String, Option<f64>)> = fallback_specs(&c, &c.bots()[0])
            .into_iter()
            .map(|(b, t)| (b.model, b.provider, t))
            .collect();
        assert_eq!(
            specs,
            [
                ("gpt-4o-mini".into(), "openai".into(), Some(0.2)),
                ("deepseek/deepseek-chat".into(), "auto".into(), None),
            ]
        );
        assert!(fallback_specs(&cfg("{}"), &cfg("{}").bots()[0]).is_empty());
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
