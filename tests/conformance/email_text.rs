//! Email: the reply's subject (`channels::email::reply_subject`, upstream's
//! `EmailChannel._reply_subject`) and its plain body with the notes of files left out
//! (`body_of`, what upstream's `send` gives `EmailMessage.set_content`, read back with
//! `get_content`), against `email_text.json`.

use serde_json::Value;

use nanobot_gateway::channels::email::{body_of, reply_subject};

use crate::harness::{self, Case};

const TABLE: &str = include_str!("email_text.json");

fn call(case: &Case) -> Result<Value, String> {
    let args = case.args.as_deref().unwrap_or_default();
    let arg = |i: usize| args.get(i).and_then(Value::as_str).unwrap_or_default();
    match case.function.as_str() {
        "subject" => Ok(reply_subject(arg(0), arg(1)).into()),
        "body" => {
            let notes: Vec<String> = args
                .get(1)
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default();
            Ok(body_of(arg(0), &notes).into())
        }
        other => Err(format!("no Rust function for {other}")),
    }
}

#[test]
fn reply_subjects_and_bodies_are_written_as_0_3_5() {
    harness::check(TABLE, call);
}
