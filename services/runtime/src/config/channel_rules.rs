//! The rules every chat channel's sections share: unknown keys of the global and per-bot
//! sections, "required when the channel is enabled", one bot per token or app, `leaseSecs`,
//! `streamEditInterval`, closed choices and URL schemes. Each channel module keeps only its
//! own rules; the problem texts are the same for every channel.

use std::collections::BTreeMap;

use serde_json::Value;

use super::load::norm;
use super::schema::Config;

/// The checks of one channel's sections, collecting problems at the current bot's path.
pub(crate) struct Rules<'a> {
    config: &'a Config,
    name: &'static str,
    extras: &'static [&'static str],
    problems: &'a mut Vec<String>,
    unknown: &'a mut Vec<String>,
    /// Where the current bot's section is (`channels.<name>` or `bots.<id>.channels.<name>`).
    pub at: String,
}

impl<'a> Rules<'a> {
    /// Starts the checks of channel `name`, whose sections may also hold the 0.3.5 keys
    /// `extras`; lists the unknown keys of the global section (`global_extra`).
    pub fn new(
        config: &'a Config,
        name: &'static str,
        extras: &'static [&'static str],
        global_extra: Option<&BTreeMap<String, Value>>,
        problems: &'a mut Vec<String>,
        unknown: &'a mut Vec<String>,
    ) -> Self {
        let at = format!("channels.{name}");
        if let Some(extra) = global_extra {
            check_extras(&at, extra, extras, unknown);
        }
        Self {
            config,
            name,
            extras,
            problems,
            unknown,
            at,
        }
    }

    /// Moves to `bot`'s merged section; with `bots`, lists its unknown keys.
    pub fn bot(&mut self, bot: &str, extra: &BTreeMap<String, Value>) {
        self.at = super::sections::path(self.config, self.name, bot);
        if !self.config.bots.is_empty() {
            check_extras(&self.at, extra, self.extras, self.unknown);
        }
    }

    /// Reports `{at}.{key}: {message}`.
    pub fn problem(&mut self, key: &str, message: impl std::fmt::Display) {
        self.problems.push(format!("{}.{key}: {message}", self.at));
    }

    /// Reports a blank `value`; returns whether it is set.
    pub fn required(&mut self, key: &str, value: &str) -> bool {
        let set = !value.trim().is_empty();
        if !set {
            self.problem(key, "required when the channel is enabled");
        }
        set
    }

    /// Reports `value` already used by another bot (`seen` holds the values of the bots checked
    /// before): `bot X uses the same {what}`. A withheld secret is not compared.
    pub fn unique<'v>(
        &mut self,
        seen: &mut BTreeMap<&'v str, &'v str>,
        key: &str,
        (value, bot): (&'v str, &'v str),
        what: &str,
    ) {
        if super::scope::is_withheld(value) {
            return;
        }
        if let Some(other) = seen.insert(value, bot) {
            self.problem(key, format_args!("bot {other} uses the same {what}"));
        }
    }

    /// Reports a `value` below `min` (or NaN) as `must be at least {min}`.
    pub fn at_least(&mut self, key: &str, value: f64, min: f64) {
        if value.is_nan() || value < min {
            self.problem(key, format_args!("must be at least {min}"));
        }
    }

    /// Reports `leaseSecs` below 1.
    pub fn lease_secs(&mut self, value: f64) {
        self.at_least("leaseSecs", value, 1.0);
    }

    /// Reports `streamEditInterval` below 0.1.
    pub fn stream_edit_interval(&mut self, value: f64) {
        self.at_least("streamEditInterval", value, 0.1);
    }

    /// Reports a `value` not among `choices` as `must be "a", "b" or "c"`.
    pub fn one_of(&mut self, key: &str, value: &str, choices: &[&str]) {
        if choices.contains(&value) {
            return;
        }
        let quoted: Vec<String> = choices.iter().map(|c| format!("{c:?}")).collect();
        let (last, rest) = quoted.split_last().expect("choices are listed");
        let listed = if rest.is_empty() {
            last.clone()
        } else {
            format!("{} or {last}", rest.join(", "))
        };
        self.problem(key, format_args!("must be {listed}"));
    }

    /// Reports a `url` that is not `scheme://host...` with one of `schemes`, as
    /// `"{url}" is not a {kind} URL`.
    pub fn url(&mut self, key: &str, url: &str, schemes: &[&str], kind: &str) {
        if !has_scheme(url, schemes) {
            self.problem(key, format_args!("{url:?} is not a {kind} URL"));
        }
    }
}

/// Returns whether `url` is `scheme://host...` with one of `schemes`.
pub(crate) fn has_scheme(url: &str, schemes: &[&str]) -> bool {
    schemes.iter().any(|s| {
        url.strip_prefix(s)
            .and_then(|rest| rest.strip_prefix("://"))
            .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'))
    })
}

/// Lists the keys of `extra` (a section's keys the channel does not know) that are not among
/// the 0.3.5 keys `allowed` as `{at}.{key}`.
fn check_extras(
    at: &str,
    extra: &BTreeMap<String, Value>,
    allowed: &[&str],
    unknown: &mut Vec<String>,
) {
    for key in extra.keys() {
        if !allowed.iter().any(|k| norm(k) == norm(key)) {
            unknown.push(format!("{at}.{key}"));
        }
    }
}

/// Loads `json` with unknown keys refused, as the channels' tests do.
#[cfg(test)]
pub(crate) fn parse_strict(json: &str) -> Result<Config, super::ConfigError> {
    let strict =
        std::collections::HashMap::from([("NANOBOT_STRICT_CONFIG".to_string(), "1".to_string())]);
    super::load_str(Some(json), std::path::Path::new("config.json"), &strict)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_choice_lists_its_values_as_the_channels_did() {
        let config = Config::default();
        let (mut problems, mut unknown) = (Vec::new(), Vec::new());
        let mut rules = Rules::new(&config, "x", &[], None, &mut problems, &mut unknown);
        rules.one_of("mode", "no", &["polling", "webhook"]);
        rules.one_of("groupPolicy", "no", &["mention", "open", "allowlist"]);
        rules.one_of("groupPolicy", "open", &["mention", "open"]);
        rules.lease_secs(f64::NAN);
        rules.stream_edit_interval(0.05);
        assert_eq!(
            problems,
            [
                "channels.x.mode: must be \"polling\" or \"webhook\"",
                "channels.x.groupPolicy: must be \"mention\", \"open\" or \"allowlist\"",
                "channels.x.leaseSecs: must be at least 1",
                "channels.x.streamEditInterval: must be at least 0.1",
            ]
        );
    }
}
