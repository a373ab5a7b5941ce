//! Parameter handling before a tool runs, with upstream's exact error strings: argument
//! coercion, the prepare-call errors (unknown tool, non-object parameters), schema-driven
//! casting (`cast_params`) and validation (`validate_params`).

use serde_json::{Map, Value};

use nanobot_runtime::json_order::KeyOrder;
use nanobot_runtime::pyfmt::{py_float, py_int, py_str};
pub use nanobot_runtime::pyfmt::{py_repr, py_type_name};

/// Turns the wire's `arguments_json` into a parameter value: empty → `{}`; JSON text is
/// parsed; a JSON string that itself holds a JSON object or array is parsed once more (no
/// repair); anything else is kept as a string (and later refused as "not an object").
pub fn coerce_arguments(raw: &str) -> Value {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Value::Object(Map::new());
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(Value::String(inner)) => coerce_string(inner),
        Ok(Value::Null) => Value::Object(Map::new()),
        Ok(value) => value,
        Err(_) => Value::String(raw.to_string()),
    }
}

fn coerce_string(text: String) -> Value {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Value::Object(Map::new());
    }
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && let Ok(value) = serde_json::from_str::<Value>(trimmed)
    {
        return value;
    }
    Value::String(text)
}

/// Unwraps `{"arguments": …}` (a model wrapping its parameters) unless the schema itself has
/// an `arguments` property.
pub fn unwrap_arguments(params: Value, schema: &Value) -> Value {
    let has_arguments_prop = schema.pointer("/properties/arguments").is_some();
    match params {
        Value::Object(mut map) if map.len() == 1 && !has_arguments_prop => {
            match map.remove("arguments") {
                Some(Value::String(inner)) => coerce_string(inner),
                Some(Value::Null) => Value::Object(Map::new()),
                Some(inner) => inner,
                None => Value::Object(map),
            }
        }
        other => other,
    }
}

pub use nanobot_proto::tool_names::unknown_tool_error;

/// Returns the error for parameters that are not a JSON object.
pub fn not_an_object_error(name: &str, params: &Value) -> String {
    format!(
        "Error: Tool '{name}' parameters must be a JSON object, got {}. Use named parameters \
         like tool_name(param1=\"value1\", param2=\"value2\") matching the tool schema.",
        py_type_name(params)
    )
}

/// Returns the error listing every validation problem.
pub fn invalid_params_error(name: &str, errors: &[String]) -> String {
    format!(
        "Error: Invalid parameters for tool '{name}': {}",
        errors.join("; ")
    )
}

/// Returns the non-null type of a schema (`["string", "null"]` → `string`).
fn schema_type(schema: &Value) -> Option<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => Some(t),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null"),
        _ => None,
    }
}

fn is_nullable(schema: &Value) -> bool {
    let in_union = matches!(schema.get("type"), Some(Value::Array(types)) if types.iter().any(|t| t == "null"));
    in_union
        || schema
            .get("nullable")
            .and_then(Value::as_bool)
            .unwrap_or(false)
}

/// Turns a call's `arguments_json` into the parameters tool `name` runs with, as upstream's
/// `prepare_call` after the tool is found: coercion, `{"arguments": …}` unwrapping, the
/// object check, `cast_params` and `validate_params` against `schema`, joined with the tool's
/// own checks (`extra`, on the cast parameters). `Err` is the text the model sees.
pub fn prepare_params(
    name: &str,
    arguments_json: &str,
    schema: &Value,
    extra: impl FnOnce(&Map<String, Value>) -> Vec<String>,
) -> Result<Map<String, Value>, String> {
    let raw = unwrap_arguments(coerce_arguments(arguments_json), schema);
    if !raw.is_object() {
        return Err(not_an_object_error(name, &raw));
    }
    let cast = cast_params(raw, schema);
    let order = arguments_order(arguments_json, schema);
    let mut errors = validate_params_in_order(&cast, schema, &order);
    let Value::Object(args) = cast else {
        return Err(not_an_object_error(name, &cast));
    };
    errors.extend(extra(&args));
    if !errors.is_empty() {
        return Err(invalid_params_error(name, &errors));
    }
    Ok(args)
}

// === cast_params ===

/// Applies upstream's safe, schema-driven casts (only when the schema is an object schema).
pub fn cast_params(params: Value, schema: &Value) -> Value {
    let root_type = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("object");
    if root_type != "object" {
        return params;
    }
    cast_object(params, schema)
}

