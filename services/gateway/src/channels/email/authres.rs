//! Which `Authentication-Results` (RFC 8601) a mail's SPF/DKIM gate may believe. Anyone can
//! write that header into a mail they send, so only the receiving server's own count: each
//! server on the way *prepends* its header, so the receiving server's ones are the topmost.
//!
//! With `channels.email.authservId` set (the `authserv-id` the receiving server writes first in
//! its header, e.g. `mx.example.com`), the trusted headers are the run of headers at the very
//! top carrying that id; a header below one with another id, or with another id itself, is
//! ignored (so is a forged one when the server wrote none: the top one is then not ours and
//! nothing is trusted). Without `authservId`, only the topmost header is trusted.
//!
//! For each method the topmost trusted header naming it decides: `pass` when one of its
//! results for that method is `pass` (a mail may carry several DKIM signatures). A forged
//! `dkim=pass` lower down never overrides the server's `dkim=fail` above it.
//!
//! `mail-auth` only writes this header and `msg-auth-status` (which parses it) is young and
//! little used, hence this small parser: comments (nested, with quoted pairs) and folding removed, `;` outside quoted
//! strings separates the `authserv-id [version]` from each `method[/version]=result …`.

/// One parsed header: its authserv-id (lower case) and its `(method, result)` pairs (lower
/// case, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthResults {
    /// The `authserv-id`.
    pub authserv_id: String,
    /// `(method, result)`, e.g. `("dkim", "pass")`.
    pub results: Vec<(String, String)>,
}

/// Parses one header value; `None` when it has no authserv-id.
pub fn parse(value: &str) -> Option<AuthResults> {
    let text = strip_comments(value);
    let mut parts = split_unquoted(&text, ';').into_iter();
    let head = parts.next()?;
    let head = head.trim();
    let authserv_id = match head.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => head.split_whitespace().next()?,
    }
    .to_lowercase();
    let results = parts
        .filter_map(|resinfo| {
            // `method [/ version] = result [reason] [props]`, spaces allowed around `/` and `=`.
            let (method, rest) = resinfo.split_once('=')?;
            let method = method.split('/').next()?.trim().to_lowercase();
            let result = rest.split_whitespace().next()?.to_lowercase();
            (!method.is_empty() && !method.contains(char::is_whitespace))
                .then_some((method, result))
        })
        .collect();
    Some(AuthResults {
        authserv_id,
        results,
    })
}

/// Returns whether `method` passed according to the trusted headers among `headers` (raw
/// values, topmost first) for `authserv_id` (empty: the topmost header only).
pub fn passed(headers: &[String], authserv_id: &str, method: &str) -> bool {
    let parsed = headers.iter().map(|h| parse(h));
    let trusted: Vec<AuthResults> = match authserv_id.trim() {
        "" => parsed.take(1).flatten().collect(),
        id => parsed
            .map_while(|h| h.filter(|h| h.authserv_id.eq_ignore_ascii_case(id)))
            .collect(),
    };
    trusted
        .iter()
        .find(|h| h.results.iter().any(|(m, _)| m == method))
        .is_some_and(|h| h.results.iter().any(|(m, r)| m == method && r == "pass"))
}

/// Removes RFC 5322 comments (`(…)`, nested, `\` escapes) outside quoted strings, and folding.
fn strip_comments(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let (mut depth, mut quoted, mut escaped) = (0usize, false, false);
    for c in value.chars() {
        if escaped {
            escaped = false;
            if depth == 0 {
                out.push(c);
            }
            continue;
        }
        match c {
            '\\' if quoted || depth > 0 => {
                escaped = true;
                if depth == 0 {
                    out.push(c);
                }
            }
            '"' if depth == 0 => {
                quoted = !quoted;
                out.push(c);
            }
            '(' if !quoted => depth += 1,
            ')' if !quoted && depth > 0 => {
                depth -= 1;
                out.push(' ');
            }
            '\r' | '\n' => out.push(' '),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Splits on `sep` outside quoted strings.
fn split_unquoted(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn headers_parse_with_versions_comments_folding_and_quoted_strings() {
        let h = parse(
            " MX.Example.COM 1 (the \"receiver\" (inner ; x)); spf = pass (sender ; ok)\r\n\t\
             smtp.mailfrom=a@b;\r\n dkim/1=fail reason=\"bad; sig\" header.d=b; dkim=PASS header.i=@b",
        )
        .unwrap();
        assert_eq!(h.authserv_id, "mx.example.com");
        assert_eq!(
            h.results,
            [
                ("spf".into(), "pass".into()),
                ("dkim".into(), "fail".into()),
                ("dkim".into(), "pass".into())
            ]
        );
        let none = parse("mx.example.com; none").unwrap();
        assert!(none.results.is_empty());
        assert_eq!(parse("  (only a comment) "), None);
        assert_eq!(parse("\"MX 🌐\" 1; spf=pass").unwrap().authserv_id, "mx 🌐");
    }

    #[test]
    fn only_the_receiving_servers_topmost_headers_decide() {
        let id = "mx.fleet.test";
        // The server said fail; the sender's own header below says pass.
        let forged = headers(&[
            "mx.fleet.test; spf=fail smtp.mailfrom=x; dkim=none",
            "mx.fleet.test; spf=pass; dkim=pass",
        ]);
        assert!(!passed(&forged, id, "spf") && !passed(&forged, id, "dkim"));
        // The server wrote nothing of its own: the sender's header carries another id.
        let foreign = headers(&["evil.example; spf=pass; dkim=pass"]);
        assert!(!passed(&foreign, id, "spf") && !passed(&foreign, id, "dkim"));
        // Another id on top: nothing below it is trusted, ours included.
        let below = headers(&["relay.other; spf=pass", "mx.fleet.test; spf=pass"]);
        assert!(!passed(&below, id, "spf"));
        // The server's own verdicts, in one header or one header per method.
        let split = headers(&["MX.fleet.test; dkim=pass", "mx.fleet.test; spf=pass"]);
        assert!(passed(&split, id, "spf") && passed(&split, id, "dkim"));
        // Several signatures: one passing is enough.
        let sigs = headers(&["mx.fleet.test; dkim=fail header.d=a; dkim=pass header.d=b"]);
        assert!(passed(&sigs, id, "dkim"));
        assert!(!passed(&[], id, "spf"));
    }

    #[test]
    fn without_an_authserv_id_only_the_topmost_header_counts() {
        let forged = headers(&["mx.any; spf=softfail; dkim=fail", "x; spf=pass; dkim=pass"]);
        assert!(!passed(&forged, "", "spf") && !passed(&forged, "", "dkim"));
        let ok = headers(&["mx.any; spf=pass; dkim=pass", "x; spf=fail"]);
        assert!(passed(&ok, "", "spf") && passed(&ok, "", "dkim"));
        assert!(!passed(&headers(&["mx; dkim=passive"]), "", "dkim"));
    }
}
