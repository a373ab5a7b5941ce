//! Pipe tables as aligned box text, as upstream's `_render_table_box`: the header row, a `─`
//! rule, the body rows; columns two spaces apart, widths in display columns (CJK and emoji
//! count double).

use unicode_width::UnicodeWidthStr as _;

/// Returns `rows` (the first is the header) as aligned text lines joined by `\n`.
pub(super) fn render_box(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    if columns == 0 {
        return String::new();
    }
    let mut widths = vec![0usize; columns];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.width());
        }
    }
    let line = |row: &[String]| -> String {
        let mut cells = Vec::with_capacity(columns);
        for (i, width) in widths.iter().enumerate() {
            let cell = row.get(i).map(String::as_str).unwrap_or("");
            let pad = width.saturating_sub(cell.width());
            cells.push(format!("{cell}{}", " ".repeat(pad)));
        }
        cells.join("  ").trim_end().to_string()
    };
    let mut lines = Vec::with_capacity(rows.len() + 1);
    lines.push(line(&rows[0]));
    let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
    lines.push(rule.join("  "));
    for row in &rows[1..] {
        lines.push(line(row));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn columns_align_by_display_width() {
        let rows = vec![
            row(&["name", "qty"]),
            row(&["苹果", "3"]),
            row(&["kiwi", "12"]),
        ];
        assert_eq!(render_box(&rows), "name  qty\n────  ───\n苹果  3\nkiwi  12");
    }

    #[test]
    fn short_rows_are_padded_to_the_widest() {
        let rows = vec![row(&["a", "b", "c"]), row(&["x"])];
        assert_eq!(render_box(&rows), "a  b  c\n─  ─  ─\nx");
        assert_eq!(render_box(&[]), "");
    }
}
