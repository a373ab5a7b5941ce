//! Slash commands, parsed (upstream `command/builtin.py`, `router.py`, reference §15): `/cmd@bot`
//! normalisation and case-insensitive matching, rejection of unknown commands (with a
//! did-you-mean from a difflib-style similarity, cutoff 0.6) and of arguments to commands that
//! take none, and the `/help` text. What a message is ([`Kind`]) is decided here once, when it
//! is decoded; the answers live in `crate::turn::commands`.

/// A command the fleet supports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/new`: archive and clear the session.
    New,
    /// `/compact`: archive the session's unarchived rows now (the AutoCompact job), keeping
    /// the conversation.
    Compact,
    /// `/stop`: cancel the session's running turn wherever it runs.
    Stop,
    /// `/restart`: the runner that receives it restarts (graceful shutdown, then re-exec).
    Restart,
    /// `/status`: runtime, model, tokens, context, session, uptime, tasks.
    Status,
    /// `/model [preset]`: show the session's model and the presets, or switch its preset.
    Model(Option<String>),
    /// `/history [n]`: the last n (10, at most 50) persisted user/assistant messages.
    History(Option<String>),
    /// `/goal <task>`: the task goes to the model as a long-running goal.
    Goal(Option<String>),
    /// `/trigger <name>`: upstream's local trigger (not available in the fleet).
    Trigger(Option<String>),
    /// `/dream`: run Dream now; answered at once, its report follows.
    Dream,
    /// `/dream-log [sha]`: the last (or given) Dream commit and its diff.
    DreamLog(Option<String>),
    /// `/dream-restore [sha]`: list Dream commits, or revert one.
    DreamRestore(Option<String>),
    /// `/dream-prompt [init]`: show or create the workspace's Dream prompt.
    DreamPrompt(Option<String>),
    /// `/evaluator-prompt [init]`: show or create the heartbeat gate's prompt.
    EvaluatorPrompt(Option<String>),
    /// `/skill`: the skills available to the agent.
    Skill,
    /// `/help`: the command list.
    Help,
    /// `/pairing [list|approve <code>|deny <code>|revoke …]`: pairing requests of the chat
    /// channels.
    Pairing(Option<String>),
}

/// Command names, without their arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    New,
    Compact,
    Stop,
    Restart,
    Status,
    Model,
    History,
    Goal,
    Trigger,
    Dream,
    DreamLog,
    DreamRestore,
    DreamPrompt,
    EvaluatorPrompt,
    Skill,
    Help,
    Pairing,
}

/// Upstream's commands with their help lines (`BUILTIN_COMMAND_SPECS`), in upstream's order;
/// whether each takes an argument.
const COMMANDS: &[(Name, &str, &str, bool)] = &[
    (
        Name::New,
        "/new",
        "Reset this chat and start a fresh conversation.",
        false,
    ),
    (
        Name::Compact,
        "/compact",
        "Compact this chat's context and continue the conversation.",
        false,
    ),
    (
        Name::Stop,
        "/stop",
        "Cancel the active agent turn for this chat.",
        false,
    ),
    (Name::Restart, "/restart", "Restart the bot process.", false),
    (
        Name::Status,
        "/status",
        "Display runtime, provider, and channel status.",
        false,
    ),
    (
        Name::Model,
        "/model [preset]",
        "Show or switch the active model preset.",
        true,
    ),
    (
        Name::History,
        "/history [n]",
        "Print the last N persisted conversation messages.",
        true,
    ),
    (
        Name::Goal,
        "/goal <goal>",
        "Tell the agent to treat the request as a long-running goal.",
        true,
    ),
    (
        Name::Trigger,
        "/trigger <name>",
        "Create a named CLI trigger bound to this chat session.",
        true,
    ),
    (
        Name::Dream,
        "/dream",
        "Manually trigger memory consolidation.",
        false,
    ),
    (
        Name::DreamLog,
        "/dream-log",
        "Show what the last Dream consolidation changed.",
        true,
    ),
    (
        Name::DreamRestore,
        "/dream-restore",
        "Revert memory to a previous Dream snapshot.",
        true,
    ),
    (
        Name::DreamPrompt,
        "/dream-prompt [init]",
        "Tell Dream how to organize this workspace's memory.",
        true,
    ),
    (
        Name::EvaluatorPrompt,
        "/evaluator-prompt [init]",
        "Customize the heartbeat notification gate prompt for this workspace.",
        true,
    ),
    (
        Name::Skill,
        "/skill",
        "List all enabled skills available to the agent.",
        false,
    ),
    (Name::Help, "/help", "List available slash commands.", false),
    (
        Name::Pairing,
        "/pairing [list|approve <code>|deny <code>|revoke <user_id>]",
        "List, approve, deny or revoke pairing requests.",
        true,
    ),
];

