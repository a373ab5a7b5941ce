//! The provider registry (upstream `providers/registry.py`, reference §16.2): every vendor the
//! fleet knows, in match-priority order (upstream 0.3.5's entries except the OAuth ones,
//! `openai_codex`, `xai_grok`, `github_copilot`, Bedrock and the transcription-only
//! `assemblyai`, whose backends the fleet does not speak), with its backend, env key, model keywords, default
//! base URL, key-prefix / base-URL detection and per-model overrides.

/// How a provider is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `POST …/chat/completions`.
    OpenAiCompat,
    /// Native Anthropic Messages.
    Anthropic,
}

/// A per-model override: models whose lowercased name contains `model` use `temperature`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelOverride {
    /// Substring of the model name.
    pub model: &'static str,
    /// Forced temperature.
    pub temperature: f64,
}

/// One registry entry.
#[derive(Debug, Clone, Copy)]
pub struct ProviderSpec {
    /// Config key under `providers` (snake_case).
    pub name: &'static str,
    /// How it is called.
    pub backend: Backend,
    /// Environment variable read when the config has no key.
    pub env_key: &'static str,
    /// Lowercase model-name keywords that select it.
    pub keywords: &'static [&'static str],
    /// Base URL when `apiBase` is not set (empty: `apiBase` required).
    pub default_api_base: &'static str,
    /// API-key prefix that identifies it (`sk-or-` for OpenRouter).
    pub key_prefix: &'static str,
    /// Substring of an `apiBase` that identifies it.
    pub base_keyword: &'static str,
    /// Routes any vendor's models (keeps `vendor/model` names).
    pub is_gateway: bool,
    /// A server on the user's machine (usable without a key).
    pub is_local: bool,
    /// Usable with only an `apiBase` (custom, azure).
    pub is_direct: bool,
    /// Strips any `vendor/` prefix from the model name (gateways that want bare names).
    pub strip_any_prefix: bool,
    /// Honours `cache_control` markers.
    pub supports_prompt_caching: bool,
    /// Per-model overrides.
    pub model_overrides: &'static [ModelOverride],
}

const fn spec(name: &'static str, env_key: &'static str, base: &'static str) -> ProviderSpec {
    ProviderSpec {
        name,
        backend: Backend::OpenAiCompat,
        env_key,
        keywords: &[],
        default_api_base: base,
        key_prefix: "",
        base_keyword: "",
        is_gateway: false,
        is_local: false,
        is_direct: false,
        strip_any_prefix: false,
        supports_prompt_caching: false,
        model_overrides: &[],
    }
}

