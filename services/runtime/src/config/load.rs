//! Loading: JSON file → `${VAR}` interpolation → `NANOBOT_…` env overrides → typed sections →
//! the local fleet's generated credentials ([`super::secrets`]), collecting every problem
//! before failing once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::schema::Config;

/// Env prefix of config overrides.
pub const ENV_PREFIX: &str = "NANOBOT_";
/// Env var naming the config file.
pub const CONFIG_ENV: &str = "NANOBOT_CONFIG";
/// Env var of strict mode: when `1`/`true`/`yes`, unknown keys are load errors instead of a
/// warning.
pub const STRICT_ENV: &str = "NANOBOT_STRICT_CONFIG";

/// A config that could not be loaded, with every problem found.
#[derive(Debug, thiserror::Error)]
#[error("invalid config {}:\n  - {}", path.display(), problems.join("\n  - "))]
pub struct ConfigError {
    /// The file that was read (or would have been).
    pub path: PathBuf,
    /// One line per problem.
    pub problems: Vec<String>,
}

/// Returns the default config path, `~/.nanobot/config.json`.
pub fn default_path() -> PathBuf {
    dirs::home_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".nanobot")
        .join("config.json")
}

/// Returns the config path [`load`] reads: `path`, else `NANOBOT_CONFIG`, else the default.
pub fn resolve_path(path: Option<&Path>, env: &HashMap<String, String>) -> PathBuf {
    explicit_path(path, env).unwrap_or_else(default_path)
}

fn explicit_path(path: Option<&Path>, env: &HashMap<String, String>) -> Option<PathBuf> {
    path.map(Path::to_path_buf)
        .or_else(|| env.get(CONFIG_ENV).map(PathBuf::from))
}

/// Loads the config from `path` (or `NANOBOT_CONFIG`, or the default path) with overrides from
/// `env`. A missing file is an error only when named explicitly.
pub fn load(path: Option<&Path>, env: &HashMap<String, String>) -> Result<Config, ConfigError> {
    let (path, text) = read(path, env)?;
    load_str(text.as_deref(), &path, env)
}

/// Returns the path [`load`] reads and its text (`None`: no file at the default path).
pub fn read(
    path: Option<&Path>,
    env: &HashMap<String, String>,
) -> Result<(PathBuf, Option<String>), ConfigError> {
    let explicit = explicit_path(path, env);
    let path = explicit.clone().unwrap_or_else(default_path);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((path, Some(text))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {
            Ok((path, None))
        }
        Err(e) => Err(ConfigError {
            path,
            problems: vec![format!("cannot read file: {e}")],
        }),
    }
}

/// Loads from JSON text (`None` = no file) with overrides from `env`.
pub fn load_str(
    text: Option<&str>,
    path: &Path,
    env: &HashMap<String, String>,
) -> Result<Config, ConfigError> {
    let fail = |problems| ConfigError {
        path: path.to_path_buf(),
        problems,
    };
    let mut root = match text {
        Some(t) if !t.trim().is_empty() => serde_json::from_str::<Value>(t)
            .map_err(|e| fail(vec![format!("not valid JSON: {e}")]))?,
        _ => Value::Object(Map::new()),
    };
    if !root.is_object() {
        return Err(fail(vec!["the top level must be a JSON object".into()]));
    }
    let mut problems = Vec::new();
    interpolate(&mut root, "", env, &mut problems);
    apply_env(&mut root, env);
    migrate(&mut root);
    let mut unknown = Vec::new();
    let mut config = typed(&root, &mut problems, &mut unknown);
    let zone = &mut config.agents.defaults.timezone;
    if zone.trim().is_empty() {
        *zone = host_zone();
    }
    if let Some(secrets) = super::secrets::read(&super::secrets::path_for(path)) {
        secrets.apply_to(&mut config);
    }
    problems.extend(super::validate::validate(&config, &mut unknown));
    let strict = env
        .get(STRICT_ENV)
        .is_some_and(|v| matches!(v.trim().to_lowercase().as_str(), "1" | "true" | "yes"));
    if strict {
        problems.extend(unknown.iter().map(|k| format!("{k}: unknown key")));
    } else {
        config.unknown_keys = unknown;
    }
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(fail(problems))
    }
}

/// Returns the host's IANA zone name, `UTC` when it has none chrono-tz knows.
fn host_zone() -> String {
    iana_time_zone::get_timezone()
        .ok()
        .filter(|name| name.parse::<chrono_tz::Tz>().is_ok())
        .unwrap_or_else(|| "UTC".into())
}

/// Replaces `${VAR}` in every string with the variable's value; a missing one is a problem.
fn interpolate(
    value: &mut Value,
    at: &str,
    env: &HashMap<String, String>,
    problems: &mut Vec<String>,
) {
    match value {
        Value::String(s) if s.contains("${") => {
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(start) = rest.find("${") {
                out.push_str(&rest[..start]);
                let Some(end) = rest[start..].find('}') else {
                    out.push_str(&rest[start..]);
                    rest = "";
                    break;
                };
                let name = &rest[start + 2..start + end];
                match env.get(name) {
                    Some(v) => out.push_str(v),
                    None => problems.push(format!("{at}: environment variable {name} is not set")),
                }
                rest = &rest[start + end + 1..];
            }
            out.push_str(rest);
            *s = out;
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                interpolate(item, &format!("{at}[{i}]"), env, problems);
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let child = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                interpolate(v, &child, env, problems);
            }
        }
        _ => {}
    }
}