/// What a message is: classified once, when it is decoded ([`classify`]), then matched by
/// the receiver, the drainer, the follow-ups and the turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Not a slash command: a turn for the model.
    Text,
    /// A command answered by whichever runner receives it, outside the session's lease
    /// (upstream's priority tier: `/stop`, `/status`); drainers skip it.
    Priority(Command),
    /// A command run as a turn of its own, in the session's order.
    Command(Command),
    /// A slash command rejected without calling the model, with the reply.
    Rejected(String),
}

impl Command {
    /// Whether it runs outside the session lock (upstream's priority tier).
    fn is_priority(&self) -> bool {
        matches!(self, Self::Stop | Self::Restart | Self::Status)
    }

    fn build(name: Name, arg: Option<String>) -> Self {
        match name {
            Name::New => Self::New,
            Name::Compact => Self::Compact,
            Name::Stop => Self::Stop,
            Name::Restart => Self::Restart,
            Name::Status => Self::Status,
            Name::Model => Self::Model(arg),
            Name::History => Self::History(arg),
            Name::Goal => Self::Goal(arg),
            Name::Trigger => Self::Trigger(arg),
            Name::Dream => Self::Dream,
            Name::DreamLog => Self::DreamLog(arg),
            Name::DreamRestore => Self::DreamRestore(arg),
            Name::DreamPrompt => Self::DreamPrompt(arg),
            Name::EvaluatorPrompt => Self::EvaluatorPrompt(arg),
            Name::Skill => Self::Skill,
            Name::Help => Self::Help,
            Name::Pairing => Self::Pairing(arg),
        }
    }
}

/// Returns the bare command of a help entry (`/dream-prompt [init]` → `/dream-prompt`).
fn bare(entry: &str) -> &str {
    entry.split_whitespace().next().unwrap_or(entry)
}

/// Classifies a message's text.
pub fn classify(text: &str) -> Kind {
    match parse(text) {
        Kind::Command(cmd) if cmd.is_priority() => Kind::Priority(cmd),
        kind => kind,
    }
}

/// Parses `text` (commands not sorted by tier yet).
fn parse(text: &str) -> Kind {
    let text = text.trim();
    if !text.starts_with('/') {
        return Kind::Text;
    }
    let (head, args) = match text.split_once(char::is_whitespace) {
        Some((h, a)) => (h, a.trim()),
        None => (text, ""),
    };
    let head = match head.split_once('@') {
        Some((cmd, bot))
            if !bot.is_empty() && bot.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            cmd
        }
        _ => head,
    };
    let name = head.to_lowercase();
    if let Some((cmd, entry, _, takes_arg)) = COMMANDS.iter().find(|c| bare(c.1) == name) {
        if args.is_empty() || *takes_arg {
            let arg = (!args.is_empty()).then(|| args.to_string());
            return Kind::Command(Command::build(*cmd, arg));
        }
        let known = bare(entry);
        return Kind::Rejected(format!(
            "Command \"{known}\" does not accept arguments. Did you mean \"{known}\"?"
        ));
    }
    let best = COMMANDS
        .iter()
        .map(|c| (similarity(&name, bare(c.1)), bare(c.1)))
        .filter(|(score, _)| *score >= 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((_, close)) => Kind::Rejected(format!(
            "Unknown command \"{head}\". Did you mean \"{close}\"?"
        )),
        None => Kind::Rejected(format!(
            "Unknown command \"{head}\". Use \"/help\" to list available commands."
        )),
    }
}

/// Upstream's `/help` text for the supported commands.
pub fn help_text() -> String {
    let mut out = String::from("🐈 nanobot commands:");
    for (_, name, help, _) in COMMANDS {
        out.push_str(&format!("\n{name} — {help}"));
    }
    out
}

/// difflib's `SequenceMatcher.ratio()`: 2·M / (|a| + |b|), M from recursive longest matches.
pub fn similarity(a: &str, b: &str) -> f64 {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    2.0 * matches(&a, &b) as f64 / (a.len() + b.len()) as f64
}

