//! Tool parameters (`nanobot_tools::params::prepare_params`) against 0.3.5's
//! `ToolRegistry.prepare_call` on a tool with the case's schema (through
//! `adapters_tool_params.py`), in `tool_params.json`: argument coercion and `{"arguments": …}`
//! unwrapping, the casts from strings (Python's `int`, `float` and its boolean words, `str` of
//! any value), validation and its error texts with Python reprs (enum lists with CJK, emoji
//! and ZWJ sequences), lengths in code points, ranges, arrays and nested paths.
//!
//! A case's args are `[schema, params]`; `params` is what the provider parsed, which we hand to
//! `prepare_params` as the JSON text the executors receive.

use serde_json::{Value, json};

use nanobot_tools::params::prepare_params;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("tool_params.json");

fn call(case: &Case) -> Result<Value, String> {
    let [schema, params] = case.args.as_deref().unwrap_or_default() else {
        return Err("args must be [schema, params]".into());
    };
    let arguments_json = serde_json::to_string(params).map_err(|e| e.to_string())?;
    Ok(
        match prepare_params("probe", &arguments_json, schema, |_| Vec::new()) {
            Ok(cast) => json!({"ok": cast}),
            Err(error) => json!({"error": error}),
        },
    )
}

#[test]
fn tool_parameters_are_coerced_cast_and_validated_exactly_as_0_3_5() {
    harness::check(TABLE, call);
}

/// The error texts of an outcome, in name order.
fn sorted_errors(outcome: &Value) -> Vec<String> {
    let text = outcome["error"].as_str().unwrap_or_default();
    let list = text.split_once(": ").map_or(text, |(_, list)| list);
    let mut errors: Vec<String> = list.split("; ").map(str::to_owned).collect();
    errors.sort();
    errors
}

#[test]
fn where_we_deliberately_differ_the_answer_is_still_bounded_and_complete() {
    let table = harness::parse(TABLE);
    let deliberate: Vec<&Case> = table
        .cases
        .iter()
        .filter(|case| case.deliberate.is_some())
        .collect();
    assert_eq!(deliberate.len(), 2, "the table's deliberate cases");
    for case in deliberate {
        let ours = call(case).unwrap();
        if case.name.starts_with("integer from the string") {
            // Beyond 64 bits: refused as not an integer, never wrapped or rounded.
            let refused = "Error: Invalid parameters for tool 'probe': n should be integer";
            assert_eq!(ours, json!({ "error": refused }), "{}", case.name);
        } else {
            // Several errors: the same ones as 0.3.5, in another order.
            assert_eq!(sorted_errors(&ours), sorted_errors(&case.expected));
            assert_ne!(sorted_errors(&ours), Vec::<String>::new());
        }
    }
}