fn cast_object(obj: Value, schema: &Value) -> Value {
    let Value::Object(map) = obj else { return obj };
    let props = schema.get("properties");
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let mut out = Map::new();
    for (key, value) in map {
        let prop = props.and_then(|p| p.get(&key));
        let cast = match (prop, additional) {
            (Some(prop), _) => cast_value(value, prop),
            (None, Some(extra)) => cast_value(value, extra),
            (None, None) => value,
        };
        out.insert(key, cast);
    }
    Value::Object(out)
}

fn cast_value(value: Value, schema: &Value) -> Value {
    let Some(t) = schema_type(schema) else {
        return value;
    };
    match (t, value) {
        (_, Value::Null) => Value::Null,
        ("integer", Value::String(s)) => match py_int(&s) {
            Some(n) => Value::from(n),
            None => Value::String(s),
        },
        // Non-finite floats stay strings; validation reports them as "must be finite".
        ("number", Value::String(s)) => match py_float(&s).and_then(serde_json::Number::from_f64) {
            Some(n) => Value::Number(n),
            None => Value::String(s),
        },
        ("string", v @ Value::String(_)) => v,
        ("string", v) => Value::String(py_str(&v)),
        ("boolean", Value::String(s)) => match s.to_lowercase().as_str() {
            "true" | "1" | "yes" => Value::Bool(true),
            "false" | "0" | "no" => Value::Bool(false),
            _ => Value::String(s),
        },
        ("array", Value::Array(items)) => match schema.get("items") {
            Some(item_schema) => Value::Array(
                items
                    .into_iter()
                    .map(|x| cast_value(x, item_schema))
                    .collect(),
            ),
            None => Value::Array(items),
        },
        ("object", v @ Value::Object(_)) => cast_object(v, schema),
        (_, v) => v,
    }
}

// === validate_params ===

/// The key order of `arguments_json` as the model wrote it, inside a `{"arguments": …}`
/// wrapper when [`unwrap_arguments`] takes it off.
fn arguments_order(arguments_json: &str, schema: &Value) -> KeyOrder {
    let order = KeyOrder::of(arguments_json);
    let has_arguments_prop = schema.pointer("/properties/arguments").is_some();
    match &order {
        KeyOrder::Object(keys)
            if keys.len() == 1 && keys[0].0 == "arguments" && !has_arguments_prop =>
        {
            match &keys[0].1 {
                KeyOrder::Leaf => match coerce_arguments(arguments_json).get("arguments") {
                    Some(Value::String(inner)) => KeyOrder::of(inner),
                    _ => KeyOrder::Leaf,
                },
                inner => inner.clone(),
            }
        }
        _ => order,
    }
}

/// Validates cast parameters against the tool's object schema; an empty list means valid.
/// Several errors come in key order (sorted); see [`validate_params_in_order`].
pub fn validate_params(params: &Value, schema: &Value) -> Vec<String> {
    validate_params_in_order(params, schema, &KeyOrder::Leaf)
}

/// [`validate_params`] with the errors in the order the model wrote the keys (`order`), as
/// 0.3.5 reports them (its dicts keep that order).
pub fn validate_params_in_order(params: &Value, schema: &Value, order: &KeyOrder) -> Vec<String> {
    if !params.is_object() {
        return vec![format!(
            "parameters must be an object, got {}",
            py_type_name(params)
        )];
    }
    let mut object_schema = schema.clone();
    if let Value::Object(map) = &mut object_schema {
        map.insert("type".into(), Value::String("object".into()));
    }
    validate_value(params, &object_schema, "", order)
}

