//! Per-role configs (`nanobot config scope`): a copy of `config.json` without the secrets a
//! role does not use, so a container holds only its own. The tool executors run model-chosen
//! shell commands; with the whole file, a prompt injection could read every provider key and
//! channel token.
//!
//! Secrets are the values [`super::is_secret_key`] names (the ones `--dump-config` masks),
//! plus every value of a `headers`, `env` or `extraHeaders` map, inside the config's
//! secret-bearing parts ([`Part`]). A withheld value is replaced by [`WITHHELD`], not removed,
//! so every other setting (which channels are enabled, which provider a model uses) reads the
//! same in every role and validation accepts it in place of the secret it stands for.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use nanobot_proto::subjects::Role;

use super::load::{ConfigError, load_str, norm};

/// What a withheld secret reads as in a scoped config.
pub const WITHHELD: &str = "(withheld from this role)";

/// Whether `value` is a secret withheld from this process's role (validation accepts it where
/// the secret is required; nothing uses it).
pub fn is_withheld(value: &str) -> bool {
    value == WITHHELD
}

/// A part of the config that holds secrets, and the roles that use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `providers.<name>` (LLM calls): agent and memory; the gateway's voice transcription
    /// uses `providers.groq` ([`TRANSCRIPTION_PROVIDER`]).
    Provider,
    /// `channels.<name>` and `bots.<id>.channels.<name>` (chat channel credentials): gateway.
    Channels,
    /// `api` (the HTTP API's bearer token): gateway.
    Api,
    /// `transcription`: gateway.
    Transcription,
    /// `tools.mcpServers.<name>` (MCP servers' headers and env): tools.
    Mcp,
    /// `tools.web` (web search keys): tools.
    Web,
    /// `store` (the Redis URL's password): every role but the tool executors, which keep
    /// nothing in Redis.
    Store,
}

/// The provider whose key the gateway uses to transcribe voice messages.
pub const TRANSCRIPTION_PROVIDER: &str = "groq";

/// Whether `role` uses the secrets of `part` (`provider`: the provider's name, for
/// [`Part::Provider`]).
pub fn uses(role: Role, part: Part, provider: &str) -> bool {
    match (role, part) {
        (Role::Agent | Role::Memory, Part::Provider) => true,
        (Role::Gateway, Part::Provider) => norm(provider) == TRANSCRIPTION_PROVIDER,
        (Role::Gateway, Part::Channels | Part::Api | Part::Transcription) => true,
        (Role::Tools, Part::Mcp | Part::Web) => true,
        (role, Part::Store) => role != Role::Tools,
        _ => false,
    }
}

/// Replaces, in `root` (a config file's JSON, keys in any spelling), every secret `role` does
/// not use with [`WITHHELD`]; everything else is left as it is.
pub fn withhold(root: &mut Value, role: Role) {
    let Value::Object(top) = root else { return };
    for (key, value) in top.iter_mut() {
        match norm(key).as_str() {
            "providers" => each(value, |name, provider| {
                if !uses(role, Part::Provider, name) {
                    scrub(provider);
                }
            }),
            "channels" if !uses(role, Part::Channels, "") => scrub_channels(value),
            "bots" if !uses(role, Part::Channels, "") => each(value, |_, bot| {
                each(bot, |key, channels| {
                    if norm(key) == "channels" {
                        scrub_channels(channels);
                    }
                });
            }),
            "api" if !uses(role, Part::Api, "") => scrub(value),
            "transcription" if !uses(role, Part::Transcription, "") => scrub(value),
            "store" if !uses(role, Part::Store, "") => scrub(value),
            "tools" => each(value, |key, section| match norm(key).as_str() {
                "mcpservers" if !uses(role, Part::Mcp, "") => scrub(section),
                "web" if !uses(role, Part::Web, "") => scrub(section),
                _ => {}
            }),
            _ => {}
        }
    }
}

/// Calls `f` with every entry of `value` when it is an object.
fn each(value: &mut Value, mut f: impl FnMut(&str, &mut Value)) {
    if let Value::Object(map) = value {
        for (key, child) in map.iter_mut() {
            f(key, child);
        }
    }
}

/// Scrubs each channel's settings (the shared scalars such as `sendProgress` hold none).
fn scrub_channels(channels: &mut Value) {
    each(channels, |_, channel| scrub(channel));
}

