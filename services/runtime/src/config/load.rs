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
pub(crate) fn interpolate(
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

/// Top-level sections, in snake_case: 0.3.5's and the fleet's. Env overrides may address only
/// these (others are ignored, as 0.3.5's pydantic-settings ignores `NANOBOT_…` variables it
/// has no field for); any other key of the file is refused.
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
/// all reported. An unknown top-level key is a problem (0.3.5 refuses it); unknown keys inside
/// sections go to `unknown` (dotted paths), as 0.3.5's nested models ignore them.
fn typed(root: &Value, problems: &mut Vec<String>, unknown: &mut Vec<String>) -> Config {
    let mut config = Config::default();
    let Value::Object(map) = root else {
        return config;
    };
    for (key, value) in map {
        if !is_top_level(key) {
            problems.push(unknown_top_level(key));
            continue;
        }
        let ok = match norm(key).as_str() {
            "agents" => section(key, value, problems, unknown).map(|v| config.agents = v),
            "channels" => section(key, value, problems, unknown).map(|v| config.channels = v),
            "providers" => section(key, &providers_only(key, value, unknown), problems, unknown)
                .map(|v| config.providers = v),
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
            // Refused above.
            _ => None,
        };
        let _ = ok;
    }
    super::validate::unknown_extras(&config, unknown);
    config
}

/// Returns `providers` without its entries that are not objects, listed in `unknown`: 0.3.5
/// keeps such an entry as a custom provider's raw value and never uses it.
fn providers_only(key: &str, value: &Value, unknown: &mut Vec<String>) -> Value {
    let Value::Object(map) = value else {
        return value.clone();
    };
    let mut kept = Map::new();
    for (name, entry) in map {
        if entry.is_object() {
            kept.insert(name.clone(), entry.clone());
        } else {
            unknown.push(format!("{key}.{name}"));
        }
    }
    Value::Object(kept)
}

/// Returns whether `key` names a top-level section: one of 0.3.5's `Config` fields, matched
/// case-insensitively by name or camelCase alias as pydantic-settings does (`Agents`,
/// `modelpresets`, not `model-presets`), or one of the fleet's own sections.
fn is_top_level(key: &str) -> bool {
    SECTIONS
        .iter()
        .chain(&["modelPresets"])
        .any(|name| name.eq_ignore_ascii_case(key))
}

/// The problem of an unknown top-level key: 0.3.5's `Config` forbids extra keys
/// (`extra_forbidden`), so the key is refused in any mode, not ignored.
fn unknown_top_level(key: &str) -> String {
    let plain = key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let shown = if plain && !key.is_empty() {
        key.to_string()
    } else {
        // Quoted, whole (a ZWJ emoji or a combining mark stays as typed); only controls,
        // quotes and backslashes are escaped so the message stays on one line.
        let inner: String = key
            .chars()
            .flat_map(|c| match c {
                '"' | '\\' => vec!['\\', c],
                c if c.is_control() => c.escape_default().collect(),
                c => vec![c],
            })
            .collect();
        format!("\"{inner}\"")
    };
    format!(
        "{shown}: Extra inputs are not permitted (unknown top-level key; the sections are {})",
        SECTIONS
            .iter()
            .map(|s| camel(s))
            .collect::<Vec<_>>()
            .join(", ")
    )
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

#[cfg(test)]
mod unknown_key_tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::load_str;

    fn problems(json: &str, env: &[(&str, &str)]) -> Vec<String> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        match load_str(Some(json), Path::new("/nonexistent/config.json"), &env) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems,
        }
    }

    #[test]
    fn every_unknown_top_level_key_is_refused_at_once_naming_the_sections() {
        let got = problems(
            r#"{"bogus":1,"agents":{"defaults":{"maxTokens":"many"}},"bus":{},"futureSection":{}}"#,
            &[],
        );
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(
            got.iter()
                .any(|p| p.starts_with("agents.defaults.maxTokens:"))
        );
        for key in ["bogus", "futureSection"] {
            let line = got.iter().find(|p| p.starts_with(key)).expect(key);
            assert!(
                line.starts_with(&format!("{key}: Extra inputs are not permitted")),
                "{line}"
            );
            assert!(line.contains("modelPresets"), "names the sections: {line}");
        }
    }

    #[test]
    fn the_fleets_own_sections_are_accepted_at_the_top_level_and_keep_their_strict_keys() {
        let fleet = r#"{"bus":{},"store":{},"runner":{},"telemetry":{},"bots":{}}"#;
        assert!(problems(fleet, &[]).is_empty());
        let got = problems(r#"{"bus":{"urll":"nats://x:1"}}"#, &[]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("bus.urll: unknown field"), "{}", got[0]);
    }

    #[test]
    fn a_channel_or_provider_entry_that_is_no_object_is_listed_as_unknown_not_refused() {
        let env = HashMap::new();
        let json = r#"{"channels":{"飞书":1},"providers":{"🇨🇳":"x","custom":{"apiKey":"k"}}}"#;
        let config = load_str(Some(json), Path::new("/nonexistent/config.json"), &env).unwrap();
        let mut keys = config.unknown_keys.clone();
        keys.sort();
        assert_eq!(keys, ["channels.飞书", "providers.🇨🇳"]);
        assert_eq!(config.providers.keys().collect::<Vec<_>>(), ["custom"]);
    }

    #[test]
    fn top_level_names_match_case_insensitively_but_not_with_dashes() {
        for ok in [
            r#"{"Agents":{}}"#,
            r#"{"modelpresets":{}}"#,
            r#"{"model_presets":{}}"#,
        ] {
            assert!(problems(ok, &[]).is_empty(), "{ok}");
        }
        assert_eq!(problems(r#"{"model-presets":{}}"#, &[]).len(), 1);
    }

    #[test]
    fn a_key_in_any_script_is_shown_whole_and_quoted() {
        for key in ["配置", "👩‍👩‍👧‍👦🇨🇳", "e\u{301}", "إعدادات", "הגדרות"]
        {
            let json = serde_json::json!({ key: 1 }).to_string();
            let got = problems(&json, &[]);
            assert_eq!(got.len(), 1, "{key}: {got:?}");
            assert!(
                got[0].starts_with(&format!("\"{key}\": Extra inputs are not permitted")),
                "{key}: {}",
                got[0]
            );
        }
        let got = problems(r#"{"a\nb\"c":1}"#, &[]);
        assert!(got[0].starts_with(r#""a\nb\"c": "#), "{}", got[0]);
    }

    #[test]
    fn env_overrides_of_keys_nobody_knows_are_ignored_as_0_3_5_ignores_them() {
        let env = [
            ("NANOBOT_FOO__BAR", "1"),
            ("NANOBOT_FOO_BAR", "1"),
            ("NANOBOT_AGENTS__DEFAULTS__FOO_BAR", "1"),
        ];
        assert!(problems("{}", &env).is_empty());
        let strict = [
            ("NANOBOT_AGENTS__DEFAULTS__FOO_BAR", "1"),
            ("NANOBOT_STRICT_CONFIG", "1"),
        ];
        assert_eq!(
            problems("{}", &strict),
            ["agents.defaults.fooBar: unknown key"],
            "strict mode refuses the nested one"
        );
    }
}