fn subpath(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn validate_value(value: &Value, schema: &Value, path: &str, order: &KeyOrder) -> Vec<String> {
    let label = if path.is_empty() { "parameter" } else { path };
    let t = schema_type(schema);
    if value.is_null() && is_nullable(schema) {
        return Vec::new();
    }
    if let Some(error) = type_error(value, t, label) {
        return vec![error];
    }
    let mut errors = Vec::new();
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.iter().any(|o| py_eq(o, value))
    {
        let listed = py_repr(&Value::Array(options.clone()));
        errors.push(format!("{label} must be one of {listed}"));
    }
    match t {
        Some("integer" | "number") => check_range(value, schema, label, &mut errors),
        Some("string") => check_length(value, schema, label, &mut errors),
        Some("object") => check_object(value, schema, path, order, &mut errors),
        Some("array") => check_array(value, schema, path, label, order, &mut errors),
        _ => {}
    }
    errors
}

fn type_error(value: &Value, t: Option<&str>, label: &str) -> Option<String> {
    let ok = match t {
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => {
            if let Value::String(s) = value
                && py_float(s).is_some_and(|f| !f.is_finite())
            {
                return Some(format!("{label} must be finite"));
            }
            value.is_number()
        }
        Some("string") => value.is_string(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        _ => true,
    };
    (!ok).then(|| format!("{label} should be {}", t.unwrap_or_default()))
}

/// Python equality across JSON values (`1 == 1.0`, `True == 1`).
fn py_eq(a: &Value, b: &Value) -> bool {
    let as_num = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(x) => Some(f64::from(u8::from(*x))),
        _ => None,
    };
    match (as_num(a), as_num(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn check_range(value: &Value, schema: &Value, label: &str, errors: &mut Vec<String>) {
    let Some(v) = value.as_f64() else { return };
    if let Some(min) = schema
        .get("minimum")
        .filter(|m| m.as_f64().is_some_and(|m| v < m))
    {
        errors.push(format!("{label} must be >= {}", py_str(min)));
    }
    if let Some(max) = schema
        .get("maximum")
        .filter(|m| m.as_f64().is_some_and(|m| v > m))
    {
        errors.push(format!("{label} must be <= {}", py_str(max)));
    }
}

fn check_length(value: &Value, schema: &Value, label: &str, errors: &mut Vec<String>) {
    let Some(s) = value.as_str() else { return };
    let len = s.chars().count() as u64;
    let min = schema.get("minLength").and_then(Value::as_u64);
    let max = schema.get("maxLength").and_then(Value::as_u64);
    if let Some(min) = min.filter(|m| len < *m) {
        errors.push(format!("{label} must be at least {min} chars"));
    } else if let Some(max) = max.filter(|m| len > *m) {
        errors.push(format!("{label} must be at most {max} chars"));
    }
}

fn check_object(
    value: &Value,
    schema: &Value,
    path: &str,
    order: &KeyOrder,
    errors: &mut Vec<String>,
) {
    let Some(map) = value.as_object() else { return };
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(Value::Array(required)) = schema.get("required") {
        for key in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(key) {
                errors.push(format!("missing required {}", subpath(path, key)));
            }
        }
    }
    let additional = schema.get("additionalProperties");
    for (key, v, key_order) in order.members(map) {
        if let Some(prop) = props.get(key) {
            errors.extend(validate_value(v, prop, &subpath(path, key), key_order));
        } else if additional == Some(&Value::Bool(false)) {
            errors.push(format!("unexpected parameter {}", subpath(path, key)));
        } else if let Some(extra) = additional.filter(|a| a.is_object()) {
            errors.extend(validate_value(v, extra, &subpath(path, key), key_order));
        }
    }
}

fn check_array(
    value: &Value,
    schema: &Value,
    path: &str,
    label: &str,
    order: &KeyOrder,
    errors: &mut Vec<String>,
) {
    let Some(items) = value.as_array() else {
        return;
    };
    let len = items.len() as u64;
    if let Some(min) = schema
        .get("minItems")
        .and_then(Value::as_u64)
        .filter(|m| len < *m)
    {
        errors.push(format!("{label} must have at least {min} items"));
    }
    if let Some(max) = schema
        .get("maxItems")
        .and_then(Value::as_u64)
        .filter(|m| len > *m)
    {
        errors.push(format!("{label} must be at most {max} items"));
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            errors.extend(validate_value(
                item,
                item_schema,
                &format!("{path}[{i}]"),
                order.item(i),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "timeout": {"type": "integer", "minimum": 1, "maximum": 600},
                "ratio": {"type": "number"},
                "force": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "note": {"type": ["string", "null"], "maxLength": 3},
                "tags": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
                "opts": {"type": "object", "properties": {"depth": {"type": "integer"}}, "required": ["depth"]}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn check(params: Value) -> Vec<String> {
        let s = schema();
        validate_params(&cast_params(params, &s), &s)
    }

    #[test]
    fn validation_errors_use_upstream_strings() {
        let table: &[(Value, &[&str])] = &[
            (json!({"path": "x"}), &[]),
            (json!({}), &["missing required path"]),
            (json!({"path": 5}), &[]),
            (json!({"path": ""}), &["path must be at least 1 chars"]),
            (
                json!({"path": "x", "timeout": 0}),
                &["timeout must be >= 1"],
            ),
            (
                json!({"path": "x", "timeout": 601}),
                &["timeout must be <= 600"],
            ),
            (
                json!({"path": "x", "timeout": 1.5}),
                &["timeout should be integer"],
            ),
            (
                json!({"path": "x", "timeout": true}),
                &["timeout should be integer"],
            ),
            (
                json!({"path": "x", "timeout": "abc"}),
                &["timeout should be integer"],
            ),
            (
                json!({"path": "x", "ratio": "NaN"}),
                &["ratio must be finite"],
            ),
            (
                json!({"path": "x", "ratio": "-Infinity"}),
                &["ratio must be finite"],
            ),
            (
                json!({"path": "x", "ratio": true}),
                &["ratio should be number"],
            ),
            (
                json!({"path": "x", "force": "maybe"}),
                &["force should be boolean"],
            ),
            (
                json!({"path": "x", "mode": "c"}),
                &["mode must be one of ['a', 'b']"],
            ),
            (json!({"path": "x", "note": null}), &[]),
            (
                json!({"path": "x", "note": "long"}),
                &["note must be at most 3 chars"],
            ),
            (
                json!({"path": "x", "tags": []}),
                &["tags must have at least 1 items"],
            ),
            (
                json!({"path": "x", "tags": [1, 2, 3]}),
                &["tags must be at most 2 items"],
            ),
            (
                json!({"path": "x", "tags": ["z"]}),
                &["tags[0] should be integer"],
            ),
            (json!({"path": "x", "tags": 7}), &["tags should be array"]),
            (
                json!({"path": "x", "opts": {}}),
                &["missing required opts.depth"],
            ),
            (
                json!({"path": "x", "opts": {"depth": "q"}}),
                &["opts.depth should be integer"],
            ),
            (
                json!({"path": "x", "bogus": 1}),
                &["unexpected parameter bogus"],
            ),
            (
                json!({"mode": "z", "timeout": 0}),
                &[
                    "missing required path",
                    "mode must be one of ['a', 'b']",
                    "timeout must be >= 1",
                ],
            ),
        ];
        for (params, expected) in table {
            assert_eq!(check(params.clone()), *expected, "params {params}");
        }
        assert_eq!(
            validate_params(&json!([1]), &schema()),
            ["parameters must be an object, got list"]
        );
    }

    #[test]
    fn casts_follow_upstream_rules() {
        let s = schema();
        let cast = cast_params(
            json!({
                "path": 12, "timeout": " 1_0 ", "ratio": "2.5", "force": "YES",
                "tags": ["1", "x"], "opts": {"depth": "3"}, "note": null, "bogus": "7"
            }),
            &s,
        );
        assert_eq!(
            cast,
            json!({
                "path": "12", "timeout": 10, "ratio": 2.5, "force": true,
                "tags": [1, "x"], "opts": {"depth": 3}, "note": null, "bogus": "7"
            })
        );
        // Booleans never become integers, single values are never wrapped in arrays,
        // invalid strings are left for validation to report.
        let kept = cast_params(json!({"timeout": true, "tags": "1", "force": "maybe"}), &s);
        assert_eq!(
            kept,
            json!({"timeout": true, "tags": "1", "force": "maybe"})
        );
        assert_eq!(
            cast_params(json!({"path": false}), &s),
            json!({"path": "False"})
        );
        assert_eq!(
            cast_params(json!({"path": [1, "a"]}), &s),
            json!({"path": "[1, 'a']"})
        );
        assert_eq!(
            cast_params(json!({"force": "0"}), &s),
            json!({"force": false})
        );
    }

    #[test]
    fn arguments_are_coerced_before_validation() {
        assert_eq!(coerce_arguments(""), json!({}));
        assert_eq!(coerce_arguments("null"), json!({}));
        assert_eq!(coerce_arguments(r#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(coerce_arguments(r#""{\"a\":1}""#), json!({"a": 1}));
        assert_eq!(coerce_arguments(r#""""#), json!({}));
        assert_eq!(coerce_arguments("ls -la"), json!("ls -la"));
        assert_eq!(coerce_arguments("{broken"), json!("{broken"));
        assert_eq!(coerce_arguments("[1]"), json!([1]));
        let s = schema();
        assert_eq!(
            unwrap_arguments(json!({"arguments": {"path": "x"}}), &s),
            json!({"path": "x"})
        );
        assert_eq!(
            unwrap_arguments(json!({"arguments": "{\"path\":\"y\"}"}), &s),
            json!({"path": "y"})
        );
        let own = json!({"type": "object", "properties": {"arguments": {"type": "string"}}});
        assert_eq!(
            unwrap_arguments(json!({"arguments": "x"}), &own),
            json!({"arguments": "x"})
        );
    }

    #[test]
    fn prepare_call_errors_match_upstream() {
        // unknown_tool_error's texts are tested where it lives (proto::tool_names).
        assert_eq!(
            not_an_object_error("exec", &json!("ls")),
            "Error: Tool 'exec' parameters must be a JSON object, got str. Use named parameters \
             like tool_name(param1=\"value1\", param2=\"value2\") matching the tool schema."
        );
        assert_eq!(py_type_name(&json!(1.5)), "float");
        assert_eq!(py_type_name(&json!(null)), "NoneType");
        assert_eq!(
            invalid_params_error("exec", &["a".into(), "b".into()]),
            "Error: Invalid parameters for tool 'exec': a; b"
        );
    }
}