/// Withholds every secret string under `value`: secret-named keys, `headers`/`env` maps, and
/// the secrets inside URLs ([`withhold_in_url`]: proxies, `apiBase`, an MCP server's URL).
fn scrub(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let Some(withheld) = withhold_in_url(text) {
                *text = withheld;
            }
        }
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if matches!(norm(key).as_str(), "headers" | "env" | "extraheaders") {
                    each(child, |_, v| withhold_string(v));
                } else if super::is_secret_key(key) {
                    withhold_string(child);
                } else {
                    scrub(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// What a withheld secret inside a URL reads as (a valid userinfo and query value).
pub const WITHHELD_IN_URL: &str = "withheld-from-this-role";

/// `text`'s URLs (comma-separated, as `bus.url` lists servers) with their secrets replaced by
/// [`WITHHELD_IN_URL`]: the userinfo's password (a lone user name too: `https://TOKEN@host`)
/// and the values of query parameters named like secrets (`token`, `key`, `sig`, `auth`, …).
/// `None` when there is nothing to withhold (the text stays byte for byte as written).
pub fn withhold_in_url(text: &str) -> Option<String> {
    if !text.contains("://") {
        return None;
    }
    let out: Vec<String> = text.split(',').map(withhold_in_one_url).collect();
    let out = out.join(",");
    (out != text).then_some(out)
}

fn withhold_in_one_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:{WITHHELD_IN_URL}@{host}"),
            None => format!("{WITHHELD_IN_URL}@{host}"),
        },
        None => authority.to_string(),
    };
    let (path, fragment) = tail
        .split_once('#')
        .map_or((tail, None), |(p, f)| (p, Some(f)));
    let tail = match path.split_once('?') {
        Some((path, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((name, value)) if is_secret_param(name) && !value.is_empty() => {
                        format!("{name}={WITHHELD_IN_URL}")
                    }
                    _ => param.to_string(),
                })
                .collect();
            format!("{path}?{}", params.join("&"))
        }
        None => path.to_string(),
    };
    let fragment = fragment.map(|f| format!("#{f}")).unwrap_or_default();
    format!("{scheme}://{authority}{tail}{fragment}")
}

/// Whether a URL query parameter named `name` carries a credential: a secret-named key
/// ([`super::is_secret_key`]) or a name such as `key`, `sig`, `auth`, `code`, `jwt`.
fn is_secret_param(name: &str) -> bool {
    let lower = name.to_lowercase().replace(['_', '-'], "");
    super::is_secret_key(name)
        || [
            "key",
            "auth",
            "sig",
            "pass",
            "pwd",
            "credential",
            "jwt",
            "bearer",
            "session",
        ]
        .iter()
        .any(|s| lower.contains(s))
        || matches!(lower.as_str(), "code" | "pw" | "p")
}

fn withhold_string(value: &mut Value) {
    if value.as_str().is_some_and(|s| !s.is_empty()) {
        *value = Value::String(WITHHELD.into());
    }
}

/// Returns the config file `text` (`None`: no file, the defaults) at `path` for `role`: its
/// JSON with the secrets `role` does not use withheld, the rest as written (`${VAR}`s are left
/// for the role to fill in, env overrides are the role's own). The file and the copy must both
/// load as the roles load them, with `env`: every problem of either is an error.
pub fn scoped_text(
    text: Option<&str>,
    path: &Path,
    env: &HashMap<String, String>,
    role: Role,
) -> Result<String, ConfigError> {
    load_str(text, path, env)?;
    let mut root = match text {
        Some(t) if !t.trim().is_empty() => serde_json::from_str(t).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            problems: vec![format!("not valid JSON: {e}")],
        })?,
        _ => Value::Object(serde_json::Map::new()),
    };
    withhold(&mut root, role);
    let mut out = serde_json::to_string_pretty(&root).unwrap_or_default();
    out.push('\n');
    load_str(Some(&out), path, env)?;
    Ok(out)
}

