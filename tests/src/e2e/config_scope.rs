//! `nanobot config scope`: a role's copy of the config without the secrets it does not use
//! (docker-compose writes one per role: `compose.rs` checks that wiring). The tool executors,
//! which run model-chosen shell commands, keep their MCP servers' headers but get no provider
//! key or channel token; every copy loads and configures everything else exactly as the whole
//! file does.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use nanobot_runtime::config::{self, Config, scope::WITHHELD};

use crate::harness::bin_path;

/// An LLM provider's key (agent and memory).
pub(super) const PROVIDER_CANARY: &str = "sk-ant-canary-provider-7f3a";
/// The voice transcription provider's key (agent, memory and the gateway).
pub(super) const GROQ_CANARY: &str = "gsk_canary-transcription-51c2";
/// A chat channel's token (the gateway).
pub(super) const CHANNEL_CANARY: &str = "123456:canary-channel-token-9e1b";
/// An MCP server's header (the tool executors).
pub(super) const MCP_CANARY: &str = "Bearer canary-mcp-header-c04d";

/// A config holding one secret of each kind, and settings beside them.
pub(super) fn full_config() -> Value {
    json!({
        "agents": {"defaults": {"model": "anthropic/claude-opus-4-5", "maxTokens": 4096}},
        "providers": {
            "anthropic": {"apiKey": PROVIDER_CANARY},
            "groq": {"apiKey": GROQ_CANARY}
        },
        "channels": {
            "sendToolHints": false,
            "telegram": {"enabled": true, "token": CHANNEL_CANARY, "allowFrom": ["42"]}
        },
        "tools": {
            "exec": {"timeout": 30},
            "mcpServers": {
                "github": {"url": "https://mcp.example.org/mcp", "headers": {"Authorization": MCP_CANARY}}
            }
        }
    })
}

/// The canaries of [`full_config`] a role's copy keeps.
pub(super) fn canaries_kept(role: &str) -> BTreeSet<&'static str> {
    match role {
        "gateway" => BTreeSet::from([CHANNEL_CANARY, GROQ_CANARY]),
        "agent" | "memory" => BTreeSet::from([PROVIDER_CANARY, GROQ_CANARY]),
        "tools" => BTreeSet::from([MCP_CANARY]),
        _ => BTreeSet::new(),
    }
}

/// The canaries of [`full_config`] in `text`.
pub(super) fn canaries_in(text: &str) -> BTreeSet<&'static str> {
    [PROVIDER_CANARY, GROQ_CANARY, CHANNEL_CANARY, MCP_CANARY]
        .into_iter()
        .filter(|c| text.contains(c))
        .collect()
}

/// Runs `nanobot -c config config scope --role role --out out` without inherited `NANOBOT_…`
/// variables.
fn scope(config: &Path, role: &str, out: &Path) -> Output {
    let mut command = Command::new(bin_path("nanobot").unwrap());
    command
        .arg("-c")
        .arg(config)
        .args(["config", "scope", "--role", role, "--out"])
        .arg(out);
    for (name, _) in std::env::vars() {
        if name.starts_with("NANOBOT_") {
            command.env_remove(name);
        }
    }
    command.output().expect("run nanobot config scope")
}

fn load(path: &Path) -> Config {
    config::load(Some(path), &HashMap::new())
        .unwrap_or_else(|e| panic!("{} loads: {e}", path.display()))
}

/// Collects the dotted paths of the leaves where `a` and `b` differ.
fn differences(a: &Value, b: &Value, at: &str, out: &mut BTreeSet<String>) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let child = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                let null = Value::Null;
                differences(
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    &child,
                    out,
                );
            }
        }
        (a, b) if a != b => {
            out.insert(at.to_string());
        }
        _ => {}
    }
}

fn pointer<'a>(value: &'a Value, dotted: &str) -> &'a Value {
    value
        .pointer(&format!("/{}", dotted.replace('.', "/")))
        .unwrap_or(&Value::Null)
}

