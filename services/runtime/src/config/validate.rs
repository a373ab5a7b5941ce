//! Semantic checks run once after parsing; every problem is reported, not just the first.

use std::collections::BTreeMap;

use serde_json::Value;

use super::load::norm as normalise_key;
use super::schema::Config;

/// Upstream keys of `agents.defaults` the fleet accepts but does not interpret.
const AGENT_EXTRAS: &[&str] = &[
    "failOnToolError",
    "providerRetryMode",
    "toolHintMaxLength",
    "timezoneMode",
    "botIcon",
    "disabledSkills",
];
/// Upstream keys of `channels` besides the per-channel objects.
const CHANNEL_EXTRAS: &[&str] = &[
    "showReasoning",
    "extractDocumentText",
    "transcriptionProvider",
    "transcriptionLanguage",
];
/// Upstream keys of `providers.<name>` the fleet keeps as given.
const PROVIDER_EXTRAS: &[&str] = &[
    "apiType",
    "extraBody",
    "extraQuery",
    "proxy",
    "thinkingStyle",
    "region",
    "profile",
];
/// Upstream keys of `gateway` the fleet keeps as given.
const GATEWAY_EXTRAS: &[&str] = &["restartMode", "heartbeat"];
/// Upstream keys of `tools` the fleet keeps as given.
const TOOLS_EXTRAS: &[&str] = &[
    "file",
    "cliApps",
    "my",
    "imageGeneration",
    "maxSessionMessagesPerMinute",
    "webuiAllowLocalServiceAccess",
    "webuiAllowRemotePackageInstall",
    "myEnabled",
    "mySet",
];
/// Upstream keys of `tools.exec` the fleet keeps as given.
const EXEC_EXTRAS: &[&str] = &[
    "sandbox",
    "sandboxRoBinds",
    "sandboxRwBinds",
    "sandboxNetwork",
];

fn check_extras(
    at: &str,
    extras: &BTreeMap<String, Value>,
    known: &[&str],
    unknown: &mut Vec<String>,
) {
    for key in extras.keys() {
        let k = normalise_key(key);
        if !known.iter().any(|n| normalise_key(n) == k) {
            unknown.push(format!("{at}.{key}"));
        }
    }
}

/// Lists in `unknown` the keys that landed in a section's catch-all map but are not upstream
/// keys (typos, newer upstream keys): 0.3.5's nested models ignore them.
pub(crate) fn unknown_extras(config: &Config, unknown: &mut Vec<String>) {
    check_extras(
        "agents.defaults",
        &config.agents.defaults.extra,
        AGENT_EXTRAS,
        unknown,
    );
    // 0.3.5 keeps every other `channels` entry (a plugin's section); one that is not even a
    // settings object configures nothing, so it is listed like an unknown key.
    for (key, value) in &config.channels.extra {
        let known = CHANNEL_EXTRAS
            .iter()
            .any(|n| normalise_key(n) == normalise_key(key));
        if !known && !value.is_object() {
            unknown.push(format!("channels.{key}"));
        }
    }
    for (i, entry) in config.agents.defaults.fallback_models.iter().enumerate() {
        if let super::schema::FallbackModel::Inline(inline) = entry {
            let at = format!("agents.defaults.fallbackModels[{i}]");
            check_extras(&at, &inline.extra, &[], unknown);
        }
    }
    for (name, provider) in &config.providers {
        check_extras(
            &format!("providers.{name}"),
            &provider.extra,
            PROVIDER_EXTRAS,
            unknown,
        );
    }
    check_extras("gateway", &config.gateway.extra, GATEWAY_EXTRAS, unknown);
    check_extras("tools", &config.tools.extra, TOOLS_EXTRAS, unknown);
    check_extras("tools.exec", &config.tools.exec.extra, EXEC_EXTRAS, unknown);
}

fn is_url(url: &str, schemes: &[&str]) -> bool {
    schemes
        .iter()
        .any(|s| url.starts_with(&format!("{s}://")) && url.len() > s.len() + 3)
}