/// The registry, in match-priority order.
pub const PROVIDERS: &[ProviderSpec] = &[
    ProviderSpec {
        is_direct: true,
        ..spec("custom", "", "")
    },
    ProviderSpec {
        is_direct: true,
        keywords: &["azure"],
        base_keyword: "azure",
        ..spec("azure_openai", "AZURE_OPENAI_API_KEY", "")
    },
    ProviderSpec {
        keywords: &["openrouter"],
        key_prefix: "sk-or-",
        base_keyword: "openrouter",
        is_gateway: true,
        supports_prompt_caching: true,
        ..spec(
            "openrouter",
            "OPENROUTER_API_KEY",
            "https://openrouter.ai/api/v1",
        )
    },
    ProviderSpec {
        keywords: &["orcarouter"],
        key_prefix: "sk-orca-",
        base_keyword: "orcarouter",
        is_gateway: true,
        ..spec(
            "orcarouter",
            "ORCAROUTER_API_KEY",
            "https://api.orcarouter.ai/v1",
        )
    },
    ProviderSpec {
        keywords: &["edenai"],
        base_keyword: "edenai",
        is_gateway: true,
        ..spec("edenai", "EDENAI_API_KEY", "https://api.edenai.run/v3")
    },
    ProviderSpec {
        keywords: &["opencode/", "opencode", "opencode-zen", "opencode_zen"],
        base_keyword: "opencode.ai/zen",
        is_gateway: true,
        ..spec("opencode", "OPENCODE_API_KEY", "https://opencode.ai/zen/v1")
    },
    ProviderSpec {
        keywords: &["opencode/", "opencode_zen", "opencode-zen"],
        base_keyword: "opencode.ai/zen",
        is_gateway: true,
        ..spec(
            "opencode_zen",
            "OPENCODE_API_KEY",
            "https://opencode.ai/zen/v1",
        )
    },
    ProviderSpec {
        keywords: &["opencode-go", "opencode_go"],
        base_keyword: "opencode.ai/zen/go",
        is_gateway: true,
        ..spec(
            "opencode_go",
            "OPENCODE_API_KEY",
            "https://opencode.ai/zen/go/v1",
        )
    },
    ProviderSpec {
        keywords: &["huggingface"],
        key_prefix: "hf_",
        base_keyword: "huggingface",
        is_gateway: true,
        ..spec(
            "huggingface",
            "HF_TOKEN",
            "https://router.huggingface.co/v1",
        )
    },
    ProviderSpec {
        keywords: &["skywork", "skyclaw", "apifree"],
        base_keyword: "apifree.ai",
        is_gateway: true,
        ..spec(
            "skywork",
            "SKYWORK_API_KEY",
            "https://api.apifree.ai/agent/v1",
        )
    },
    ProviderSpec {
        keywords: &["aihubmix"],
        base_keyword: "aihubmix",
        is_gateway: true,
        strip_any_prefix: true,
        ..spec("aihubmix", "AIHUBMIX_API_KEY", "https://aihubmix.com/v1")
    },
    ProviderSpec {
        keywords: &["siliconflow"],
        base_keyword: "siliconflow",
        is_gateway: true,
        ..spec(
            "siliconflow",
            "SILICONFLOW_API_KEY",
            "https://api.siliconflow.cn/v1",
        )
    },
    ProviderSpec {
        keywords: &["novita"],
        base_keyword: "novita",
        is_gateway: true,
        ..spec(
            "novita",
            "NOVITA_API_KEY",
            "https://api.novita.ai/v3/openai",
        )
    },
    ProviderSpec {
        keywords: &["volcengine", "volces", "doubao"],
        base_keyword: "volces",
        is_gateway: true,
        ..spec(
            "volcengine",
            "VOLCENGINE_API_KEY",
            "https://ark.cn-beijing.volces.com/api/v3",
        )
    },
    ProviderSpec {
        keywords: &["volcengine-plan"],
        is_gateway: true,
        strip_any_prefix: true,
        ..spec(
            "volcengine_coding_plan",
            "OPENAI_API_KEY",
            "https://ark.cn-beijing.volces.com/api/coding/v3",
        )
    },
    ProviderSpec {
        keywords: &["byteplus"],
        base_keyword: "bytepluses",
        is_gateway: true,
        strip_any_prefix: true,
        ..spec(
            "byteplus",
            "OPENAI_API_KEY",
            "https://ark.ap-southeast.bytepluses.com/api/v3",
        )
    },
    ProviderSpec {
        keywords: &["byteplus-plan"],
        is_gateway: true,
        strip_any_prefix: true,
        ..spec(
            "byteplus_coding_plan",
            "OPENAI_API_KEY",
            "https://ark.ap-southeast.bytepluses.com/api/coding/v3",
        )
    },
    ProviderSpec {
        backend: Backend::Anthropic,
        keywords: &["anthropic", "claude"],
        base_keyword: "anthropic",
        supports_prompt_caching: true,
        ..spec(
            "anthropic",
            "ANTHROPIC_API_KEY",
            crate::provider::anthropic::DEFAULT_API_BASE,
        )
    },
    ProviderSpec {
        keywords: &["openai", "gpt"],
        ..spec("openai", "OPENAI_API_KEY", "https://api.openai.com/v1")
    },
    ProviderSpec {
        keywords: &["deepseek"],
        base_keyword: "deepseek",
        ..spec("deepseek", "DEEPSEEK_API_KEY", "https://api.deepseek.com")
    },
    ProviderSpec {
        keywords: &["gemini", "gemma"],
        base_keyword: "generativelanguage",
        ..spec(
            "gemini",
            "GEMINI_API_KEY",
            "https://generativelanguage.googleapis.com/v1beta/openai",
        )
    },
    ProviderSpec {
        keywords: &["zhipu", "glm", "zai"],
        base_keyword: "bigmodel",
        ..spec(
            "zhipu",
            "ZAI_API_KEY",
            "https://open.bigmodel.cn/api/paas/v4",
        )
    },
    ProviderSpec {
        keywords: &["qwen", "dashscope"],
        base_keyword: "dashscope",
        ..spec(
            "dashscope",
            "DASHSCOPE_API_KEY",
            "https://dashscope.aliyuncs.com/compatible-mode/v1",
        )
    },
    ProviderSpec {
        keywords: &["modelscope"],
        base_keyword: "modelscope",
        ..spec(
            "modelscope",
            "MODELSCOPE_API_KEY",
            "https://api-inference.modelscope.cn/v1",
        )
    },
    ProviderSpec {
        keywords: &["moonshot", "kimi"],
        base_keyword: "moonshot",
        model_overrides: &[ModelOverride {
            model: "kimi-k2.5",
            temperature: 1.0,
        }],
        ..spec("moonshot", "MOONSHOT_API_KEY", "https://api.moonshot.ai/v1")
    },
    ProviderSpec {
        backend: Backend::Anthropic,
        keywords: &["kimi-coding", "kimi_coding", "kimi-for-coding"],
        ..spec(
            "kimi_coding",
            "KIMI_CODING_API_KEY",
            "https://api.kimi.com/coding/v1",
        )
    },
    ProviderSpec {
        keywords: &["minimax"],
        base_keyword: "minimax",
        ..spec("minimax", "MINIMAX_API_KEY", "https://api.minimax.io/v1")
    },
    ProviderSpec {
        backend: Backend::Anthropic,
        keywords: &["minimax_anthropic"],
        ..spec(
            "minimax_anthropic",
            "MINIMAX_API_KEY",
            "https://api.minimax.io/anthropic",
        )
    },
    ProviderSpec {
        keywords: &["mistral", "magistral", "ministral", "codestral", "devstral"],
        base_keyword: "mistral",
        ..spec("mistral", "MISTRAL_API_KEY", "https://api.mistral.ai/v1")
    },
    ProviderSpec {
        keywords: &["stepfun", "step-"],
        base_keyword: "stepfun",
        ..spec("stepfun", "STEPFUN_API_KEY", "https://api.stepfun.com/v1")
    },
    ProviderSpec {
        keywords: &["xiaomi_mimo", "mimo"],
        ..spec(
            "xiaomi_mimo",
            "XIAOMIMIMO_API_KEY",
            "https://api.xiaomimimo.com/v1",
        )
    },
    ProviderSpec {
        keywords: &["longcat"],
        ..spec(
            "longcat",
            "LONGCAT_API_KEY",
            "https://api.longcat.chat/openai/v1",
        )
    },
    ProviderSpec {
        keywords: &["ant_ling", "ant-ling", "ling-", "ring-"],
        base_keyword: "ant-ling.com",
        ..spec(
            "ant_ling",
            "ANT_LING_API_KEY",
            "https://api.ant-ling.com/v1",
        )
    },
    ProviderSpec {
        keywords: &["vllm"],
        is_local: true,
        ..spec("vllm", "HOSTED_VLLM_API_KEY", "")
    },
    ProviderSpec {
        keywords: &["ollama"],
        base_keyword: "11434",
        is_local: true,
        ..spec("ollama", "OLLAMA_API_KEY", "http://localhost:11434/v1")
    },
    ProviderSpec {
        keywords: &["lm_studio", "lmstudio"],
        base_keyword: "1234",
        is_local: true,
        ..spec("lm_studio", "LM_STUDIO_API_KEY", "http://localhost:1234/v1")
    },
    ProviderSpec {
        keywords: &["atomic-chat", "atomic_chat", "atomicchat"],
        base_keyword: "1337",
        is_local: true,
        ..spec(
            "atomic_chat",
            "ATOMIC_CHAT_API_KEY",
            "http://localhost:1337/v1",
        )
    },
    ProviderSpec {
        keywords: &["openvino", "ovms"],
        is_local: true,
        is_direct: true,
        ..spec("ovms", "", "http://localhost:8000/v3")
    },
    ProviderSpec {
        keywords: &["nvidia", "nemotron"],
        key_prefix: "nvapi-",
        base_keyword: "nvidia",
        ..spec(
            "nvidia",
            "NVIDIA_API_KEY",
            "https://integrate.api.nvidia.com/v1",
        )
    },
    ProviderSpec {
        keywords: &["groq"],
        base_keyword: "groq",
        ..spec("groq", "GROQ_API_KEY", "https://api.groq.com/openai/v1")
    },
    ProviderSpec {
        keywords: &["qianfan", "ernie"],
        ..spec(
            "qianfan",
            "QIANFAN_API_KEY",
            "https://qianfan.baidubce.com/v2",
        )
    },
];

