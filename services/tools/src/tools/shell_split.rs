//! Splits a shell command into every command it would run, for the allowlist: top-level
//! segments (split on `;`, `&&`, `||`, `|`, `&` and newlines, quotes respected; a background
//! `&` stays on its segment, as upstream) plus,
//! recursively, the commands inside `$(…)`, backticks, `<(…)`/`>(…)` and `( … )` subshells.
//! Segments keep substitutions verbatim, so an allow pattern must also match the outer text.

/// Returns every command segment of `command`, trimmed, without empty ones.
pub fn command_segments(command: &str) -> Vec<String> {
    let chars: Vec<char> = command.chars().collect();
    let mut parser = Parser {
        chars: &chars,
        pos: 0,
        nested: Vec::new(),
    };
    let mut segments = parser.sequence(None);
    segments.append(&mut parser.nested);
    segments.retain(|s| !s.is_empty());
    segments
}

struct Parser<'a> {
    chars: &'a [char],
    pos: usize,
    /// Segments found inside substitutions and subshells.
    nested: Vec<String>,
}

impl Parser<'_> {
    fn peek(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    /// Parses segments until `close` (consumed) or the end.
    fn sequence(&mut self, close: Option<char>) -> Vec<String> {
        let mut segments = Vec::new();
        let mut current = String::new();
        while let Some(c) = self.peek(0) {
            if Some(c) == close {
                self.pos += 1;
                break;
            }
            match c {
                '\\' => self.escaped(&mut current),
                '\'' => self.single_quoted(&mut current),
                '"' => self.double_quoted(&mut current),
                '`' => self.substitution(&mut current, 1, '`'),
                '$' | '<' | '>' if self.peek(1) == Some('(') => {
                    self.substitution(&mut current, 2, ')')
                }
                '(' => self.substitution(&mut current, 1, ')'),
                ';' | '\n' => {
                    self.pos += 1;
                    segments.push(std::mem::take(&mut current));
                }
                '&' if current.ends_with(['>', '<']) || self.peek(1) == Some('>') => {
                    // A redirection (`2>&1`, `&>file`), not a separator.
                    current.push(c);
                    self.pos += 1;
                }
                '&' | '|' => {
                    let doubled =
                        self.peek(1) == Some(c) || (c == '|' && self.peek(1) == Some('&'));
                    if c == '&' && !doubled {
                        // Upstream keeps a background `&` on its segment: an allow pattern
                        // must accept `cmd &` to let `cmd` run in the background.
                        current.push('&');
                    }
                    self.pos += if doubled { 2 } else { 1 };
                    segments.push(std::mem::take(&mut current));
                }
                _ => {
                    current.push(c);
                    self.pos += 1;
                }
            }
        }
        segments.push(current);
        segments.into_iter().map(|s| s.trim().to_string()).collect()
    }

    fn escaped(&mut self, current: &mut String) {
        current.push('\\');
        self.pos += 1;
        if let Some(next) = self.peek(0) {
            current.push(next);
            self.pos += 1;
        }
    }

    fn single_quoted(&mut self, current: &mut String) {
        current.push('\'');
        self.pos += 1;
        while let Some(c) = self.peek(0) {
            current.push(c);
            self.pos += 1;
            if c == '\'' {
                break;
            }
        }
    }

    fn double_quoted(&mut self, current: &mut String) {
        current.push('"');
        self.pos += 1;
        while let Some(c) = self.peek(0) {
            match c {
                '\\' => self.escaped(current),
                '`' => self.substitution(current, 1, '`'),
                '$' if self.peek(1) == Some('(') => self.substitution(current, 2, ')'),
                '"' => {
                    current.push(c);
                    self.pos += 1;
                    break;
                }
                _ => {
                    current.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// Parses a substitution or subshell opened by `open_len` characters: its inner commands
    /// become nested segments, its text stays in the current segment.
    fn substitution(&mut self, current: &mut String, open_len: usize, close: char) {
        let start = self.pos;
        self.pos += open_len;
        let inner = self.sequence(Some(close));
        self.nested.extend(inner);
        current.extend(&self.chars[start..self.pos.min(self.chars.len())]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_every_separator_and_descends_into_substitutions() {
        let table: &[(&str, &[&str])] = &[
            ("ls -la", &["ls -la"]),
            ("ls; rm x", &["ls", "rm x"]),
            ("ls && rm x || echo no", &["ls", "rm x", "echo no"]),
            ("cat f | sh", &["cat f", "sh"]),
            ("sleep 1 & curl x", &["sleep 1 &", "curl x"]),
            ("serve &", &["serve &"]),
            ("ls\ncurl x", &["ls", "curl x"]),
            ("ls $(curl x)", &["ls $(curl x)", "curl x"]),
            ("ls `curl x`", &["ls `curl x`", "curl x"]),
            (
                "echo \"$(id; whoami)\"",
                &["echo \"$(id; whoami)\"", "id", "whoami"],
            ),
            (
                "diff <(cat a) >(tee b)",
                &["diff <(cat a) >(tee b)", "cat a", "tee b"],
            ),
            ("(cd /; rm x)", &["(cd /; rm x)", "cd /", "rm x"]),
            (
                "echo $(echo $(rm y))",
                &["echo $(echo $(rm y))", "rm y", "echo $(rm y)"],
            ),
        ];
        for (command, expected) in table {
            assert_eq!(command_segments(command), *expected, "{command}");
        }
    }

    #[test]
    fn quotes_escapes_and_redirections_do_not_split() {
        assert_eq!(command_segments("echo 'a; b | c'"), ["echo 'a; b | c'"]);
        assert_eq!(command_segments("echo \"a && b\""), ["echo \"a && b\""]);
        assert_eq!(command_segments("echo a\\; b"), ["echo a\\; b"]);
        assert_eq!(command_segments("make 2>&1"), ["make 2>&1"]);
        assert_eq!(command_segments("make &> log"), ["make &> log"]);
        assert_eq!(command_segments("echo '$(not run)'"), ["echo '$(not run)'"]);
        assert_eq!(command_segments(";; ls ;"), ["ls"]);
    }
}