/// Upstream's rules for `modelPresets`, `agents.defaults.modelPreset` and
/// `agents.defaults.fallbackModels` (`Config._validate_model_preset`), plus the preset
/// values `agents.defaults` checks for its own.
fn model_presets(config: &Config, problems: &mut Vec<String>) {
    let presets = &config.model_presets;
    let names = |with_default: bool| {
        let mut names: Vec<&str> = presets
            .keys()
            .map(String::as_str)
            .filter(|n| *n != "default")
            .collect();
        if with_default {
            names.insert(0, "default");
        }
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    };
    for (name, preset) in presets {
        let at = format!("modelPresets.{name}");
        if name == "default" {
            problems.push(format!(
                "{at}: the name 'default' is reserved for agents.defaults"
            ));
        }
        if name.trim().is_empty() {
            problems.push("modelPresets: a preset name must not be empty".into());
        }
        if preset.model.trim().is_empty() {
            problems.push(format!("{at}.model: must not be empty"));
        }
        if preset.max_tokens == 0 {
            problems.push(format!("{at}.maxTokens: must be at least 1"));
        }
        if !(0.0..=2.0).contains(&preset.temperature) {
            problems.push(format!(
                "{at}.temperature: {} is outside 0..=2",
                preset.temperature
            ));
        }
    }
    let d = &config.agents.defaults;
    if let Some(name) = &d.model_preset
        && name != "default"
        && !presets.contains_key(name)
    {
        problems.push(format!(
            "agents.defaults.modelPreset: model preset '{name}' not found in modelPresets (available: {})",
            names(true)
        ));
    }
    for (i, entry) in d.fallback_models.iter().enumerate() {
        let at = format!("agents.defaults.fallbackModels[{i}]");
        match entry {
            super::FallbackModel::Preset(name) if !presets.contains_key(name) => {
                problems.push(format!(
                    "{at}: model preset '{name}' not found in modelPresets (available: {})",
                    names(false)
                ));
            }
            super::FallbackModel::Inline(inline) if inline.model.trim().is_empty() => {
                problems.push(format!("{at}.model: must not be empty"));
            }
            _ => {}
        }
    }
}

/// Largest `tools.cron.minIntervalS`: a day.
const MAX_CRON_MIN_INTERVAL_S: u64 = 86_400;
/// Largest `tools.cron.maxJobsPerChat`.
const MAX_CRON_JOBS_PER_CHAT: usize = 10_000;

/// Returns every semantic problem of a parsed config; unknown keys go to `unknown`.
pub(crate) fn validate(config: &Config, unknown: &mut Vec<String>) -> Vec<String> {
    let mut problems = Vec::new();
    agent_defaults(config, &mut problems);
    limits(config, &mut problems);
    connection_urls(config, &mut problems);
    telemetry(config, &mut problems);
    api_and_runner(config, &mut problems);
    model_presets(config, &mut problems);
    provider_bases(config, &mut problems);
    channels(config, &mut problems, unknown);
    bot_ids(config, &mut problems);
    problems
}

/// `agents.defaults`.
fn agent_defaults(config: &Config, problems: &mut Vec<String>) {
    let d = &config.agents.defaults;
    if d.model.trim().is_empty() {
        problems.push("agents.defaults.model: must not be empty".into());
    }
    if d.max_tokens == 0 {
        problems.push("agents.defaults.maxTokens: must be at least 1".into());
    }
    if d.idle_compact_after_minutes.is_nan() || d.idle_compact_after_minutes < 0.0 {
        problems.push("agents.defaults.idleCompactAfterMinutes: must be 0 (off) or more".into());
    }
    if d.idle_compact_check_interval_seconds.is_nan()
        || d.idle_compact_check_interval_seconds <= 0.0
    {
        problems
            .push("agents.defaults.idleCompactCheckIntervalSeconds: must be more than 0".into());
    }
    if d.dream.interval_h.is_nan() || d.dream.interval_h <= 0.0 {
        problems.push("agents.defaults.dream.intervalH: must be more than 0".into());
    }
    if d.max_concurrent_subagents == 0 {
        problems.push("agents.defaults.maxConcurrentSubagents: must be at least 1".into());
    }
    if d.max_tool_iterations == 0 {
        problems.push("agents.defaults.maxToolIterations: must be at least 1".into());
    }
    if !(0.0..=2.0).contains(&d.temperature) {
        problems.push(format!(
            "agents.defaults.temperature: {} is outside 0..=2",
            d.temperature
        ));
    }
    if !d.timezone.trim().is_empty() && d.timezone.trim().parse::<chrono_tz::Tz>().is_err() {
        problems.push(format!(
            "agents.defaults.timezone: unknown timezone '{}' (an IANA name such as \"Europe/Berlin\", or \"\" for the host's zone)",
            d.timezone
        ));
    }
    if !(0.0..=1.0).contains(&d.consolidation_ratio) {
        problems.push("agents.defaults.consolidationRatio: must be within 0..=1".into());
    }
}