fn matches(a: &[char], b: &[char]) -> usize {
    let (mut best, mut at_a, mut at_b) = (0, 0, 0);
    for i in 0..a.len() {
        for j in 0..b.len() {
            let mut k = 0;
            while i + k < a.len() && j + k < b.len() && a[i + k] == b[j + k] {
                k += 1;
            }
            if k > best {
                (best, at_a, at_b) = (k, i, j);
            }
        }
    }
    if best == 0 {
        return 0;
    }
    best + matches(&a[..at_a], &b[..at_b]) + matches(&a[at_a + best..], &b[at_b + best..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_normalised_and_unknown_ones_rejected_with_upstream_strings() {
        assert_eq!(classify("hello"), Kind::Text);
        assert_eq!(classify(" /NEW "), Kind::Command(Command::New));
        assert_eq!(classify("/stop@my_bot"), Kind::Priority(Command::Stop));
        assert_eq!(classify("/Status"), Kind::Priority(Command::Status));
        assert_eq!(classify("/dream"), Kind::Command(Command::Dream));
        assert_eq!(
            classify("/dream-log abc123"),
            Kind::Command(Command::DreamLog(Some("abc123".into())))
        );
        assert_eq!(
            classify("/Dream-Restore"),
            Kind::Command(Command::DreamRestore(None))
        );
        assert_eq!(
            classify("/dream-prompt init"),
            Kind::Command(Command::DreamPrompt(Some("init".into())))
        );
        assert_eq!(
            classify("/dream now"),
            Kind::Rejected(
                "Command \"/dream\" does not accept arguments. Did you mean \"/dream\"?".into()
            )
        );
        assert_eq!(
            classify("/new now"),
            Kind::Rejected(
                "Command \"/new\" does not accept arguments. Did you mean \"/new\"?".into()
            )
        );
        assert_eq!(
            classify("/hepl"),
            Kind::Rejected("Unknown command \"/hepl\". Did you mean \"/help\"?".into())
        );
        assert_eq!(
            classify("/foo"),
            Kind::Rejected(
                "Unknown command \"/foo\". Use \"/help\" to list available commands.".into()
            )
        );
    }

    #[test]
    fn the_added_commands_parse_with_their_arguments_and_tiers() {
        assert_eq!(classify("/restart"), Kind::Priority(Command::Restart));
        assert_eq!(classify("/compact@my_bot"), Kind::Command(Command::Compact));
        assert_eq!(classify("/history"), Kind::Command(Command::History(None)));
        assert_eq!(
            classify("/HISTORY 3"),
            Kind::Command(Command::History(Some("3".into())))
        );
        assert_eq!(classify("/skill"), Kind::Command(Command::Skill));
        assert_eq!(
            classify("/pairing approve ABCD1234"),
            Kind::Command(Command::Pairing(Some("approve ABCD1234".into())))
        );
        assert_eq!(
            classify("/skills"),
            Kind::Rejected("Unknown command \"/skills\". Did you mean \"/skill\"?".into())
        );
        assert_eq!(
            classify("/restart now"),
            Kind::Rejected(
                "Command \"/restart\" does not accept arguments. Did you mean \"/restart\"?".into()
            )
        );
    }

    #[test]
    fn similarity_matches_difflib() {
        assert!((similarity("/hepl", "/help") - 0.8).abs() < 1e-9);
        assert!((similarity("abcd", "bcde") - 0.75).abs() < 1e-9);
        assert_eq!(similarity("/foo", "/new"), 0.25);
    }

    #[test]
    fn help_lists_exactly_upstreams_commands() {
        // `/help` of nanobot 0.3.5 (`build_help_text`).
        assert_eq!(
            help_text(),
            "🐈 nanobot commands:\n/new — Reset this chat and start a fresh conversation.\n/compact — Compact this chat's context and continue the conversation.\n/stop — Cancel the active agent turn for this chat.\n/restart — Restart the bot process.\n/status — Display runtime, provider, and channel status.\n/model [preset] — Show or switch the active model preset.\n/history [n] — Print the last N persisted conversation messages.\n/goal <goal> — Tell the agent to treat the request as a long-running goal.\n/trigger <name> — Create a named CLI trigger bound to this chat session.\n/dream — Manually trigger memory consolidation.\n/dream-log — Show what the last Dream consolidation changed.\n/dream-restore — Revert memory to a previous Dream snapshot.\n/dream-prompt [init] — Tell Dream how to organize this workspace's memory.\n/evaluator-prompt [init] — Customize the heartbeat notification gate prompt for this workspace.\n/skill — List all enabled skills available to the agent.\n/help — List available slash commands.\n/pairing [list|approve <code>|deny <code>|revoke <user_id>] — List, approve, deny or revoke pairing requests."
        );
    }

    #[test]
    fn goal_trigger_and_evaluator_prompt_parse_with_their_arguments_round_tripped() {
        for arg in [
            "写一本书 📚",
            "👩\u{200d}👩\u{200d}👧\u{200d}👦 🇨🇳",
            "cafe\u{301}",
            "اكتب كتابا",
            "כתוב ספר",
        ] {
            assert_eq!(
                classify(&format!("/goal {arg}")),
                Kind::Command(Command::Goal(Some(arg.into())))
            );
            assert_eq!(
                classify(&format!("/TRIGGER@my_bot {arg}")),
                Kind::Command(Command::Trigger(Some(arg.into())))
            );
        }
        assert_eq!(classify("/goal"), Kind::Command(Command::Goal(None)));
        assert_eq!(
            classify("/evaluator-prompt init"),
            Kind::Command(Command::EvaluatorPrompt(Some("init".into())))
        );
        assert_eq!(
            classify("/goals"),
            Kind::Rejected("Unknown command \"/goals\". Did you mean \"/goal\"?".into())
        );
    }
}