/// Returns the spec named `name` (`-` and `_` are equivalent, case-insensitive).
pub fn find(name: &str) -> Option<&'static ProviderSpec> {
    let name = name.to_lowercase().replace('-', "_");
    PROVIDERS.iter().find(|s| s.name == name)
}

/// Returns the spec an API key identifies by prefix.
pub fn by_key_prefix(key: &str) -> Option<&'static ProviderSpec> {
    PROVIDERS
        .iter()
        .find(|s| !s.key_prefix.is_empty() && key.starts_with(s.key_prefix))
}

/// Returns the spec an `apiBase` identifies by keyword.
pub fn by_base_keyword(base: &str) -> Option<&'static ProviderSpec> {
    let base = base.to_lowercase();
    PROVIDERS
        .iter()
        .find(|s| !s.base_keyword.is_empty() && base.contains(s.base_keyword))
}

impl ProviderSpec {
    /// Whether a lowercased model name mentions one of this spec's keywords.
    pub fn matches_model(&self, model: &str) -> bool {
        self.keywords.iter().any(|k| model.contains(k))
    }

    /// The model name sent on the wire: `name/…` prefix stripped (any prefix for
    /// `strip_any_prefix` gateways; none for other gateways and direct endpoints).
    pub fn wire_model(&self, model: &str) -> String {
        match model.split_once('/') {
            Some((_, rest)) if self.strip_any_prefix => rest.to_string(),
            Some((prefix, rest))
                if !self.is_gateway
                    && !self.is_direct
                    && find(prefix).is_some_and(|s| s.name == self.name) =>
            {
                rest.to_string()
            }
            _ => model.to_string(),
        }
    }