/// Top-level sections, in snake_case, that env overrides may address.
const SECTIONS: &[&str] = &[
    "agents",
    "channels",
    "providers",
    "api",
    "gateway",
    "tools",
    "transcription",
    "model_presets",
    "bus",
    "store",
    "telemetry",
    "runner",
    "bots",
];

/// Normalises a key for camelCase/snake_case-insensitive comparison.
pub(crate) fn norm(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

fn camel(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Applies `NANOBOT_SECTION__KEY__SUBKEY=value` overrides (env wins over the file).
fn apply_env(root: &mut Value, env: &HashMap<String, String>) {
    let mut overrides: Vec<(&String, &String)> = env
        .iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    overrides.sort();
    for (key, raw) in overrides {
        let path: Vec<String> = key[ENV_PREFIX.len()..]
            .split("__")
            .map(str::to_lowercase)
            .collect();
        if !SECTIONS.contains(&path[0].as_str()) {
            continue;
        }
        let value =
            serde_json::from_str::<Value>(raw).unwrap_or_else(|_| Value::String(raw.clone()));
        set_path(root, &path, value);
    }
}

fn set_path(node: &mut Value, path: &[String], value: Value) {
    let Some((first, rest)) = path.split_first() else {
        *node = value;
        return;
    };
    if !node.is_object() {
        *node = Value::Object(Map::new());
    }
    let Value::Object(map) = node else { return };
    let existing = map.keys().find(|k| norm(k) == norm(first)).cloned();
    let key = existing.unwrap_or_else(|| camel(first));
    set_path(map.entry(key).or_insert(Value::Null), rest, value);
}

/// Upstream migrations: `tools.exec.restrictToWorkspace` → `tools.restrictToWorkspace`.
fn migrate(root: &mut Value) {
    let Some(tools) = root.get_mut("tools").and_then(Value::as_object_mut) else {
        return;
    };
    let moved = tools
        .get_mut("exec")
        .and_then(Value::as_object_mut)
        .and_then(|exec| {
            let k = exec
                .keys()
                .find(|k| norm(k) == "restricttoworkspace")
                .cloned()?;
            exec.remove(&k)
        });
    if let Some(v) = moved
        && !tools.keys().any(|k| norm(k) == "restricttoworkspace")
    {
        tools.insert("restrictToWorkspace".into(), v);
    }
}

/// Deserialises each top-level section on its own so that problems in several sections are
/// all reported; unknown keys anywhere in typed sections go to `unknown` (dotted paths).
fn typed(root: &Value, problems: &mut Vec<String>, unknown: &mut Vec<String>) -> Config {
    let mut config = Config::default();
    let Value::Object(map) = root else {
        return config;
    };
    for (key, value) in map {
        let ok = match norm(key).as_str() {
            "agents" => section(key, value, problems, unknown).map(|v| config.agents = v),
            "channels" => section(key, value, problems, unknown).map(|v| config.channels = v),
            "providers" => section(key, value, problems, unknown).map(|v| config.providers = v),
            "api" => section(key, value, problems, unknown).map(|v| config.api = v),
            "gateway" => section(key, value, problems, unknown).map(|v| config.gateway = v),
            "tools" => section(key, value, problems, unknown).map(|v| config.tools = v),
            "transcription" => {
                config.transcription = value.clone();
                Some(())
            }
            "modelpresets" => {
                section(key, value, problems, unknown).map(|v| config.model_presets = v)
            }
            "bus" => section(key, value, problems, unknown).map(|v| config.bus = v),
            "store" => section(key, value, problems, unknown).map(|v| config.store = v),
            "telemetry" => section(key, value, problems, unknown).map(|v| config.telemetry = v),
            "runner" => section(key, value, problems, unknown).map(|v| config.runner = v),
            "bots" => section(key, value, problems, unknown).map(|v| config.bots = v),
            _ => {
                unknown.push(key.clone());
                Some(())
            }
        };
        let _ = ok;
    }
    super::validate::unknown_extras(&config, problems, unknown);
    config
}

fn section<T: DeserializeOwned>(
    key: &str,
    value: &Value,
    problems: &mut Vec<String>,
    unknown: &mut Vec<String>,
) -> Option<T> {
    let mut ignored = Vec::new();
    let mut on_unknown = |p: serde_ignored::Path<'_>| ignored.push(p.to_string());
    let de = serde_ignored::Deserializer::new(value, &mut on_unknown);
    let parsed: Result<T, _> = serde_path_to_error::deserialize(de);
    unknown.extend(ignored.into_iter().map(|p| format!("{key}.{p}")));
    match parsed {
        Ok(v) => Some(v),
        Err(e) => {
            let at = e.path().to_string();
            let at = if at == "." {
                key.to_string()
            } else {
                format!("{key}.{at}")
            };
            problems.push(format!("{at}: {}", e.into_inner()));
            None
        }
    }
}
