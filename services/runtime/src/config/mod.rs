//! Configuration: nanobot's `config.json` plus the fleet sections, with env overrides.
//!
//! # Layout
//! - [`schema`]: the typed tree and upstream defaults.
//! - [`load`]: file, `${VAR}` interpolation, `NANOBOT_…__…` env overrides, per-section parsing.
//! - `validate`: semantic checks; every problem is reported at once.
//! - `sections`: a channel's per-bot sections; `channel_rules`: the checks every channel's
//!   sections share (unknown keys, required keys, one bot per token or app, `leaseSecs`, URLs).

mod channel_rules;
pub mod dingtalk;
pub mod discord;
pub mod email;
pub mod feishu;
pub mod load;
pub mod napcat;
pub mod qq;
pub mod schema;
pub mod scope;
pub mod secrets;
mod sections;
pub mod slack;
pub mod telegram;
mod tools;
mod validate;
pub mod websocket;
pub mod wecom;

use std::path::{Path, PathBuf};

pub use discord::{DISCORD_API, DISCORD_INTENTS, DiscordBot, DiscordConfig};
pub use email::{EmailBot, EmailConfig};
pub use load::{ConfigError, default_path, load, load_str, resolve_path};
pub use schema::*;
pub use slack::{SLACK_API, SlackBot, SlackConfig, SlackDmConfig};
pub use telegram::{TELEGRAM_API, TelegramBot, TelegramConfig};
pub use tools::{
    Cidr, CronToolConfig, DEFAULT_CRON_MAX_JOBS_PER_CHAT, DEFAULT_CRON_MIN_INTERVAL_S,
    DEFAULT_USER_AGENT, FetchConfig, SearchConfig, WebConfig,
};
pub use websocket::WebSocketConfig;

/// The bot id used when `bots` is empty.
pub const DEFAULT_BOT: &str = "default";

/// A bot with its overrides applied.
#[derive(Debug, Clone, PartialEq)]
pub struct BotSpec {
    /// Bot id (a subject and key token).
    pub id: String,
    /// Absolute workspace directory.
    pub workspace: PathBuf,
    /// Model name.
    pub model: String,
    /// Provider name or `auto`.
    pub provider: String,
}

/// Expands a leading `~` to the home directory.
pub fn expand_home(path: &str) -> PathBuf {
    if let Some(rest) = path.strip_prefix("~/")
        && let Some(home) = dirs::home_dir()
    {
        return home.join(rest);
    }
    if path == "~" {
        return dirs::home_dir().unwrap_or_else(|| PathBuf::from("."));
    }
    PathBuf::from(path)
}

impl Config {
    /// Returns `bot`'s limits (`bots.<id>.limits`; none for a bot without an entry).
    pub fn bot_limits(&self, bot: &str) -> BotLimits {
        self.bots.get(bot).map(|b| b.limits).unwrap_or_default()
    }

    /// Returns every bot this fleet serves (`default` when `bots` is empty).
    pub fn bots(&self) -> Vec<BotSpec> {
        let d = &self.agents.defaults;
        if self.bots.is_empty() {
            return vec![BotSpec {
                id: DEFAULT_BOT.into(),
                workspace: expand_home(&d.workspace),
                model: d.model.clone(),
                provider: d.provider.clone(),
            }];
        }
        self.bots
            .iter()
            .map(|(id, b)| self.spec_of(id, b))
            .collect()
    }

    /// The resolved spec of bot `id` of `bots`, its own settings over the defaults.
    fn spec_of(&self, id: &str, b: &BotConfig) -> BotSpec {
        let d = &self.agents.defaults;
        BotSpec {
            id: id.to_string(),
            workspace: expand_home(b.workspace.as_deref().unwrap_or(&d.workspace)),
            model: b.model.clone().unwrap_or_else(|| d.model.clone()),
            provider: b.provider.clone().unwrap_or_else(|| d.provider.clone()),
        }
    }

