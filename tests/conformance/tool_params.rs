//! Tool parameters (`nanobot_tools::params::prepare_params`) against 0.3.5's
//! `ToolRegistry.prepare_call` on a tool with the case's schema (through
//! `adapters_tool_params.py`), in `tool_params.json`: argument coercion and `{"arguments": …}`
//! unwrapping, the casts from strings (Python's `int`, `float` and its boolean words, `str` of
//! any value), validation and its error texts with Python reprs (enum lists with CJK, emoji
//! and ZWJ sequences), lengths in code points, ranges, arrays and nested paths.
//!
//! A case's args are `[schema, params]`; `params` is what the provider parsed, which we hand to
//! `prepare_params` as the JSON text the executors receive, keys in the order the table writes
//! them (several errors come in that order, as 0.3.5's dicts keep it).

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::{Value, json};

use nanobot_runtime::json_order::KeyOrder;

use nanobot_tools::params::prepare_params;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("tool_params.json");

/// Each case's parameters' key order, as written in the table (our parsed maps sort keys).
static ORDERS: LazyLock<HashMap<String, KeyOrder>> = LazyLock::new(|| {
    let cases = KeyOrder::of(TABLE);
    harness::parse(TABLE)
        .cases
        .iter()
        .enumerate()
        .map(|(i, case)| {
            let order = cases.get("cases").item(i).get("args").item(1).clone();
            (case.name.clone(), order)
        })
        .collect()
});

fn call(case: &Case) -> Result<Value, String> {
    let [schema, params] = case.args.as_deref().unwrap_or_default() else {
        return Err("args must be [schema, params]".into());
    };
    // The parameters as the table writes them: their key order decides the errors' order.
    let arguments_json = ORDERS
        .get(&case.name)
        .map_or_else(|| params.to_string(), |order| order.write(params));
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

#[test]
fn where_we_deliberately_differ_the_answer_is_still_bounded_and_complete() {
    let table = harness::parse(TABLE);
    let deliberate: Vec<&Case> = table
        .cases
        .iter()
        .filter(|case| case.deliberate.is_some())
        .collect();
    assert_eq!(deliberate.len(), 1, "the table's deliberate cases");
    for case in deliberate {
        // Beyond 64 bits: refused as not an integer, never wrapped or rounded.
        let ours = call(case).unwrap();
        let refused = "Error: Invalid parameters for tool 'probe': n should be integer";
        assert_eq!(ours, json!({ "error": refused }), "{}", case.name);
    }
}
