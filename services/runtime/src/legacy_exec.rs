//! The last release's `write_stdin` tool, migrated to `exec_session` as 0.3.5 migrates it
//! (`session/manager.py` `_migrate_legacy_exec_*`): one home for the executors (an old
//! runner's call) and the replay (a stored call). `chars` becomes `input`; `wait_timeout_ms`
//! (with `wait_for` or `until_exit`), else `yield_time_ms`, becomes `timeout_ms`; the output
//! limits go. Arguments encoded as text keep the order the model wrote them in and are
//! written back as Python's `json.dumps(..., ensure_ascii=False, separators=(",", ":"))`.
//! Remove with the compatibility after one release (0.3.5's `TODO(0.3.2)`).

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use nanobot_proto::exec::{EXEC_SESSION, LEGACY_WRITE_STDIN as WRITE_STDIN};

/// A JSON object's members in the order they were written.
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut out: Vec<(String, Value)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    // A repeated key keeps its first place and its last value, as a dict does.
                    match out.iter_mut().find(|(key, _)| *key == k) {
                        Some(slot) => slot.1 = v,
                        None => out.push((k, v)),
                    }
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(Members)
    }
}

impl Ordered {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(i).1)
    }

    fn insert(&mut self, key: &str, value: Value) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    /// Python's `json.dumps(..., ensure_ascii=False, separators=(",", ":"))`.
    fn dumps(&self) -> String {
        let members: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
            .collect();
        format!("{{{}}}", members.join(","))
    }
}

/// Python's truthiness of an argument.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// 0.3.5 `_migrate_legacy_exec_arguments` on an arguments object; whether it changed.
fn migrate(args: &mut Ordered) -> bool {
    let mut changed = false;
    if let Some(chars) = args.remove("chars") {
        if args.get("input").is_none() {
            args.insert("input", chars);
        }
        changed = true;
    }
    let wait_key = if truthy(args.get("wait_for")) || truthy(args.get("until_exit")) {
        "wait_timeout_ms"
    } else {
        "yield_time_ms"
    };
    if args.get("timeout_ms").is_none()
        && let Some(timeout) = args.get(wait_key).cloned()
    {
        args.insert("timeout_ms", timeout);
    }
    for key in [
        "yield_time_ms",
        "wait_timeout_ms",
        "max_output_chars",
        "max_output_tokens",
    ] {
        changed |= args.remove(key).is_some();
    }
    changed
}

/// Returns the migrated text of `arguments` (a JSON object as text), or `None` when nothing
/// changed or it is not a JSON object (0.3.5 leaves it alone).
pub fn migrate_arguments(arguments: &str) -> Option<String> {
    let mut args: Ordered = serde_json::from_str(arguments).ok()?;
    migrate(&mut args).then(|| args.dumps())
}

/// 0.3.5 `_migrate_legacy_exec_tool_call`: a `write_stdin` or `exec_session` call (OpenAI
/// `{"function": {...}}` or flat) renamed and its arguments migrated; whether it changed.
fn migrate_call(call: &mut Value) -> bool {
    let function = if call.get("function").is_some_and(Value::is_object) {
        &mut call["function"]
    } else {
        call
    };
    let name = function.get("name").and_then(Value::as_str);
    if !matches!(name, Some(WRITE_STDIN | EXEC_SESSION)) {
        return false;
    }
    let mut changed = name == Some(WRITE_STDIN);
    if changed {
        function["name"] = Value::String(EXEC_SESSION.into());
    }
    match function.get("arguments") {
        Some(Value::String(text)) => {
            if let Some(migrated) = migrate_arguments(text) {
                function["arguments"] = Value::String(migrated);
                changed = true;
            }
        }
        Some(Value::Object(map)) => {
            let mut args = Ordered(map.clone().into_iter().collect());
            if migrate(&mut args) {
                function["arguments"] = Value::Object(args.0.into_iter().collect());
                changed = true;
            }
        }
        _ => {}
    }
    changed
}

/// 0.3.5 `_migrate_legacy_exec_message`: a stored row's `write_stdin` tool name and tool
/// calls migrated in place; whether it changed.
pub fn migrate_row(row: &mut Value) -> bool {
    let mut changed = false;
    if row.get("name").and_then(Value::as_str) == Some(WRITE_STDIN) {
        row["name"] = Value::String(EXEC_SESSION.into());
        changed = true;
    }
    if let Some(calls) = row.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for call in calls {
            changed |= migrate_call(call);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn arguments_keep_the_models_order_and_python_s_compact_spelling() {
        assert_eq!(
            migrate_arguments(
                r#"{"session_id": "s1", "chars": "ls 文件\n", "yield_time_ms": 500}"#
            )
            .as_deref(),
            Some(r#"{"session_id":"s1","input":"ls 文件\n","timeout_ms":500}"#)
        );
        assert_eq!(
            migrate_arguments(
                r#"{"wait_for":"$ ","chars":"y","wait_timeout_ms":9,"yield_time_ms":1}"#
            )
            .as_deref(),
            Some(r#"{"wait_for":"$ ","input":"y","timeout_ms":9}"#)
        );
        assert_eq!(
            migrate_arguments(r#"{"input":"🐈","chars":"x","timeout_ms":3,"max_output_chars":1}"#)
                .as_deref(),
            Some(r#"{"input":"🐈","timeout_ms":3}"#)
        );
        assert_eq!(
            migrate_arguments(r#"{"session_id":"s1","input":"x"}"#),
            None
        );
        assert_eq!(migrate_arguments("not json"), None);
        assert_eq!(migrate_arguments("[1]"), None);
    }

    #[test]
    fn a_stored_write_stdin_call_and_its_result_are_renamed() {
        let mut call = json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "write_stdin",
             "arguments": "{\"session_id\":\"s\",\"chars\":\"q\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "exec", "arguments": "{\"chars\":1}"}}
        ]});
        assert!(migrate_row(&mut call));
        assert_eq!(call["tool_calls"][0]["function"]["name"], "exec_session");
        assert_eq!(
            call["tool_calls"][0]["function"]["arguments"],
            r#"{"session_id":"s","input":"q"}"#
        );
        assert_eq!(
            call["tool_calls"][1]["function"]["arguments"],
            "{\"chars\":1}"
        );
        let mut result =
            json!({"role": "tool", "tool_call_id": "c1", "name": "write_stdin", "content": "ok"});
        assert!(migrate_row(&mut result));
        assert_eq!(result["name"], "exec_session");
        let mut plain = json!({"role": "user", "content": "write_stdin"});
        assert!(!migrate_row(&mut plain));
    }
}
