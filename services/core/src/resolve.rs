//! Which endpoint serves a bot's model: an explicit provider, `providers.custom.apiBase`, a
//! vendor detected from the model prefix / key prefix, or — with no key anywhere — the local
//! default model the fleet starts (`runner.localModelUrl`).

use std::time::Duration;

use nanobot_runtime::config::{BotSpec, Config, ProviderConfig};

use crate::provider::{Endpoint, OpenAiProvider};

/// Known OpenAI-compatible vendors: (name, model keywords, default base URL).
const VENDORS: &[(&str, &[&str], &str)] = &[
    (
        "openrouter",
        &["openrouter"],
        "https://openrouter.ai/api/v1",
    ),
    ("deepseek", &["deepseek"], "https://api.deepseek.com"),
    ("groq", &["groq"], "https://api.groq.com/openai/v1"),
    (
        "moonshot",
        &["moonshot", "kimi"],
        "https://api.moonshot.cn/v1",
    ),
    (
        "zhipu",
        &["zhipu", "glm"],
        "https://open.bigmodel.cn/api/paas/v4",
    ),
    (
        "dashscope",
        &["dashscope", "qwen"],
        "https://dashscope.aliyuncs.com/compatible-mode/v1",
    ),
    (
        "siliconflow",
        &["siliconflow"],
        "https://api.siliconflow.cn/v1",
    ),
    (
        "volcengine",
        &["volcengine", "doubao"],
        "https://ark.cn-beijing.volces.com/api/v3",
    ),
    (
        "gemini",
        &["gemini"],
        "https://generativelanguage.googleapis.com/v1beta/openai",
    ),
    ("minimax", &["minimax"], "https://api.minimax.io/v1"),
    ("aihubmix", &["aihubmix"], "https://aihubmix.com/v1"),
    (
        "anthropic",
        &["anthropic", "claude"],
        "https://api.anthropic.com/v1",
    ),
    ("openai", &["openai", "gpt"], "https://api.openai.com/v1"),
    ("vllm", &["vllm"], "http://127.0.0.1:8000/v1"),
];

/// The resolved target of a bot's LLM calls.
#[derive(Debug, Clone)]
pub struct Target {
    /// Provider name (`custom`, `openrouter`, …, or `local`).
    pub provider: String,
    /// Model name sent on the wire.
    pub model: String,
    /// Endpoint.
    pub endpoint: Endpoint,
}

fn endpoint(p: &ProviderConfig, default_base: &str) -> Endpoint {
    Endpoint {
        api_base: p
            .api_base
            .clone()
            .unwrap_or_else(|| default_base.to_string()),
        api_key: p.api_key.clone(),
        headers: p
            .extra_headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

fn default_base(name: &str) -> &'static str {
    VENDORS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, _, b)| *b)
        .unwrap_or("")
}

/// Strips a vendor prefix (`deepseek/deepseek-chat` → `deepseek-chat`) except for gateways
/// (openrouter, aihubmix, custom) that route by the full name.
fn wire_model(provider: &str, model: &str) -> String {
    if matches!(provider, "openrouter" | "aihubmix" | "custom" | "local") {
        return model.to_string();
    }
    match model.split_once('/') {
        Some((prefix, rest)) if prefix == provider => rest.to_string(),
        _ => model.to_string(),
    }
}

/// Resolves the endpoint for `bot`.
pub fn resolve(cfg: &Config, bot: &BotSpec) -> Target {
    let usable = |p: &ProviderConfig| !p.api_key.is_empty() || p.api_base.is_some();
    let pick = |name: &str| -> Option<Target> {
        let p = cfg.providers.get(name).filter(|p| usable(p))?;
        Some(Target {
            provider: name.to_string(),
            model: wire_model(name, &bot.model),
            endpoint: endpoint(p, default_base(name)),
        })
    };
    if bot.provider != "auto"
        && let Some(t) = pick(&bot.provider)
    {
        return t;
    }
    if let Some(t) = pick("custom") {
        return t;
    }
    let model = bot.model.to_lowercase();
    let prefix = model.split('/').next().unwrap_or("");
    for (name, keywords, _) in VENDORS {
        if (prefix == *name || keywords.iter().any(|k| model.contains(k)))
            && let Some(t) = pick(name)
        {
            return t;
        }
    }
    for (name, p) in &cfg.providers {
        if p.api_key.starts_with("sk-or-") {
            return pick(name).unwrap_or_else(|| local(cfg));
        }
    }
    if let Some((name, _)) = cfg.providers.iter().find(|(_, p)| usable(p)) {
        return pick(name).unwrap_or_else(|| local(cfg));
    }
    local(cfg)
}

fn local(cfg: &Config) -> Target {
    Target {
        provider: "local".into(),
        model: cfg.runner.local_model.clone(),
        endpoint: Endpoint {
            api_base: cfg.runner.local_model_url.clone(),
            api_key: String::new(),
            headers: Vec::new(),
        },
    }
}

/// Returns a provider client for `bot` with the configured LLM wall timeout.
pub fn provider_for(cfg: &Config, bot: &BotSpec) -> (Target, OpenAiProvider) {
    let target = resolve(cfg, bot);
    let timeout =
        (cfg.runner.llm_timeout_secs > 0).then(|| Duration::from_secs(cfg.runner.llm_timeout_secs));
    let provider = OpenAiProvider::new(target.endpoint.clone(), timeout);
    (target, provider)
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
}
