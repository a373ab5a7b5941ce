//! When a job runs next, as upstream: `at` at its time if still ahead, `every` one period from
//! now, `cron` the expression's next match after now in its IANA time zone (croner, chrono-tz;
//! the fleet's local zone without one). Validation messages are upstream's.

use std::str::FromStr as _;

use chrono::{TimeZone as _, Utc};
use chrono_tz::Tz;
use croner::Cron;

use crate::store::Schedule;

/// Returns the next run after `now_ms` (unix ms), or `None` when the job never runs again.
pub fn next_run(schedule: &Schedule, now_ms: i64) -> Option<i64> {
    match schedule.kind.as_str() {
        "at" => schedule.at_ms.filter(|at| *at > now_ms),
        "every" => schedule
            .every_ms
            .filter(|every| *every > 0)
            .and_then(|every| now_ms.checked_add(every)),
        "cron" => {
            let cron = parse(schedule.expr.as_deref()?).ok()?;
            let now = Utc.timestamp_millis_opt(now_ms).single()?;
            match schedule.tz.as_deref().filter(|tz| !tz.is_empty()) {
                Some(tz) => {
                    let zone: Tz = tz.parse().ok()?;
                    let next = cron.find_next_occurrence(&now.with_timezone(&zone), false);
                    next.ok().map(|t| t.timestamp_millis())
                }
                None => {
                    let next = cron.find_next_occurrence(&now.with_timezone(&chrono::Local), false);
                    next.ok().map(|t| t.timestamp_millis())
                }
            }
        }
        _ => None,
    }
}

/// Checks a schedule before it is stored; the error is upstream's text.
pub fn validate(schedule: &Schedule) -> Result<(), String> {
    if schedule.tz.is_some() && schedule.kind != "cron" {
        return Err("tz can only be used with cron schedules".into());
    }
    if schedule.kind == "cron" {
        let given = schedule.expr.as_deref().unwrap_or("");
        if given.trim().is_empty() {
            return Err("cron schedule requires a non-empty 'expr'".into());
        }
        // Upstream quotes the expression as given, padding included.
        parse(given.trim()).map_err(|e| format!("invalid cron expression '{given}': {e}"))?;
        if let Some(tz) = schedule.tz.as_deref() {
            check_zone(tz)?;
        }
    }
    Ok(())
}

/// Checks an IANA zone name; the error is upstream's text.
pub fn check_zone(tz: &str) -> Result<Tz, String> {
    tz.parse::<Tz>()
        .map_err(|_| format!("unknown timezone '{tz}'"))
}

/// Parses an expression as upstream's croniter reads it: five fields, or six with the
/// seconds field **last** (croner puts seconds first, so a sixth field is moved to the front).
fn parse(expr: &str) -> Result<Cron, croner::errors::CronError> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    match fields.split_last() {
        Some((seconds, rest)) if fields.len() == 6 => {
            Cron::from_str(&format!("{seconds} {}", rest.join(" ")))
        }
        _ => Cron::from_str(expr.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(expr: &str, tz: Option<&str>) -> Schedule {
        Schedule {
            kind: "cron".into(),
            expr: Some(expr.into()),
            tz: tz.map(str::to_string),
            ..Default::default()
        }
    }

    fn ms(rfc3339: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn a_cron_expression_in_a_non_utc_zone_runs_at_that_zones_wall_clock() {
        // 08:00 in Vancouver is 16:00 UTC in winter (PST) and 15:00 UTC in summer (PDT).
        let daily = cron("0 8 * * *", Some("America/Vancouver"));
        assert_eq!(
            next_run(&daily, ms("2026-01-10T12:00:00Z")),
            Some(ms("2026-01-10T16:00:00Z"))
        );
        assert_eq!(
            next_run(&daily, ms("2026-07-10T16:00:00Z")),
            Some(ms("2026-07-11T15:00:00Z"))
        );
        let tokyo = cron("30 9 * * 1", Some("Asia/Tokyo"));
        // Monday 2026-11-30 09:30 JST = 00:30 UTC.
        assert_eq!(
            next_run(&tokyo, ms("2026-11-24T00:00:00Z")),
            Some(ms("2026-11-30T00:30:00Z"))
        );
    }

    #[test]
    fn a_sixth_field_is_seconds_as_croniter_reads_it() {
        // croniter: minute hour day month weekday second.
        let every_two_seconds = cron("* * * * * */2", Some("UTC"));
        assert_eq!(
            next_run(&every_two_seconds, ms("2026-01-10T12:00:01Z")),
            Some(ms("2026-01-10T12:00:02Z"))
        );
        let at_ten_past_second_thirty = cron("10 * * * * 30", None);
        let next = next_run(&at_ten_past_second_thirty, ms("2026-01-10T12:00:00Z")).unwrap();
        assert_eq!(next.rem_euclid(60_000), 30_000, "second 30");
    }

    #[test]
    fn at_and_every_follow_upstreams_next_run_rules() {
        let at = Schedule {
            kind: "at".into(),
            at_ms: Some(5000),
            ..Default::default()
        };
        assert_eq!(next_run(&at, 1000), Some(5000));
        assert_eq!(next_run(&at, 6000), None, "a past `at` never runs");
        let every = Schedule {
            kind: "every".into(),
            every_ms: Some(90_000),
            ..Default::default()
        };
        assert_eq!(next_run(&every, 1000), Some(91_000));
        let never = Schedule {
            kind: "every".into(),
            every_ms: Some(0),
            ..Default::default()
        };
        assert_eq!(next_run(&never, 1000), None);
        assert_eq!(next_run(&cron("not a cron", None), 0), None);
    }

    #[test]
    fn invalid_schedules_get_upstreams_messages() {
        let mut tz_on_every = cron("", Some("UTC"));
        tz_on_every.kind = "every".into();
        assert_eq!(
            validate(&tz_on_every).unwrap_err(),
            "tz can only be used with cron schedules"
        );
        assert_eq!(
            validate(&cron(" ", None)).unwrap_err(),
            "cron schedule requires a non-empty 'expr'"
        );
        assert!(
            validate(&cron("61 * * * *", None))
                .unwrap_err()
                .starts_with("invalid cron expression '61 * * * *': ")
        );
        assert_eq!(
            validate(&cron("0 8 * * *", Some("Mars/Olympus"))).unwrap_err(),
            "unknown timezone 'Mars/Olympus'"
        );
        assert!(validate(&cron("*/5 * * * *", Some("Europe/Berlin"))).is_ok());
    }
}