/// Retry, replica, SSRF whitelist and cron limits.
fn limits(config: &Config, problems: &mut Vec<String>) {
    if config.channels.send_max_retries > 10 {
        problems.push("channels.sendMaxRetries: must be within 0..=10".into());
    }
    if !(1..=5).contains(&config.bus.stream_replicas) {
        problems.push("bus.streamReplicas: must be within 1..=5".into());
    }
    for (i, entry) in config.tools.ssrf_whitelist.iter().enumerate() {
        if super::Cidr::parse(entry).is_none() {
            problems.push(format!(
                "tools.ssrfWhitelist[{i}]: {entry:?} is not a CIDR or an IP address"
            ));
        }
    }
    let cron = &config.tools.cron;
    if !(1..=MAX_CRON_MIN_INTERVAL_S).contains(&cron.min_interval_s) {
        problems.push(format!(
            "tools.cron.minIntervalS: must be within 1..={MAX_CRON_MIN_INTERVAL_S} (a day)"
        ));
    }
    if !(1..=MAX_CRON_JOBS_PER_CHAT).contains(&cron.max_jobs_per_chat) {
        problems.push(format!(
            "tools.cron.maxJobsPerChat: must be within 1..={MAX_CRON_JOBS_PER_CHAT}"
        ));
    }
}

/// `bus.url` and `store.url`.
fn connection_urls(config: &Config, problems: &mut Vec<String>) {
    for url in config.bus.url.split(',') {
        if !is_url(url.trim(), &["nats", "tls", "ws", "wss"]) {
            problems.push(format!(
                "bus.url: {:?} is not a nats:// URL",
                super::redact_url(url)
            ));
        }
    }
    // One node, a `redis+cluster://host:port,host:port` cluster, several node URLs, or
    // `redis+sentinel://host:port,host:port[/master]`.
    let url = config.store.url.trim();
    let hosts = url.strip_prefix("redis+cluster://").or_else(|| {
        url.strip_prefix("redis+sentinel://")
            .map(|r| r.split('/').next().unwrap_or(r))
    });
    let store_ok = match hosts {
        Some(hosts) => !hosts.is_empty() && !hosts.split(',').any(|h| h.trim().is_empty()),
        None => config
            .store
            .url
            .split(',')
            .all(|url| is_url(url.trim(), &["redis", "rediss", "redis+unix", "unix"])),
    };
    if !store_ok {
        problems.push(format!(
            "store.url: {:?} is not a redis:// URL, a list of them, a redis+cluster:// or a redis+sentinel:// URL",
            super::redact_url(&config.store.url)
        ));
    }
}

/// `telemetry.*`.
fn telemetry(config: &Config, problems: &mut Vec<String>) {
    if let Some(endpoint) = &config.telemetry.otlp_endpoint
        && !is_url(endpoint, &["http", "https"])
    {
        problems.push(format!(
            "telemetry.otlpEndpoint: {endpoint:?} is not an http(s) URL"
        ));
    }
    if let Some(protocol) = &config.telemetry.otlp_protocol
        && let Err(e) = crate::telemetry::otlp::Protocol::parse(protocol)
    {
        problems.push(format!("telemetry.otlpProtocol: {e}"));
    }
    if !matches!(config.telemetry.log_format.as_str(), "text" | "json") {
        problems.push("telemetry.logFormat: must be \"text\" or \"json\"".into());
    }
}