    /// The temperature forced for `model`, if any.
    pub fn temperature_override(&self, model: &str) -> Option<f64> {
        let model = model.to_lowercase();
        self.model_overrides
            .iter()
            .find(|o| model.contains(o.model))
            .map(|o| o.temperature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_names_are_unique_and_lookups_work() {
        let mut names: Vec<_> = PROVIDERS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PROVIDERS.len());
        assert_eq!(find("lm-studio").map(|s| s.name), Some("lm_studio"));
        assert_eq!(
            by_key_prefix("sk-or-v1-x").map(|s| s.name),
            Some("openrouter")
        );
        assert_eq!(by_key_prefix("nvapi-1").map(|s| s.name), Some("nvidia"));
        assert_eq!(
            by_base_keyword("http://127.0.0.1:11434/v1").map(|s| s.name),
            Some("ollama")
        );
        assert_eq!(
            find("anthropic").map(|s| s.backend),
            Some(Backend::Anthropic)
        );
    }

    #[test]
    fn upstreams_registry_entries_are_known_in_upstreams_order() {
        let upstream = [
            "custom",
            "azure_openai",
            "openrouter",
            "orcarouter",
            "edenai",
            "opencode",
            "opencode_zen",
            "opencode_go",
            "huggingface",
            "skywork",
            "aihubmix",
            "siliconflow",
            "novita",
            "volcengine",
            "volcengine_coding_plan",
            "byteplus",
            "byteplus_coding_plan",
            "anthropic",
            "openai",
            "deepseek",
            "gemini",
            "zhipu",
            "dashscope",
            "modelscope",
            "moonshot",
            "kimi_coding",
            "minimax",
            "minimax_anthropic",
            "mistral",
            "stepfun",
            "xiaomi_mimo",
            "longcat",
            "ant_ling",
            "vllm",
            "ollama",
            "lm_studio",
            "atomic_chat",
            "ovms",
            "nvidia",
            "groq",
            "qianfan",
        ];
        let names: Vec<&str> = PROVIDERS.iter().map(|s| s.name).collect();
        assert_eq!(names, upstream);
        assert_eq!(
            by_key_prefix("sk-orca-1").map(|s| s.name),
            Some("orcarouter")
        );
        assert_eq!(
            by_base_keyword("http://127.0.0.1:1337/v1").map(|s| s.name),
            Some("atomic_chat")
        );
        assert_eq!(
            find("minimax-anthropic").map(|s| s.backend),
            Some(Backend::Anthropic)
        );
        assert_eq!(
            find("byteplus").unwrap().wire_model("byteplus/seed-1.6"),
            "seed-1.6"
        );
    }

    #[test]
    fn wire_model_names_and_overrides_follow_the_spec() {
        let s = |n| find(n).unwrap();
        assert_eq!(
            s("deepseek").wire_model("deepseek/deepseek-chat"),
            "deepseek-chat"
        );
        assert_eq!(s("anthropic").wire_model("anthropic/claude-x"), "claude-x");
        assert_eq!(s("anthropic").wire_model("claude-x"), "claude-x");
        assert_eq!(
            s("openrouter").wire_model("anthropic/claude-x"),
            "anthropic/claude-x"
        );
        assert_eq!(s("aihubmix").wire_model("anthropic/claude-x"), "claude-x");
        assert_eq!(s("custom").wire_model("custom/m"), "custom/m");
        assert_eq!(s("moonshot").temperature_override("kimi-k2.5"), Some(1.0));
        assert_eq!(s("moonshot").temperature_override("kimi-k2"), None);
    }
}