/// Returns the role named `name` (`gateway`, `agent`, `tools`, `memory`, `cron`, `cli`).
pub fn role_named(name: &str) -> Result<Role, String> {
    Role::ALL
        .into_iter()
        .find(|r| r.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = Role::ALL.iter().map(|r| r.name()).collect();
            format!("unknown role {name:?} (roles: {})", names.join(", "))
        })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use serde_json::json;

    use super::*;

    fn full() -> Value {
        json!({
            "providers": {
                "anthropic": {"apiKey": "sk-ant-CANARY", "extraHeaders": {"X-Org": "ORG-CANARY"}},
                "groq": {"api_key": "gsk-CANARY", "apiBase": "https://api.groq.com/openai/v1"}
            },
            "channels": {
                "sendProgress": false,
                "telegram": {"enabled": true, "token": "123:TG-CANARY", "allowFrom": ["42"]},
                "slack": {"enabled": true, "botToken": "xoxb-CANARY", "appToken": "xapp-CANARY"},
                "discord": {"enabled": true, "token": "DC-CANARY"},
                "email": {"enabled": true, "consentGranted": true, "imapHost": "imap.x",
                          "imapUsername": "me", "imapPassword": "IMAP-CANARY", "smtpHost": "smtp.x",
                          "smtpUsername": "me", "smtpPassword": "SMTP-CANARY",
                          "fromAddress": "me@x.org"}
            },
            "api": {"apiKey": "API-CANARY", "port": 8901},
            "tools": {
                "mcpServers": {"gh": {"url": "https://mcp.x/", "headers": {"Authorization": "Bearer MCP-CANARY"},
                                       "env": {"GH": "ENV-CANARY"}}},
                "web": {"search": {"provider": "brave", "apiKey": "BRAVE-CANARY"}},
                "exec": {"timeout": 30}
            },
            "agents": {"defaults": {"model": "anthropic/claude-x", "maxTokens": 1000}}
        })
    }

    fn canaries(value: &Value) -> Vec<String> {
        let text = value.to_string();
        let mut found: Vec<String> = text
            .split('"')
            .filter(|s| s.contains("CANARY"))
            .map(String::from)
            .collect();
        found.sort();
        found
    }

    fn scoped(role: Role) -> Value {
        let mut value = full();
        withhold(&mut value, role);
        value
    }

    #[test]
    fn each_role_keeps_only_the_secrets_it_uses() {
        let mcp_and_web = ["BRAVE-CANARY", "Bearer MCP-CANARY", "ENV-CANARY"];
        assert_eq!(canaries(&scoped(Role::Tools)), mcp_and_web);
        let providers = ["ORG-CANARY", "gsk-CANARY", "sk-ant-CANARY"];
        assert_eq!(canaries(&scoped(Role::Agent)), providers);
        assert_eq!(canaries(&scoped(Role::Memory)), providers);
        assert_eq!(
            canaries(&scoped(Role::Gateway)),
            [
                "123:TG-CANARY",
                "API-CANARY",
                "DC-CANARY",
                "IMAP-CANARY",
                "SMTP-CANARY",
                "gsk-CANARY",
                "xapp-CANARY",
                "xoxb-CANARY"
            ],
            "channels, the API key and the transcription provider's key"
        );
        assert!(canaries(&scoped(Role::Cron)).is_empty());
        assert!(canaries(&scoped(Role::Cli)).is_empty());
    }

    #[test]
    fn withheld_secrets_keep_every_other_setting_and_still_load() {
        let tools = scoped(Role::Tools);
        assert_eq!(tools["channels"]["telegram"]["token"], WITHHELD);
        assert_eq!(tools["channels"]["telegram"]["enabled"], true);
        assert_eq!(tools["channels"]["telegram"]["allowFrom"], json!(["42"]));
        assert_eq!(tools["channels"]["sendProgress"], false);
        assert_eq!(tools["api"]["port"], 8901);
        assert_eq!(
            tools["providers"]["groq"]["apiBase"],
            full()["providers"]["groq"]["apiBase"]
        );
        let env = HashMap::new();
        for role in Role::ALL {
            let text = scoped(role).to_string();
            let loaded = super::super::load_str(Some(&text), Path::new("config.json"), &env);
            let config = loaded.unwrap_or_else(|e| panic!("{} loads: {e}", role.name()));
            assert_eq!(config.chat_channels("default").len(), 4, "{}", role.name());
        }
    }

    #[test]
    fn bots_own_channel_tokens_are_withheld_too() {
        let mut value = json!({"bots": {"a": {"channels": {"telegram": {"enabled": true, "token": "1:A-CANARY"}}},
                                        "b": {"channels": {"telegram": {"enabled": true, "token": "2:B-CANARY"}}}}});
        withhold(&mut value, Role::Agent);
        assert!(canaries(&value).is_empty(), "{value}");
        let config = super::super::load_str(
            Some(&value.to_string()),
            Path::new("config.json"),
            &HashMap::new(),
        )
        .expect("two bots' withheld tokens are not one token shared");
        assert_eq!(config.chat_channels("b"), ["telegram"]);
    }

    /// The `NAME-CANARY` words of `value`.
    fn url_canaries(value: &Value) -> Vec<String> {
        let text = value.to_string();
        let mut found: Vec<String> = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.ends_with("-CANARY"))
            .map(String::from)
            .collect();
        found.sort();
        found.dedup();
        found
    }

    fn with_urls() -> Value {
        json!({
            "providers": {"custom": {"apiKey": "sk-x",
                "apiBase": "https://me:PROVIDER-CANARY@llm.x/模型/🙂?api-version=2024&key=QUERY-CANARY#top"}},
            "channels": {"telegram": {"enabled": true, "token": "1:t",
                "proxy": "http://me:TGPROXY-CANARY@proxy.x:3128"}},
            "tools": {
                "web": {"proxy": "socks5://me:WEBPROXY-CANARY@proxy.x:1080"},
                "mcpServers": {"gh": {"url": "https://mcp.x/sse?mode=全部&access_token=MCP-CANARY",
                                       "args": ["--url", "https://USERTOKEN-CANARY@mcp.y/"]}}
            },
            "store": {"url": "redis://agent:REDIS-CANARY@127.0.0.1:6379"}
        })
    }

    #[test]
    fn secrets_in_urls_reach_only_the_roles_that_use_them() {
        let scoped = |role: Role| {
            let mut value = with_urls();
            withhold(&mut value, role);
            value
        };
        let llm = ["PROVIDER-CANARY", "QUERY-CANARY", "REDIS-CANARY"];
        assert_eq!(url_canaries(&scoped(Role::Agent)), llm);
        assert_eq!(url_canaries(&scoped(Role::Memory)), llm);
        assert_eq!(
            url_canaries(&scoped(Role::Tools)),
            ["MCP-CANARY", "USERTOKEN-CANARY", "WEBPROXY-CANARY"]
        );
        assert_eq!(
            url_canaries(&scoped(Role::Gateway)),
            ["REDIS-CANARY", "TGPROXY-CANARY"]
        );
        assert_eq!(url_canaries(&scoped(Role::Cron)), ["REDIS-CANARY"]);
        let tools = scoped(Role::Tools);
        assert_eq!(
            tools["providers"]["custom"]["apiBase"],
            "https://me:withheld-from-this-role@llm.x/模型/🙂?api-version=2024&key=withheld-from-this-role#top",
            "only the secrets change"
        );
        assert_eq!(
            scoped(Role::Agent)["tools"]["mcpServers"]["gh"]["url"],
            "https://mcp.x/sse?mode=全部&access_token=withheld-from-this-role"
        );
        assert_eq!(
            tools["store"]["url"],
            "redis://agent:withheld-from-this-role@127.0.0.1:6379"
        );
        let env = HashMap::new();
        for role in Role::ALL {
            let text = scoped(role).to_string();
            super::super::load_str(Some(&text), Path::new("config.json"), &env)
                .unwrap_or_else(|e| panic!("{} loads: {e}", role.name()));
        }
        assert_eq!(withhold_in_url("https://api.x/v1?model=a"), None);
        assert_eq!(
            withhold_in_url("nats://a:p1@n1:4222,nats://b:p2@n2:4222").as_deref(),
            Some(
                "nats://a:withheld-from-this-role@n1:4222,nats://b:withheld-from-this-role@n2:4222"
            )
        );
    }

    #[test]
    fn an_unknown_role_is_refused_with_the_known_ones() {
        assert_eq!(role_named("tools"), Ok(Role::Tools));
        let err = role_named("tool").unwrap_err();
        assert!(
            err.contains("gateway, agent, tools, memory, cron, cli"),
            "{err}"
        );
    }

    #[test]
    fn every_role_keeps_the_otlp_headers_it_exports_with() {
        // Every role exports its spans, so each needs the collector's API key.
        for role in Role::ALL {
            let mut value =
                json!({"telemetry": {"otlpHeaders": {"x-honeycomb-team": "HC-CANARY"}}});
            withhold(&mut value, role);
            assert_eq!(
                value["telemetry"]["otlpHeaders"]["x-honeycomb-team"], "HC-CANARY",
                "{role:?}"
            );
        }
    }
}