/// `api.*` and `runner.*`.
fn api_and_runner(config: &Config, problems: &mut Vec<String>) {
    if config.api.api_key.is_empty() && binds_every_interface(&config.api.host) {
        problems.push(format!(
            "api.apiKey: required when api.host ({:?}) listens on all interfaces",
            config.api.host
        ));
    }
    if config.api.timeout <= 0.0 {
        problems.push("api.timeout: must be positive".into());
    }
    if config.runner.max_concurrent_turns == 0 {
        problems.push("runner.maxConcurrentTurns: must be at least 1".into());
    }
    if config.runner.max_waiting_messages == 0 {
        problems.push("runner.maxWaitingMessages: must be at least 1".into());
    }
    if config.runner.session_lease_secs.is_nan() || config.runner.session_lease_secs < 0.5 {
        problems.push("runner.sessionLeaseSecs: must be at least 0.5".into());
    }
    if config.runner.redeliver_after_secs.is_nan() || config.runner.redeliver_after_secs < 1.0 {
        problems.push("runner.redeliverAfterSecs: must be at least 1".into());
    }
    if config.runner.fallback_cooldown_secs.is_nan() || config.runner.fallback_cooldown_secs < 0.0 {
        problems.push("runner.fallbackCooldownSecs: must be 0 or more".into());
    }
}

/// `providers.*.apiBase`.
fn provider_bases(config: &Config, problems: &mut Vec<String>) {
    for (name, provider) in &config.providers {
        if let Some(base) = &provider.api_base
            && !is_url(base, &["http", "https"])
        {
            problems.push(format!(
                "providers.{name}.apiBase: {base:?} is not an http(s) URL"
            ));
        }
    }
}

/// Each channel's section.
fn channels(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    super::telegram::validate(config, problems, unknown);
    super::email::validate(config, problems, unknown);
    super::slack::validate(config, problems, unknown);
    super::discord::validate(config, problems, unknown);
    super::websocket::validate(config, problems, unknown);
    super::feishu::validate(config, problems, unknown);
    super::dingtalk::validate(config, problems, unknown);
    super::wecom::validate(config, problems, unknown);
    super::qq::validate(config, problems, unknown);
    super::napcat::validate(config, problems, unknown);
}

/// `bots.<id>` names.
fn bot_ids(config: &Config, problems: &mut Vec<String>) {
    for id in config.bots.keys() {
        let ok = !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok {
            problems.push(format!(
                "bots.{id}: a bot id may only hold letters, digits, - and _"
            ));
        }
    }
}

/// Returns whether binding `host` listens on every interface: an unspecified address in any
/// spelling the system resolver accepts (`0.0.0.0`, `0`, `0x0`, `::`, `[::]`, `::0`,
/// `::ffff:0.0.0.0`, …), or a name that resolves to one.
pub fn binds_every_interface(host: &str) -> bool {
    use std::net::{IpAddr, ToSocketAddrs as _};
    let bare = host.trim().trim_start_matches('[').trim_end_matches(']');
    let unspecified = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => v4.is_unspecified(),
        IpAddr::V6(v6) => {
            v6.is_unspecified() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_unspecified())
        }
    };
    if bare.is_empty() {
        return true;
    }
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return unspecified(ip);
    }
    // inet_aton spellings (`0`, `0x0`, `0.0`) and names: ask the resolver, as bind would.
    (bare, 0)
        .to_socket_addrs()
        .is_ok_and(|mut addrs| addrs.any(|a| unspecified(a.ip())))
}

#[cfg(test)]
mod host_tests {
    use super::binds_every_interface;

    #[test]
    fn every_spelling_of_the_wildcard_address_counts_as_all_interfaces() {
        for open in [
            "0.0.0.0",
            "::",
            "[::]",
            "::0",
            "0:0::0",
            "0",
            "0.0",
            "0x0",
            "00.0.0.0",
            "::ffff:0.0.0.0",
            "",
            " 0.0.0.0 ",
        ] {
            assert!(binds_every_interface(open), "{open:?}");
        }
        for local in [
            "127.0.0.1",
            "::1",
            "[::1]",
            "localhost",
            "192.168.1.5",
            "10.0.0.1",
        ] {
            assert!(!binds_every_interface(local), "{local:?}");
        }
    }
}