    /// Keeps only bot `id` (`--bot`): the process then serves that bot alone (its channels,
    /// runners, tools, memory and cron jobs), as a per-bot deployment needs, where each bot
    /// has its own NATS account and Redis users. An unknown id is an error naming the bots.
    pub fn serve_only(&mut self, id: &str) -> Result<(), String> {
        if self.bot(id).is_none() {
            let known: Vec<String> = self.bots().into_iter().map(|b| b.id).collect();
            return Err(format!(
                "--bot {id}: no such bot in the config (bots: {})",
                known.join(", ")
            ));
        }
        self.bots.retain(|name, _| name == id);
        self.scope = Some(id.to_string());
        Ok(())
    }

    /// Returns the bot with id `id`.
    pub fn bot(&self, id: &str) -> Option<BotSpec> {
        if self.bots.is_empty() {
            return self.bots().into_iter().find(|b| b.id == id);
        }
        self.bots.get(id).map(|b| self.spec_of(id, b))
    }

    /// Returns the directory of runtime data (the config file's parent), as upstream.
    pub fn data_dir(config_path: &Path) -> PathBuf {
        config_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    }

    /// Returns the config as pretty JSON with secrets masked (for `--dump-config`).
    pub fn dump_redacted(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        redact(&mut value);
        serde_json::to_string_pretty(&value).unwrap_or_default()
    }
}

impl Config {
    /// Returns the chat channels `bot` serves (`telegram`, `slack`): where its `message` tool
    /// and heartbeat may deliver.
    pub fn chat_channels(&self, bot: &str) -> Vec<String> {
        // One bot's sections only: resolving every bot's per bot made building many bots
        // cubic in the bots.
        use sections::enabled_for as on;
        let c = &self.channels;
        let served = [
            (
                "telegram",
                on(self, bot, "telegram", c.telegram.clone(), |x| x.enabled),
            ),
            (
                "slack",
                on(self, bot, "slack", c.slack.clone(), |x| x.enabled),
            ),
            (
                "email",
                on(self, bot, "email", c.email.clone(), |x| x.enabled),
            ),
            (
                "discord",
                on(self, bot, "discord", c.discord.clone(), |x| x.enabled),
            ),
            (
                "feishu",
                on(self, bot, "feishu", c.feishu.clone(), |x| x.enabled),
            ),
            (
                "dingtalk",
                on(self, bot, "dingtalk", c.dingtalk.clone(), |x| x.enabled),
            ),
            (
                "wecom",
                on(self, bot, "wecom", c.wecom.clone(), |x| x.enabled),
            ),
            ("qq", on(self, bot, "qq", c.qq.clone(), |x| x.enabled)),
            (
                "napcat",
                on(self, bot, "napcat", c.napcat.clone(), |x| x.enabled),
            ),
        ];
        let mut out: Vec<String> = served
            .into_iter()
            .filter(|(_, on)| *on)
            .map(|(name, _)| name.to_string())
            .collect();
        // The WebSocket channel serves the single bot of a config without `bots`.
        if self.websocket().is_some() && self.bots.is_empty() {
            out.push("websocket".to_string());
        }
        out
    }

    /// Returns whether any bot serves a chat channel (the gateway then starts the channels).
    pub fn has_chat_channels(&self) -> bool {
        !self.telegram_bots().is_empty()
            || !self.slack_bots().is_empty()
            || !self.email_bots().is_empty()
            || !self.discord_bots().is_empty()
            || self.websocket().is_some()
            || !self.feishu_bots().is_empty()
            || !self.dingtalk_bots().is_empty()
            || !self.wecom_bots().is_empty()
            || !self.qq_bots().is_empty()
            || !self.napcat_bots().is_empty()
    }
}

