//! Pipe tables as aligned text for a `<pre>` block, as upstream's `_render_table_box`: the
//! header row, a `─` rule, the body rows; cells stripped of `**`, `__`, `~~` and backticks;
//! columns padded to the widest cell and two spaces apart. Width counts 2 for an East Asian
//! Wide or Fullwidth character and 1 for any other (so a ZWJ counts 1 and a combining mark 1,
//! as Python's `unicodedata.east_asian_width` sees them).

use icu_properties::CodePointMapData;
use icu_properties::props::{EastAsianWidth, GeneralCategory};

use super::pattern::{
    BOLD_STARS, BOLD_UNDERSCORES, INLINE_CODE, SEPARATOR_CELL, STRIKE, py_strip, substitute,
};

/// Returns the table in `lines` as aligned text, or the lines joined unchanged when there is
/// no separator row (`|---|---|`) or no other row: then it is not a table.
pub(super) fn render_box(lines: &[&str]) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut has_separator = false;
    for line in lines {
        let cells: Vec<String> = py_strip(line)
            .trim_matches('|')
            .split('|')
            .map(strip_inline_markup)
            .collect();
        let mut filled = cells.iter().filter(|cell| !cell.is_empty());
        if filled.all(|cell| SEPARATOR_CELL.is_match(cell)) {
            has_separator = true;
            continue;
        }
        rows.push(cells);
    }
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    if columns == 0 || !has_separator {
        return lines.join("\n");
    }
    let mut widths = vec![0; columns];
    for row in &mut rows {
        row.resize(columns, String::new());
        for (width, cell) in widths.iter_mut().zip(row.iter()) {
            *width = (*width).max(display_width(cell));
        }
    }
    let rule: Vec<String> = widths.iter().map(|width| "─".repeat(*width)).collect();
    let mut out = vec![padded(&rows[0], &widths), rule.join("  ")];
    for row in &rows[1..] {
        out.push(padded(row, &widths));
    }
    out.join("\n")
}

/// Returns `cell` without its inline markers and surrounding whitespace (`_strip_md`).
fn strip_inline_markup(cell: &str) -> String {
    let mut text = cell.to_owned();
    for pattern in [&BOLD_STARS, &BOLD_UNDERSCORES, &STRIKE, &INLINE_CODE] {
        substitute(&mut text, pattern, "${1}");
    }
    py_strip(&text).to_owned()
}

/// Returns the cells of one row, each padded to its column's width, two spaces apart.
fn padded(row: &[String], widths: &[usize]) -> String {
    let mut cells = Vec::with_capacity(widths.len());
    for (cell, width) in row.iter().zip(widths) {
        let pad = width.saturating_sub(display_width(cell));
        cells.push(format!("{cell}{}", " ".repeat(pad)));
    }
    cells.join("  ")
}

/// Returns the columns `text` takes: 2 for each Wide or Fullwidth character, else 1.
/// Python 3.11's Unicode 14 tables report a code point they do not know as Fullwidth, so an
/// unassigned one counts 2 here too.
fn display_width(text: &str) -> usize {
    let widths = CodePointMapData::<EastAsianWidth>::new();
    let categories = CodePointMapData::<GeneralCategory>::new();
    let mut total = 0;
    for c in text.chars() {
        let wide = matches!(
            widths.get(c),
            EastAsianWidth::Wide | EastAsianWidth::Fullwidth
        );
        let unassigned = categories.get(c) == GeneralCategory::Unassigned;
        total += if wide || unassigned { 2 } else { 1 };
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_by_east_asian_width() {
        let lines = [
            "| name | qty |",
            "|---|---:|",
            "| 苹果 | 3 |",
            "| kiwi | 12 |",
        ];
        assert_eq!(
            render_box(&lines),
            "name  qty\n────  ───\n苹果  3  \nkiwi  12 "
        );
    }

    #[test]
    fn emoji_sequences_count_each_code_point() {
        // 👩‍👩‍👧‍👦 is four Wide emoji and three ZWJ (1 each): 11 columns; 🇨🇳 two Neutral
        // indicators; "é" as e + U+0301 two columns; Hebrew and Arabic letters one each.
        assert_eq!(display_width("👩\u{200d}👩\u{200d}👧\u{200d}👦"), 11);
        assert_eq!(display_width("🇨🇳"), 2);
        assert_eq!(display_width("e\u{301}"), 2);
        assert_eq!(display_width("שלום مرحبا"), 10);
        assert_eq!(display_width("\u{378}"), 2);
    }

    #[test]
    fn short_rows_are_padded_and_markup_is_dropped() {
        let lines = ["| a | **b** | c |", "|---|---|", "| `x` |"];
        assert_eq!(render_box(&lines), "a  b  c\n─  ─  ─\nx      ");
    }

    #[test]
    fn rows_without_a_separator_are_not_a_table() {
        let lines = ["| a | b |", "| c | d |"];
        assert_eq!(render_box(&lines), "| a | b |\n| c | d |");
        assert_eq!(render_box(&["|---|---|"]), "|---|---|");
    }
}
