//! Python's readings and spellings of JSON values, as 0.3.5's tool errors show them:
//! `int(str)` and `float(str)` (any script's decimal digits, `_` between digits), `str()` and
//! `repr()` (its quote choice, escapes of unprintable characters, float spelling), and type
//! names.

use serde_json::Value;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory as _};

/// Returns Python's type name of a JSON value (`dict`, `list`, `str`, `int`, …), as upstream
/// prints it in its errors.
pub fn py_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Returns the value of a decimal digit of any script (Unicode `Nd`: `٣`, `５`, `𝟕`), as
/// Python's `int` reads it. Unicode encodes every such digit in a run of ten, 0 to 9.
fn decimal_digit(c: char) -> Option<u32> {
    if c.is_ascii_digit() {
        return c.to_digit(10);
    }
    if c.general_category() != GeneralCategory::DecimalNumber {
        return None;
    }
    let code = u32::from(c);
    let run = (1..=code)
        .map(|back| char::from_u32(code - back))
        .take_while(|p| p.is_some_and(|p| p.general_category() == GeneralCategory::DecimalNumber))
        .count();
    u32::try_from(run % 10).ok()
}

/// Returns `s` with every decimal digit of any script as its ASCII digit (Python reads numbers
/// this way before parsing them).
fn ascii_digits(s: &str) -> String {
    s.chars()
        .map(|c| match decimal_digit(c) {
            Some(d) if !c.is_ascii() => char::from_digit(d, 10).unwrap_or(c),
            _ => c,
        })
        .collect()
}

/// Whether Python's `str.isspace` holds for `c`: Unicode white space and the separators
/// `\x1c`–`\x1f`.
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`: `text` without leading and trailing [`is_py_space`] characters.
pub fn py_strip(text: &str) -> &str {
    text.trim_matches(is_py_space)
}

/// Parses like Python's `int(str)`: surrounding whitespace, a sign, `_` between digits, digits
/// of any script. `None` also for values beyond 64 bits (Python's have no bound).
pub fn py_int(s: &str) -> Option<i64> {
    let ascii = ascii_digits(s);
    let t = py_strip(&ascii);
    let (sign, digits) = match t.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", t.strip_prefix('+').unwrap_or(t)),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    if !clean.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    format!("{sign}{clean}").parse().ok()
}

/// Parses like Python's `float(str)` (accepts `nan`, `inf`, `Infinity`, exponents, digits of
/// any script).
pub fn py_float(s: &str) -> Option<f64> {
    let ascii = ascii_digits(s);
    let t = ascii.trim();
    if t.is_empty() || t.contains("__") || t.starts_with('_') || t.ends_with('_') {
        return None;
    }
    let clean: String = t.chars().filter(|c| *c != '_').collect();
    clean.parse::<f64>().ok()
}

/// Whether Python's `str.isprintable` holds for `c` (`repr` escapes the others).
fn printable(c: char) -> bool {
    use GeneralCategory as G;
    c == ' '
        || !matches!(
            c.general_category(),
            G::Control
                | G::Format
                | G::Surrogate
                | G::PrivateUse
                | G::Unassigned
                | G::LineSeparator
                | G::ParagraphSeparator
                | G::SpaceSeparator
        )
}

/// Returns Python's `repr` of a string: single quotes unless it holds `'` and no `"`.
pub fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::from(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if printable(c) => out.push(c),
            c => {
                let code = u32::from(c);
                out.push_str(&match code {
                    0..=0xff => format!("\\x{code:02x}"),
                    0x100..=0xffff => format!("\\u{code:04x}"),
                    _ => format!("\\U{code:08x}"),
                });
            }
        }
    }
    out.push(quote);
    out
}

/// Returns Python's `repr` of a JSON value (`'a'`, `"it's"`, `True`, `None`, `[1, 'x']`).
pub fn py_repr(value: &Value) -> String {
    match value {
        Value::String(s) => py_repr_str(s),
        other => py_str(other),
    }
}

/// Returns Python's `str` of a JSON value.
pub fn py_str(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => py_float_repr(f),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(py_repr).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", py_repr_str(k), py_repr(v)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
    }
}

/// Returns Python's `repr` of a float: the shortest digits that read back, positional for
/// decimal exponents from -4 to 15 (`0.0001`, `1e+16`, `1e-05`), `.0` on whole numbers.
fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..16).contains(&exponent) {
        let positional = f.to_string();
        return match positional.contains('.') {
            true => positional,
            false => format!("{positional}.0"),
        };
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn numbers_read_in_any_script_as_python_reads_them() {
        assert_eq!(py_int("٢٠٢٦"), Some(2026));
        assert_eq!(py_int(" ５ "), Some(5));
        assert_eq!(
            py_int("𝟕𝟘"),
            Some(70),
            "mathematical digits, two runs of ten"
        );
        assert_eq!(py_int("-1_000"), Some(-1000));
        assert_eq!(py_int("九"), None, "a CJK numeral is not a decimal digit");
        assert_eq!(py_int("²"), None, "superscripts are not decimal digits");
        assert_eq!(py_float("١.٥"), Some(1.5));
        assert_eq!(py_float("１e３"), Some(1000.0));
    }

    #[test]
    fn reprs_quote_and_escape_as_python() {
        let family = "👩\u{200d}👩\u{200d}👧";
        assert_eq!(py_repr(&json!("it's")), "\"it's\"");
        assert_eq!(py_repr(&json!("it's \"x\"")), "'it\\'s \"x\"'");
        assert_eq!(py_repr(&json!(family)), "'👩\\u200d👩\\u200d👧'");
        assert_eq!(
            py_repr(&json!("e\u{301} מים 中\u{7f}\u{a0}")),
            "'e\u{301} מים 中\\x7f\\xa0'"
        );
        assert_eq!(py_repr(&json!("\u{e000}\u{2028}")), "'\\ue000\\u2028'");
        assert_eq!(
            py_repr(&json!({"it's": [1.0, null]})),
            "{\"it's\": [1.0, None]}"
        );
    }

    #[test]
    fn floats_are_spelled_as_python_repr() {
        for (f, text) in [
            (1e16, "1e+16"),
            (1e-7, "1e-07"),
            (1.5e300, "1.5e+300"),
            (0.0001, "0.0001"),
            (1e15, "1000000000000000.0"),
            (-0.0, "-0.0"),
            (123456789.125, "123456789.125"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(py_float_repr(f), text, "{f}");
        }
    }
}