/// Returns `urls` (one URL or a comma-separated list) with the password of every
/// `scheme://user:password@host` masked as `***`, for logs, errors and dumps.
pub fn redact_url(urls: &str) -> String {
    urls.split(',')
        .map(|url| {
            let Some((scheme, rest)) = url.split_once("://") else {
                return url.to_string();
            };
            let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
            let Some(at) = rest[..authority_end].rfind('@') else {
                return url.to_string();
            };
            let userinfo = &rest[..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}:***{}", &rest[at..])
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether a config key names a secret (`apiKey`, `password`, `botToken`, `signingSecret`,
/// `nkeySeed`, Feishu's `encryptKey`, an `encodingAESKey`, in any spelling): masked in dumps,
/// withheld from roles that do not use it ([`scope`]).
pub fn is_secret_key(key: &str) -> bool {
    let lower = key.to_lowercase().replace(['_', '-'], "");
    [
        "apikey",
        "password",
        "token",
        "secret",
        "seed",
        "encryptkey",
        "aeskey",
    ]
    .iter()
    .any(|s| lower.contains(s))
}

fn redact(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if is_secret_key(k) && v.as_str().is_some_and(|s| !s.is_empty()) {
                    *v = serde_json::Value::String("***".into());
                } else if k.to_lowercase().replace(['_', '-'], "") == "otlpheaders" {
                    // Collector API keys (`x-honeycomb-team`, `authorization`): every value.
                    if let Some(headers) = v.as_object_mut() {
                        headers.values_mut().for_each(|h| *h = "***".into());
                    }
                } else if let Some(url) = v.as_str().filter(|s| s.contains("://")) {
                    *v = serde_json::Value::String(redact_url(url));
                } else {
                    redact(v);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn parse(json: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        load_str(Some(json), Path::new("config.json"), &env)
    }

    /// A runner asks each bot it builds for its chat channels: with 2,000 bots that stays
    /// linear (resolving every bot's sections per bot made 1,000 bots take minutes to start).
    #[test]
    fn chat_channels_of_each_of_two_thousand_bots_are_answered_one_bot_at_a_time() {
        let mut bots = serde_json::Map::new();
        for i in 0..2000 {
            let telegram =
                serde_json::json!({"enabled": i % 2 == 0, "token": format!("{i}:t-{i}")});
            let section = serde_json::json!({"channels": {"telegram": telegram}});
            bots.insert(format!("bot-{i}"), section);
        }
        let config = serde_json::json!({"bots": bots}).to_string();
        let c = parse(&config, &[]).unwrap();
        let started = std::time::Instant::now();
        let served = c
            .bots()
            .iter()
            .filter(|b| c.chat_channels(&b.id) == ["telegram"])
            .count();
        let took = started.elapsed();
        assert_eq!(served, 1000, "the bots whose own section enables telegram");
        assert!(
            took < std::time::Duration::from_secs(5),
            "2,000 bots' chat channels took {took:?}"
        );
        assert!(c.chat_channels("no-such-bot").is_empty());
        let spec = c.bot("bot-7").unwrap();
        assert_eq!(Some(&spec), c.bots().iter().find(|b| b.id == "bot-7"));
        assert!(c.bot("bot-2000").is_none());
    }

    #[test]
    fn a_bots_channel_section_merges_over_the_global_one_for_its_chat_channels() {
        let c = parse(
            r#"{"channels": {"telegram": {"enabled": true, "token": "1:global"}},
                "bots": {"on": {"channels": {"telegram": {"token": "2:own"}}},
                         "off": {"channels": {"telegram": {"enabled": false, "token": "3:own"}}},
                         "none": {}}}"#,
            &[],
        )
        .unwrap();
        assert_eq!(c.chat_channels("on"), ["telegram"]);
        assert!(c.chat_channels("off").is_empty());
        assert!(c.chat_channels("none").is_empty());
        let single = parse(
            r#"{"channels": {"telegram": {"enabled": true, "token": "1:x"}}}"#,
            &[],
        )
        .unwrap();
        assert_eq!(single.chat_channels("default"), ["telegram"]);
        assert!(single.chat_channels("other").is_empty());
    }

    #[test]
    fn empty_config_has_upstream_defaults() {
        let c = parse("{}", &[]).unwrap();
        let d = &c.agents.defaults;
        assert_eq!(d.model, "anthropic/claude-opus-4-5");
        assert_eq!(d.max_tokens, 8192);
        assert_eq!(d.max_tool_iterations, 200);
        assert_eq!(d.max_tool_result_chars, 16000);
        assert_eq!(d.context_window_tokens, 200_000);
        assert_eq!(d.max_concurrent_subagents, 1);
        assert_eq!((c.api.host.as_str(), c.api.port), ("127.0.0.1", 8900));
        assert_eq!(c.gateway.port, 18790);
        assert!(c.channels.send_progress && c.channels.send_tool_hints);
        assert_eq!(c.tools.exec.timeout, 60);
        assert_eq!(c.bots()[0].id, "default");
    }

    #[test]
    fn camel_and_snake_case_keys_are_both_accepted() {
        let camel = parse(
            r#"{"agents":{"defaults":{"maxTokens":10,"maxToolIterations":3}}}"#,
            &[],
        )
        .unwrap();
        let snake = parse(
            r#"{"agents":{"defaults":{"max_tokens":10,"max_tool_iterations":3}}}"#,
            &[],
        )
        .unwrap();
        assert_eq!(camel, snake);
        assert_eq!(camel.agents.defaults.max_tokens, 10);
        let p = parse(
            r#"{"providers":{"custom":{"api_base":"http://x/v1","apiKey":"k"}}}"#,
            &[],
        )
        .unwrap();
        assert_eq!(
            p.providers["custom"].api_base.as_deref(),
            Some("http://x/v1")
        );
    }

    #[test]
    fn env_overrides_nest_with_double_underscore_and_win_over_the_file() {
        let c = parse(
            r#"{"agents":{"defaults":{"maxTokens":10}},"bus":{"url":"nats://a:1"}}"#,
            &[
                ("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "1234"),
                ("NANOBOT_BUS__URL", "nats://b:2"),
                ("NANOBOT_PROVIDERS__CUSTOM__API_BASE", "http://llm/v1"),
                ("NANOBOT_CONFIG", "/ignored/by/overrides.json"),
                ("NANOBOT_LLM_TIMEOUT_S", "5"),
            ],
        )
        .unwrap();
        assert_eq!(c.agents.defaults.max_tokens, 1234);
        assert_eq!(c.bus.url, "nats://b:2");
        assert_eq!(
            c.providers["custom"].api_base.as_deref(),
            Some("http://llm/v1")
        );
    }

    #[test]
    fn capture_content_is_off_by_default_and_must_be_a_boolean() {
        assert!(!parse("{}", &[]).unwrap().telemetry.capture_content);
        let on = parse(r#"{"telemetry":{"captureContent":true}}"#, &[]).unwrap();
        assert!(on.telemetry.capture_content);
        let err = parse(
            r#"{"telemetry":{"captureContent":"yes"},"bus":{"url":"http://nope"}}"#,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("telemetry.captureContent"), "{err}");
        assert!(
            err.contains("bus.url"),
            "listed with the other problems: {err}"
        );
    }

    #[test]
    fn every_problem_is_listed_at_once() {
        let err = parse(
            r#"{"agents":{"defaults":{"maxTokns":1,"temperature":9,"maxConcurrentSubagents":0}},
                "bus":{"url":"http://nope"},"store":{"url":"x"},"bogus":1,
                "api":{"port":"eighty"}}"#,
            &[("NANOBOT_STRICT_CONFIG", "1")],
        )
        .unwrap_err();
        let text = err.to_string();
        for needle in [
            "agents.defaults.maxTokns: unknown key",
            "temperature",
            "bus.url",
            "store.url",
            "bogus: Extra inputs are not permitted",
            "api.port",
            "maxConcurrentSubagents: must be at least 1",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
        assert!(err.problems.len() >= 6, "{text}");
    }

    #[test]
    fn timezone_must_be_an_iana_name_or_empty_for_the_host_zone() {
        for ok in ["Asia/Tokyo", "UTC"] {
            let json = format!(r#"{{"agents":{{"defaults":{{"timezone":"{ok}"}}}}}}"#);
            assert_eq!(parse(&json, &[]).unwrap().agents.defaults.timezone, ok);
        }
        let host = parse(r#"{"agents":{"defaults":{"timezone":""}}}"#, &[])
            .unwrap()
            .agents
            .defaults
            .timezone;
        assert!(
            host.parse::<chrono_tz::Tz>().is_ok(),
            "the host's zone by name: {host:?}"
        );
        let err = parse(
            r#"{"agents":{"defaults":{"timezone":"Mars/Olympus"}}}"#,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("agents.defaults.timezone: unknown timezone 'Mars/Olympus'"),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_load_and_are_reported_while_bad_values_of_known_keys_stay_errors() {
        let json = r#"{"agents":{"defaults":{"maxTokns":1,"fallbackModels":[],"newKnob":{"a":1}}},
            "tools":{"web":{"enable":true},"futureTool":{}},
            "providers":{"custom":{"apiKey":"k","newFlag":true}},
            "channels":{"telegram":{"enabled":false,"tokn":"x"}}}"#;
        let c = parse(json, &[]).unwrap();
        let mut keys = c.unknown_keys.clone();
        keys.sort();
        assert_eq!(
            keys,
            [
                "agents.defaults.maxTokns",
                "agents.defaults.newKnob",
                "channels.telegram.tokn",
                "providers.custom.newFlag",
                "tools.futureTool",
            ],
            "upstream keys the fleet accepts (fallbackModels) are not listed"
        );
        assert_eq!(c.agents.defaults.max_tokens, 8192, "the typo is ignored");
        let err = parse(
            r#"{"tools":{"bogus":1},"agents":{"defaults":{"maxTokens":"many"}}}"#,
            &[],
        )
        .unwrap_err();
        assert_eq!(err.problems.len(), 1, "{err}");
        assert!(
            err.problems[0].starts_with("agents.defaults.maxTokens:"),
            "{err}"
        );
        for strict in ["1", "true"] {
            let err = parse(json, &[("NANOBOT_STRICT_CONFIG", strict)]).unwrap_err();
            assert_eq!(err.problems.len(), 5, "{err}");
            assert!(
                err.to_string().contains("tools.futureTool: unknown key"),
                "{err}"
            );
        }
    }

    #[test]
    fn store_url_takes_one_node_a_cluster_or_sentinel_and_refuses_empty_hosts() {
        for ok in [
            "redis://:pw@127.0.0.1:6379/2",
            "redis://a:1,redis://b:2",
            "redis+cluster://:pw@a:7000,b:7000",
            "redis+sentinel://:pw@s1:26379,s2:26379/cache",
            "redis+sentinel://s1:26379",
        ] {
            let config = format!(r#"{{"store":{{"url":"{ok}"}}}}"#);
            assert!(parse(&config, &[]).is_ok(), "{ok} refused");
        }
        for bad in [
            "redis+sentinel://",
            "redis+sentinel://a:1,,b:2/m",
            "redis+cluster://",
        ] {
            let config = format!(r#"{{"store":{{"url":"{bad}"}}}}"#);
            let err = parse(&config, &[]).expect_err(bad).to_string();
            assert!(err.contains("store.url"), "{bad}: {err}");
        }
    }

    #[test]
    fn variables_are_interpolated_and_a_missing_one_is_an_error() {
        let c = parse(
            r#"{"providers":{"custom":{"apiKey":"${KEY}"}}}"#,
            &[("KEY", "s3cret")],
        )
        .unwrap();
        assert_eq!(c.providers["custom"].api_key, "s3cret");
        let err = parse(r#"{"providers":{"custom":{"apiKey":"${NOPE}"}}}"#, &[]).unwrap_err();
        assert!(err.to_string().contains("NOPE is not set"), "{err}");
    }

    #[test]
    fn upstream_only_keys_load_and_exec_restriction_migrates() {
        let c = parse(
            r#"{"agents":{"defaults":{"dream":{"enabled":true},"fallbackModels":[]}},
                "channels":{"telegram":{"enabled":true,"token":"t"},"showReasoning":false},
                "tools":{"exec":{"restrictToWorkspace":true},"web":{}},
                "transcription":{"enabled":true},"modelPresets":{}}"#,
            &[],
        )
        .unwrap();
        assert!(c.tools.restrict_to_workspace);
        assert!(c.channels.telegram.as_ref().is_some_and(|t| t.enabled));
    }

    #[test]
    fn model_presets_are_typed_with_upstream_defaults_and_bad_ones_are_listed() {
        let c = parse(
            r#"{"agents":{"defaults":{"model_preset":"fast","fallbackModels":["deep",{"model":"m2","provider":"custom","max_tokens":9}]}},
                "model_presets":{"fast":{"model":"f","max_tokens":5},"deep":{"model":"d","provider":"openrouter"}},
                "runner":{"fallbackCooldownSecs":2.5}}"#,
            &[],
        )
        .unwrap();
        let fast = &c.model_presets["fast"];
        assert_eq!(
            (fast.model.as_str(), fast.provider.as_str(), fast.max_tokens),
            ("f", "auto", 5)
        );
        assert_eq!(
            (
                fast.context_window_tokens,
                fast.temperature,
                &fast.reasoning_effort
            ),
            (200_000, 0.1, &None)
        );
        assert_eq!(c.agents.defaults.model_preset.as_deref(), Some("fast"));
        assert_eq!(
            c.agents.defaults.fallback_models[0],
            FallbackModel::Preset("deep".into())
        );
        assert!(matches!(
            &c.agents.defaults.fallback_models[1],
            FallbackModel::Inline(f) if f.model == "m2" && f.max_tokens == Some(9) && f.temperature.is_none()
        ));
        assert_eq!(c.runner.fallback_cooldown_secs, 2.5);
        assert_eq!(
            parse("{}", &[]).unwrap().runner.fallback_cooldown_secs,
            60.0
        );

        let err = parse(
            r#"{"agents":{"defaults":{"modelPreset":"gone","fallbackModels":["missing",{"model":"x"},7]}},
                "modelPresets":{"default":{"model":"d"},"nomodel":{"maxTokens":1},"hot":{"model":"h","temperature":3}}}"#,
            &[],
        )
        .unwrap_err();
        let problems = err.problems.join("\n");
        for expected in [
            "modelPresets.nomodel: missing field `model`",
            "agents.defaults.fallbackModels[1]: inline fallback model: missing field `provider`",
        ] {
            assert!(problems.contains(expected), "{expected} in {problems}");
        }
        let err = parse(
            r#"{"agents":{"defaults":{"modelPreset":"gone","fallbackModels":["missing"]}},
                "modelPresets":{"default":{"model":"d"},"hot":{"model":"h","temperature":3}}}"#,
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err.problems,
            [
                "modelPresets.default: the name 'default' is reserved for agents.defaults",
                "modelPresets.hot.temperature: 3 is outside 0..=2",
                "agents.defaults.modelPreset: model preset 'gone' not found in modelPresets (available: default, hot)",
                "agents.defaults.fallbackModels[0]: model preset 'missing' not found in modelPresets (available: hot)",
            ]
        );
    }

    #[test]
    fn tools_web_and_ssrf_whitelist_are_typed_and_bad_entries_are_listed_with_other_problems() {
        let c = parse(
            r#"{"tools":{"web":{"userAgent":"ua","search":{"provider":"brave","api_key":"k"}},
                "ssrf_whitelist":["100.64.0.0/10","10.0.0.1"]}}"#,
            &[],
        )
        .unwrap();
        assert_eq!(c.tools.web.user_agent(), "ua");
        assert_eq!(c.tools.web.search.provider, "brave");
        assert_eq!(c.tools.web.search.api_key, "k");
        assert!(c.tools.web.fetch.use_jina_reader);
        let cidrs = c.tools.ssrf_whitelist();
        assert_eq!(cidrs.len(), 2);
        assert!(cidrs[0].contains("100.64.1.2".parse().unwrap()));
        assert!(cidrs[1].contains("10.0.0.1".parse().unwrap()));
        assert!(!cidrs[1].contains("10.0.0.2".parse().unwrap()));
        assert!(
            !c.dump_redacted().contains("\"k\""),
            "search api key redacted"
        );

        let err = parse(
            r#"{"tools":{"ssrfWhitelist":["nope","10.0.0.0/99"]},"agents":{"defaults":{"maxTokens":0}}}"#,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("tools.ssrfWhitelist[0]"), "{err}");
        assert!(err.contains("tools.ssrfWhitelist[1]"), "{err}");
        assert!(err.contains("maxTokens"), "all problems at once: {err}");
        assert_eq!(
            parse("{}", &[]).unwrap().tools.web.user_agent(),
            DEFAULT_USER_AGENT
        );
    }

    #[test]
    fn bots_inherit_defaults_and_redaction_hides_secrets() {
        let c = parse(
            r#"{"agents":{"defaults":{"model":"m","workspace":"/w"}},
                "bots":{"alpha":{},"beta":{"model":"n","workspace":"/b"}},
                "providers":{"custom":{"apiKey":"s3cret"}}}"#,
            &[],
        )
        .unwrap();
        let bots = c.bots();
        assert_eq!(
            bots[0],
            BotSpec {
                id: "alpha".into(),
                workspace: "/w".into(),
                model: "m".into(),
                provider: "auto".into()
            }
        );
        assert_eq!(bots[1].model, "n");
        assert!(!c.dump_redacted().contains("s3cret"));
        assert!(parse(r#"{"bots":{"a.b":{}}}"#, &[]).is_err());
        let urls = parse(
            r#"{"store":{"url":"redis+cluster://agent:pw1@a:1,b:2"},
                "bus":{"url":"nats://u:pw2@n:4222"}}"#,
            &[],
        )
        .unwrap()
        .dump_redacted();
        assert!(!urls.contains("pw1") && !urls.contains("pw2"), "{urls}");
        assert!(urls.contains("redis+cluster://agent:***@a:1,b:2"), "{urls}");
        assert_eq!(redact_url("redis://:p@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact_url("nats://h:4222"), "nats://h:4222");
        let seed = parse(r#"{"bus":{"nkeySeed":"SUSEED"}}"#, &[]).unwrap();
        assert_eq!(seed.bus.nkey_seed.as_deref(), Some("SUSEED"));
        assert!(!seed.dump_redacted().contains("SUSEED"));
    }

    #[test]
    fn serving_one_bot_keeps_only_its_bot_and_refuses_an_unknown_one() {
        let json = r#"{"bots":{"alpha":{"model":"m-a"},"beta":{"model":"m-b"}}}"#;
        let mut c = parse(json, &[]).unwrap();
        c.serve_only("beta").unwrap();
        let ids: Vec<String> = c.bots().into_iter().map(|b| b.id).collect();
        assert_eq!(ids, ["beta"]);
        assert_eq!(c.bot("beta").unwrap().model, "m-b");
        assert_eq!(c.scope.as_deref(), Some("beta"));

        let mut c = parse(json, &[]).unwrap();
        let err = c.serve_only("gamma").unwrap_err();
        assert!(
            err.contains("gamma") && err.contains("alpha, beta"),
            "{err}"
        );
        assert_eq!(c.bots().len(), 2, "an error changes nothing");

        let mut single = parse("{}", &[]).unwrap();
        single.serve_only(DEFAULT_BOT).unwrap();
        assert_eq!(single.bots().len(), 1);
        assert!(parse("{}", &[]).unwrap().serve_only("alpha").is_err());
    }

    #[test]
    fn dumps_mask_every_otlp_header_value_and_keep_the_names() {
        let c = parse(
            r#"{"telemetry":{"otlpEndpoint":"https://api.honeycomb.io","otlpProtocol":"http/protobuf",
                "otlpHeaders":{"x-honeycomb-team":"hc-SECRET","x-note":"密钥🔑"}}}"#,
            &[],
        )
        .unwrap();
        let dump = c.dump_redacted();
        assert!(
            dump.contains("x-honeycomb-team") && dump.contains("x-note"),
            "{dump}"
        );
        assert!(
            !dump.contains("hc-SECRET") && !dump.contains("密钥"),
            "{dump}"
        );
        let bad = parse(r#"{"telemetry":{"otlpProtocol":"http/json"}}"#, &[]);
        assert!(bad.is_err());
    }
    #[test]
    fn encryption_keys_are_secrets_like_tokens() {
        for key in [
            "encryptKey",
            "encrypt_key",
            "encodingAESKey",
            "encoding_aes_key",
            "aesKey",
        ] {
            assert!(is_secret_key(key), "{key} must be masked and withheld");
        }
        for key in ["key", "reactEmoji", "domain", "apiBase"] {
            assert!(!is_secret_key(key), "{key} is not a secret");
        }
        let c = parse(
            r#"{"channels":{"feishu":{"enabled":false,"encryptKey":"enc-s3cret"}}}"#,
            &[],
        )
        .unwrap();
        assert!(!c.dump_redacted().contains("enc-s3cret"));
    }
}