#[test]
fn the_tools_config_keeps_its_mcp_headers_and_withholds_provider_keys_and_channel_tokens() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("config.json");
    std::fs::write(&whole, full_config().to_string()).unwrap();
    let out = dir.path().join("tools/config.json");

    let run = scope(&whole, "tools", &out);
    assert!(run.status.success(), "{run:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(canaries_in(&text), BTreeSet::from([MCP_CANARY]), "{text}");
    let mode = std::fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the copy is readable by its owner only"
    );

    // Loaded as the role loads it: the same settings, only the withheld secrets differ.
    let whole = serde_json::to_value(load(&whole)).unwrap();
    let scoped_config = load(&out);
    let scoped = serde_json::to_value(&scoped_config).unwrap();
    let mut differ = BTreeSet::new();
    differences(&whole, &scoped, "", &mut differ);
    assert_eq!(
        differ,
        BTreeSet::from([
            "channels.telegram.token".to_string(),
            "providers.anthropic.apiKey".to_string(),
            "providers.groq.apiKey".to_string(),
        ])
    );
    for path in &differ {
        assert_eq!(pointer(&scoped, path), WITHHELD, "{path}");
    }
    assert_eq!(
        scoped_config.chat_channels("default"),
        ["telegram"],
        "the message tool still knows where the bot chats"
    );
}

#[test]
fn every_role_gets_only_the_secrets_it_uses() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("config.json");
    std::fs::write(&whole, full_config().to_string()).unwrap();
    let whole_config = serde_json::to_value(load(&whole)).unwrap();
    for role in ["gateway", "agent", "tools", "memory", "cron", "cli"] {
        let out = dir.path().join(role).join("config.json");
        let run = scope(&whole, role, &out);
        assert!(run.status.success(), "{role}: {run:?}");
        let text = std::fs::read_to_string(&out).unwrap();
        assert_eq!(canaries_in(&text), canaries_kept(role), "{role}: {text}");
        let scoped = serde_json::to_value(load(&out)).unwrap();
        let mut differ = BTreeSet::new();
        differences(&whole_config, &scoped, "", &mut differ);
        for path in &differ {
            assert_eq!(pointer(&scoped, path), WITHHELD, "{role}: {path}");
        }
    }
}

#[test]
fn an_invalid_config_or_an_unknown_role_is_refused_and_the_last_copy_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("config.json.tools");
    std::fs::write(&out, "{\"previous\": true}").unwrap();

    let bad = dir.path().join("bad.json");
    let mut config = full_config();
    config["channels"]["telegram"]["token"] = json!("");
    std::fs::write(&bad, config.to_string()).unwrap();
    let run = scope(&bad, "tools", &out);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("channels.telegram.token: required when the channel is enabled"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(PROVIDER_CANARY),
        "no secret in the error: {stderr}"
    );

    let good = dir.path().join("good.json");
    std::fs::write(&good, full_config().to_string()).unwrap();
    let run = scope(&good, "tool", &out);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("unknown role \"tool\""), "{stderr}");

    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "{\"previous\": true}"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 3, "nothing else written: {names:?}");
}

#[test]
fn credentials_inside_urls_reach_only_the_role_that_uses_them() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("config.json");
    let config = json!({
        "agents": {"defaults": {"model": "custom/model-x", "provider": "custom"}},
        "providers": {"custom": {"apiKey": "k",
            "apiBase": "https://me:PROVIDER-URL-CANARY@llm.example.org/v1/模型?api-version=1"}},
        "channels": {"telegram": {"enabled": true, "token": "1:t", "allowFrom": ["42"],
            "proxy": "http://me:TGPROXY-URL-CANARY@proxy.example.org:3128"}},
        "tools": {
            "web": {"proxy": "socks5://me:WEBPROXY-URL-CANARY@proxy.example.org:1080"},
            "mcpServers": {"github": {"url": "https://mcp.example.org/mcp?token=MCP-URL-CANARY&lang=中文"}}
        }
    });
    std::fs::write(&whole, config.to_string()).unwrap();
    let canaries = [
        "PROVIDER-URL-CANARY",
        "TGPROXY-URL-CANARY",
        "WEBPROXY-URL-CANARY",
        "MCP-URL-CANARY",
    ];
    for (role, kept) in [
        ("agent", &["PROVIDER-URL-CANARY"][..]),
        ("memory", &["PROVIDER-URL-CANARY"]),
        ("gateway", &["TGPROXY-URL-CANARY"]),
        ("tools", &["WEBPROXY-URL-CANARY", "MCP-URL-CANARY"]),
        ("cron", &[]),
        ("cli", &[]),
    ] {
        let out = dir.path().join(format!("{role}/config.json"));
        let run = scope(&whole, role, &out);
        assert!(run.status.success(), "{role}: {run:?}");
        let text = std::fs::read_to_string(&out).unwrap();
        let found: Vec<&str> = canaries.into_iter().filter(|c| text.contains(c)).collect();
        assert_eq!(found, kept, "{role}: {text}");
        let scoped = load(&out);
        assert!(
            scoped.tools.mcp_servers["github"]["url"]
                .as_str()
                .is_some_and(|u| u.contains("lang=中文")),
            "{role}: the rest of a URL is kept"
        );
    }
}
