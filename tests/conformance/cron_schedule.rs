//! Cron schedules (`nanobot_cron::schedule::{validate, next_run}`, `tool::{timing, timestamp}`)
//! against 0.3.5's `_validate_schedule_for_add`, `_compute_next_run` and `CronTool`'s
//! `_format_timing` / `_format_timestamp` (through `adapters_cron_schedule.py`), in
//! `cron_schedule.json`: which schedules are refused and with what text, when `at`, `every` and
//! cron jobs (in UTC, DST and half-hour zones) run next, and how a job's timing is listed.
//!
//! A schedule is its store dict. For an expression the parser refuses, only
//! `invalid cron expression '<expr>'` is compared: the reason after it is croniter's wording in
//! 0.3.5 and croner's in ours.

use serde_json::{Value, json};

use nanobot_cron::schedule::{next_run, validate};
use nanobot_cron::store::Schedule;
use nanobot_cron::tool::{timestamp, timing};

use crate::harness::{self, Case};

const TABLE: &str = include_str!("cron_schedule.json");

fn arg(case: &Case, index: usize) -> &Value {
    case.args
        .as_deref()
        .and_then(|args| args.get(index))
        .unwrap_or_else(|| panic!("case {}: no argument {index}", case.name))
}

fn schedule(case: &Case) -> Result<Schedule, String> {
    serde_json::from_value(arg(case, 0).clone()).map_err(|e| format!("schedule: {e}"))
}

fn int(case: &Case, index: usize) -> Result<i64, String> {
    arg(case, index)
        .as_i64()
        .ok_or_else(|| format!("argument {index} is not an integer"))
}

fn text(case: &Case, index: usize) -> Result<&str, String> {
    arg(case, index)
        .as_str()
        .ok_or_else(|| format!("argument {index} is not text"))
}

/// Our validation outcome as the adapter reports 0.3.5's, the parser's reason cut off.
fn outcome(result: Result<(), String>) -> Value {
    match result {
        Ok(()) => json!({"ok": true}),
        Err(message) => match message.split_once("': ") {
            Some((kept, _)) if message.starts_with("invalid cron expression '") => {
                json!({"error": format!("{kept}'")})
            }
            _ => json!({"error": message}),
        },
    }
}

fn call(case: &Case) -> Result<Value, String> {
    match case.function.as_str() {
        "validate" => Ok(outcome(validate(&schedule(case)?))),
        "next_run" => Ok(next_run(&schedule(case)?, int(case, 1)?).into()),
        "timing" => Ok(timing(&schedule(case)?, text(case, 1)?).into()),
        "timestamp" => Ok(timestamp(int(case, 0)?, text(case, 1)?).into()),
        other => Err(format!("no Rust function for {other}")),
    }
}

#[test]
fn schedules_are_checked_timed_and_listed_exactly_as_0_3_5() {
    harness::check(TABLE, call);
}
