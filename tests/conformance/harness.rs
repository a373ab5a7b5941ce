//! The generic half of the conformance suite: parses a table (`<area>.json`) and checks every
//! case against our function, reporting all mismatches at once with the upstream test each
//! case comes from. An area module only maps a case's `function` to a call.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::Value;

/// What a case's `source` says when its expected value is 0.3.5's output on our own input.
pub const CORPUS_SOURCE: &str = "0.3.5 output";
/// How a case's `source` starts when it restates an upstream test (`path::test_name`).
pub const UPSTREAM_PREFIX: &str = "upstream: ";

/// One upstream area's cases.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// What the area covers, for messages.
    pub area: String,
    /// Each `function` a case may name → the 0.3.5 callable (`module:name`) that gave its
    /// expected value (read by `fill_expected.py`).
    pub reference: BTreeMap<String, String>,
    /// The cases, in file order.
    pub cases: Vec<Case>,
}

/// One input and 0.3.5's answer to it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// A unique name within the table, naming the behaviour.
    pub name: String,
    /// `upstream: <path>::<test>` or [`CORPUS_SOURCE`].
    pub source: String,
    /// Which function of the area this case calls (a key of [`Table::reference`]).
    pub function: String,
    /// The single argument, for functions of one argument.
    #[serde(default)]
    pub input: Value,
    /// The positional arguments, for functions of several.
    #[serde(default)]
    pub args: Option<Vec<Value>>,
    /// What 0.3.5 returned.
    pub expected: Value,
    /// Why we deliberately differ from 0.3.5 on this case (e.g. "counts UTF-16"): [`check`]
    /// skips it and the area module asserts our own answer instead.
    #[serde(default)]
    pub deliberate: Option<String>,
}

impl Case {
    /// Returns the case's `input` as text.
    ///
    /// # Panics
    /// If the input is not a JSON string (a malformed table).
    pub fn input_str(&self) -> &str {
        self.input
            .as_str()
            .unwrap_or_else(|| panic!("case {}: input is not a string", self.name))
    }

    /// Returns the case's `args` as `[text, limit]` (the splitters' tables).
    ///
    /// # Panics
    /// If the args are not a string and a small number (a malformed table).
    pub fn text_and_limit(&self) -> (&str, usize) {
        let args = self.args.as_deref().unwrap_or_default();
        match (
            args.first().and_then(Value::as_str),
            args.get(1).and_then(Value::as_u64),
        ) {
            (Some(text), Some(limit)) => (text, usize::try_from(limit).expect("a small limit")),
            _ => panic!("case {}: args are not [text, limit]", self.name),
        }
    }
}

/// Parses `json` and checks that it is well formed: cases exist, names are unique, each names
/// a known function and a source.
///
/// # Panics
/// On any malformed table, naming the problems.
pub fn parse(json: &str) -> Table {
    let table: Table = serde_json::from_str(json).expect("the table parses as JSON");
    let mut problems = Vec::new();
    if table.cases.is_empty() {
        problems.push("the table has no cases".to_owned());
    }
    let mut names = BTreeSet::new();
    for case in &table.cases {
        if !names.insert(case.name.as_str()) {
            problems.push(format!("{}: the name is used twice", case.name));
        }
        if !table.reference.contains_key(&case.function) {
            problems.push(format!("{}: unknown function {}", case.name, case.function));
        }
        let upstream = case
            .source
            .strip_prefix(UPSTREAM_PREFIX)
            .is_some_and(|test| test.contains("::"));
        if !upstream && case.source != CORPUS_SOURCE {
            problems.push(format!(
                "{}: source {:?} names no test",
                case.name, case.source
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}:\n{}",
        table.area,
        problems.join("\n")
    );
    table
}

/// Runs every case of `json` through `call` and fails listing each case whose result differs
/// from its expected value (or whose call returned an error). Cases marked `deliberate` are
/// left to the area module.
///
/// # Panics
/// When the table is malformed or any case fails.
pub fn check(json: &str, call: impl Fn(&Case) -> Result<Value, String>) {
    let table = parse(json);
    let mut report = String::new();
    let mut failed = 0;
    for case in table.cases.iter().filter(|case| case.deliberate.is_none()) {
        let outcome = call(case);
        if outcome.as_ref() == Ok(&case.expected) {
            continue;
        }
        failed += 1;
        let _ = writeln!(
            report,
            "\n{} ({}), {}:",
            case.name, case.source, case.function
        );
        let _ = writeln!(report, "  input:    {}", arguments(case));
        let _ = writeln!(report, "  expected: {}", case.expected);
        match outcome {
            Ok(got) => {
                let _ = writeln!(report, "  got:      {got}");
            }
            Err(e) => {
                let _ = writeln!(report, "  error:    {e}");
            }
        }
    }
    assert!(
        failed == 0,
        "{}: {failed} of {} cases differ from 0.3.5{report}",
        table.area,
        table.cases.len()
    );
}

fn arguments(case: &Case) -> String {
    match &case.args {
        Some(args) => Value::Array(args.clone()).to_string(),
        None => case.input.to_string(),
    }
}

#[cfg(test)]
mod tests {
    const ONE_CASE: &str = r#"{"area": "demo", "reference": {"echo": "m:f"}, "cases": [
        {"name": "a", "source": "0.3.5 output", "function": "echo", "input": "x", "expected": "y"}
    ]}"#;

    #[test]
    #[should_panic(expected = "demo: 1 of 1 cases differ from 0.3.5")]
    fn a_case_whose_result_differs_fails_the_check() {
        super::check(ONE_CASE, |case| Ok(case.input.clone()));
    }

    #[test]
    fn a_deliberate_difference_is_left_to_the_area_module() {
        let deliberate = ONE_CASE.replace(
            r#""expected": "y""#,
            r#""expected": "y", "deliberate": "safer""#,
        );
        let table = super::parse(&deliberate);
        assert_eq!(table.cases[0].deliberate.as_deref(), Some("safer"));
        super::check(&deliberate, |case| Ok(case.input.clone()));
    }

    #[test]
    #[should_panic(expected = "a: unknown function echo")]
    fn a_case_naming_an_unknown_function_is_a_malformed_table() {
        super::parse(&ONE_CASE.replace(r#""echo": "m:f""#, r#""other": "m:f""#));
    }
}
