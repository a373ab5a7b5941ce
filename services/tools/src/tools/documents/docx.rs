//! DOCX: the body's paragraphs and tables in document order, as python-docx reads them
//! (runs and hyperlinks directly under a paragraph; tabs, breaks and no-break hyphens as
//! text), one blank line between blocks and table rows as tab-separated cells.

use roxmltree::Node;

use super::archive::Archive;
use super::{Error, Kind, split_lines};

/// WordprocessingML's namespace.
const W: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";
/// Deepest table nesting read.
pub(super) const MAX_TABLE_DEPTH: usize = 8;
/// Most table cells read in one document.
pub(super) const MAX_TABLE_CELLS: usize = 100_000;

/// Returns the document's lines.
pub(super) fn lines(archive: &mut Archive<'_>) -> Result<Vec<String>, Error> {
    let open_error = |reason: String| Error::Open {
        kind: Kind::Docx,
        reason,
    };
    let (_, xml) = archive.main_document().map_err(open_error)?;
    let doc = roxmltree::Document::parse(&xml).map_err(|e| open_error(e.to_string()))?;
    let body = doc
        .root_element()
        .children()
        .find(|n| n.has_tag_name((W, "body")))
        .ok_or_else(|| open_error("the document has no body".into()))?;
    let mut blocks = Blocks::default();
    for block in body.children() {
        if block.has_tag_name((W, "p")) {
            let text = paragraph_text(block);
            blocks.push(text.trim(), true);
        } else if block.has_tag_name((W, "tbl")) {
            let rows = blocks.table_rows(block, 1)?;
            for (i, row) in rows.iter().enumerate() {
                blocks.push(row, i == 0);
            }
        }
    }
    Ok(blocks.lines)
}

/// The lines so far, and the table cells counted against [`MAX_TABLE_CELLS`].
#[derive(Default)]
struct Blocks {
    lines: Vec<String>,
    cells: usize,
}

impl Blocks {
    /// Adds one block's text; a `separate` block after earlier content gets a blank line
    /// before it (the rows after a table's first do not).
    fn push(&mut self, text: &str, separate: bool) {
        if text.is_empty() {
            return;
        }
        if separate && !self.lines.is_empty() {
            self.lines.push(String::new());
        }
        self.lines
            .extend(split_lines(text).into_iter().map(str::to_string));
    }

    /// Returns the rows of `table` that have text, cells joined by tabs.
    fn table_rows(&mut self, table: Node<'_, '_>, depth: usize) -> Result<Vec<String>, Error> {
        if depth > MAX_TABLE_DEPTH {
            return Err(Error::TableTooDeep);
        }
        let mut rows = Vec::new();
        for row in table.children().filter(|n| n.has_tag_name((W, "tr"))) {
            let mut cells = Vec::new();
            for cell in row.children().filter(|n| n.has_tag_name((W, "tc"))) {
                self.cells += 1;
                if self.cells > MAX_TABLE_CELLS {
                    return Err(Error::TooManyCells);
                }
                cells.push(self.cell_text(cell, depth)?);
            }
            if cells.iter().any(|c| !c.is_empty()) {
                rows.push(cells.join("\t"));
            }
        }
        Ok(rows)
    }

    /// Returns a cell's paragraphs (whitespace collapsed) and nested tables' rows
    /// (cells joined by ` | `), joined by spaces.
    fn cell_text(&mut self, cell: Node<'_, '_>, depth: usize) -> Result<String, Error> {
        let mut parts: Vec<String> = Vec::new();
        for block in cell.children() {
            if block.has_tag_name((W, "p")) {
                let text = paragraph_text(block);
                let words: Vec<&str> = text.split_whitespace().collect();
                if !words.is_empty() {
                    parts.push(words.join(" "));
                }
            } else if block.has_tag_name((W, "tbl")) {
                for row in self.table_rows(block, depth + 1)? {
                    parts.push(row.replace('\t', " | "));
                }
            }
        }
        Ok(parts.join(" "))
    }
}

/// Returns the text of the runs directly in `paragraph` and in its hyperlinks.
fn paragraph_text(paragraph: Node<'_, '_>) -> String {
    let mut text = String::new();
    for child in paragraph.children() {
        if child.has_tag_name((W, "r")) {
            run_text(child, &mut text);
        } else if child.has_tag_name((W, "hyperlink")) {
            for run in child.children().filter(|n| n.has_tag_name((W, "r"))) {
                run_text(run, &mut text);
            }
        }
    }
    text
}

/// Appends a run's text: `w:t`, tabs as `\t`, line breaks as `\n` (page and column
/// breaks as nothing) and no-break hyphens as `-`.
fn run_text(run: Node<'_, '_>, out: &mut String) {
    for item in run
        .children()
        .filter(|n| n.tag_name().namespace() == Some(W))
    {
        match item.tag_name().name() {
            "t" => out.push_str(item.text().unwrap_or_default()),
            "tab" | "ptab" => out.push('\t'),
            "cr" => out.push('\n'),
            "br" => {
                let kind = item.attribute((W, "type")).unwrap_or("textWrapping");
                if kind == "textWrapping" {
                    out.push('\n');
                }
            }
            "noBreakHyphen" => out.push('-'),
            _ => {}
        }
    }
}
