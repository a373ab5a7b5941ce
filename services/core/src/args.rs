//! Tool-call argument text: strict parse first, then a small repair for the usual model
//! slips (code fences, trailing commas, unclosed strings/brackets, single quotes around a
//! whole object), as upstream's `json_repair` does for replay.

use serde_json::Value;

/// Returns the arguments as a JSON object: parsed as is, or repaired. `None` when nothing
/// sensible can be made of the text (the caller reports it to the model).
pub fn parse_object(raw: &str) -> Option<Value> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Some(Value::Object(Default::default()));
    }
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return v.is_object().then_some(v);
    }
    repair(trimmed).filter(Value::is_object)
}

/// Returns `raw` repaired into JSON text when that yields an object; the text unchanged
/// otherwise (so the executor reports the problem with upstream's strings).
pub fn repaired_text(raw: &str) -> String {
    if serde_json::from_str::<Value>(raw.trim()).is_ok() {
        return raw.to_string();
    }
    match parse_object(raw) {
        Some(v) => v.to_string(),
        None => raw.to_string(),
    }
}

fn repair(text: &str) -> Option<Value> {
    let mut t = text.trim().to_string();
    if let Some(rest) = t.strip_prefix("```") {
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        t = rest.trim_end().trim_end_matches("```").trim().to_string();
    }
    let start = t.find('{')?;
    let t = &t[start..];
    let mut out = String::with_capacity(t.len() + 8);
    let mut stack = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for c in t.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' => {
                stack.push('}');
                out.push(c);
            }
            '[' => {
                stack.push(']');
                out.push(c);
            }
            '}' | ']' => {
                strip_trailing_comma(&mut out);
                if stack.pop() != Some(c) {
                    return None;
                }
                out.push(c);
                if stack.is_empty() {
                    break;
                }
            }
            _ => out.push(c),
        }
    }
    if in_string {
        out.push('"');
    }
    while let Some(close) = stack.pop() {
        strip_trailing_comma(&mut out);
        out.push(close);
    }
    serde_json::from_str(&out).ok()
}

fn strip_trailing_comma(out: &mut String) {
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    if out.ends_with(',') {
        out.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn common_slips_are_repaired_into_objects() {
        assert_eq!(
            parse_object("{\"path\": \"a.txt\"}"),
            Some(json!({"path": "a.txt"}))
        );
        assert_eq!(
            parse_object("{\"path\": \"a.txt\","),
            Some(json!({"path": "a.txt"}))
        );
        assert_eq!(
            parse_object("```json\n{\"a\": [1, 2,]}\n```"),
            Some(json!({"a": [1, 2]}))
        );
        assert_eq!(
            parse_object("{\"command\": \"ls -la"),
            Some(json!({"command": "ls -la"}))
        );
        assert_eq!(parse_object(""), Some(json!({})));
    }

    #[test]
    fn hopeless_text_is_left_for_the_executor_to_report() {
        assert_eq!(parse_object("not json at all"), None);
        assert_eq!(parse_object("[1, 2]"), None);
        assert_eq!(repaired_text("not json"), "not json");
        assert_eq!(repaired_text("{\"a\": 1,"), "{\"a\":1}");
        assert_eq!(repaired_text("{\"a\": 1}"), "{\"a\": 1}");
    }
}
