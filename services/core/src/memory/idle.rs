//! AutoCompact's rule (upstream `agent/autocompact.py`): a session idle longer than
//! `idleCompactAfterMinutes` with rows not archived yet is archived whole in the background,
//! and its summary is injected on its next turn. Dream's own sessions and sessions with a
//! running turn are left alone.

use std::time::Duration;

use chrono::NaiveDateTime;

use crate::session::Activity;

/// Whether session `key` should be compacted at `now` (local time), idle for `after`.
pub fn is_idle(key: &str, activity: &Activity, now: NaiveDateTime, after: Duration) -> bool {
    if after.is_zero() || key.starts_with("dream:") || activity.busy || activity.unarchived == 0 {
        return false;
    }
    let Ok(updated) = NaiveDateTime::parse_from_str(&activity.updated_at, "%Y-%m-%dT%H:%M:%S%.f")
    else {
        return false;
    };
    let Ok(after) = chrono::Duration::from_std(after) else {
        return false;
    };
    now - updated >= after
}

/// The id of the AutoCompact job of `key` idle since `updated_at`: every scan of every worker
/// names the same idle spell the same way, so it is archived once.
pub fn job_id(key: &str, updated_at: &str) -> String {
    format!("idle:{key}:{updated_at}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").unwrap()
    }

    #[test]
    fn only_idle_sessions_with_unarchived_rows_and_no_running_turn_are_compacted() {
        let quarter = Duration::from_secs(15 * 60);
        let now = at("2026-11-24T12:00:00.000000");
        let idle = Activity {
            updated_at: "2026-11-24T11:44:59.500000".into(),
            unarchived: 4,
            busy: false,
        };
        assert!(is_idle("telegram:1", &idle, now, quarter));
        let recent = Activity {
            updated_at: "2026-11-24T11:50:00.000000".into(),
            ..idle.clone()
        };
        assert!(!is_idle("telegram:1", &recent, now, quarter));
        for (key, activity) in [
            ("dream:20261124-110000", idle.clone()),
            (
                "telegram:1",
                Activity {
                    busy: true,
                    ..idle.clone()
                },
            ),
            (
                "telegram:1",
                Activity {
                    unarchived: 0,
                    ..idle.clone()
                },
            ),
            (
                "telegram:1",
                Activity {
                    updated_at: String::new(),
                    ..idle.clone()
                },
            ),
        ] {
            assert!(!is_idle(key, &activity, now, quarter), "{key} {activity:?}");
        }
        assert!(
            !is_idle("telegram:1", &idle, now, Duration::ZERO),
            "0 disables"
        );
        assert_eq!(
            job_id("telegram:1", &idle.updated_at),
            "idle:telegram:1:2026-11-24T11:44:59.500000"
        );
    }
}
