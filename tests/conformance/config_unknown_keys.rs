//! Config: unknown keys at each level (`nanobot_runtime::config::load_str`, upstream's
//! `Config.model_validate` with its `NANOBOT_*` settings source), against
//! `config_unknown_keys.json`: refused at the top level with pydantic's "Extra inputs are not
//! permitted", accepted (ignored or kept) inside every section, and `NANOBOT_*` variables that
//! name nothing ignored. The fleet's own top-level sections (`bus`, …) are ours, so they are
//! tested beside the loader, not here.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{Value, json};

use nanobot_runtime::config::load_str;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("config_unknown_keys.json");

/// What pydantic says of a forbidden extra key; our problem line starts with it.
const EXTRA_FORBIDDEN: &str = "Extra inputs are not permitted";

/// Loads `config` with `env` as the whole environment and answers in the adapter's shape.
fn outcome(config: &Value, env: HashMap<String, String>) -> Value {
    let text = config.to_string();
    match load_str(Some(&text), Path::new("/nonexistent/config.json"), &env) {
        Ok(_) => json!({"outcome": "accepted"}),
        Err(e) => {
            let mut problems: Vec<[String; 2]> = e.problems.iter().map(|p| split(p)).collect();
            problems.sort();
            json!({"outcome": "refused", "problems": problems})
        }
    }
}

/// Splits a problem line into its dotted path (unquoted) and message (pydantic's words when
/// ours start with them).
fn split(problem: &str) -> [String; 2] {
    let (at, message) = match problem.strip_prefix('"') {
        Some(rest) => rest.split_once("\": ").unwrap_or((rest, "")),
        None => problem.split_once(": ").unwrap_or((problem, "")),
    };
    let message = if message.starts_with(EXTRA_FORBIDDEN) {
        EXTRA_FORBIDDEN
    } else {
        message
    };
    [at.to_string(), message.to_string()]
}

fn call(case: &Case) -> Result<Value, String> {
    match (case.function.as_str(), &case.args) {
        ("validate", None) => Ok(outcome(&case.input, HashMap::new())),
        ("validate_with_env", Some(args)) => {
            let env: BTreeMap<String, String> = serde_json::from_value(args[1].clone())
                .map_err(|e| format!("env is not a string map: {e}"))?;
            Ok(outcome(&args[0], env.into_iter().collect()))
        }
        (other, _) => Err(format!("no Rust function for {other} with these arguments")),
    }
}

#[test]
fn unknown_keys_are_refused_at_the_top_level_and_accepted_inside_sections_as_0_3_5() {
    harness::check(TABLE, call);
}

#[test]
fn the_table_covers_every_section_and_the_environment() {
    let table = harness::parse(TABLE);
    let refused = |case: &&Case| case.expected["outcome"] == "refused";
    assert!(table.cases.iter().filter(refused).count() >= 8);
    assert!(table.cases.len() >= 40, "{} cases", table.cases.len());
    assert!(
        table
            .cases
            .iter()
            .any(|case| case.function == "validate_with_env")
    );
}
