//! PPTX: each slide with text as `--- Slide N ---` and its shapes' text in tree order, as
//! python-pptx reads it (groups walked, tables as tab-joined non-empty cells, line breaks
//! inside a paragraph as line ends); a blank line between slides.

use roxmltree::Node;

use super::archive::Archive;
use super::{Error, Kind, Line, split_lines};

/// PresentationML's namespace.
const P: &str = "http://schemas.openxmlformats.org/presentationml/2006/main";
/// DrawingML's namespace.
const A: &str = "http://schemas.openxmlformats.org/drawingml/2006/main";
/// The relationships namespace (`r:id`).
const R: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";

/// Returns the presentation's lines, text located as `slide=N,line=K`.
pub(super) fn lines(archive: &mut Archive<'_>) -> Result<Vec<Line>, Error> {
    let mut lines = Vec::new();
    for (index, slide) in slides(archive)?.iter().enumerate() {
        let doc = roxmltree::Document::parse(slide).map_err(|e| open_error(e.to_string()))?;
        let mut texts = Vec::new();
        let tree = doc.descendants().find(|n| n.has_tag_name((P, "spTree")));
        if let Some(tree) = tree {
            collect_shapes(tree, &mut texts);
        }
        let slide_lines: Vec<&str> = texts.iter().flat_map(|t| split_lines(t)).collect();
        if slide_lines.is_empty() {
            continue;
        }
        if !lines.is_empty() {
            lines.push(Line::plain(String::new()));
        }
        lines.push(Line::plain(format!("--- Slide {} ---", index + 1)));
        let mut number = 0;
        for text in slide_lines {
            if text.is_empty() {
                lines.push(Line::plain(String::new()));
                continue;
            }
            number += 1;
            let locator = format!("slide={},line={number}", index + 1);
            lines.push(Line::located(text.to_string(), locator));
        }
    }
    Ok(lines)
}

fn open_error(reason: String) -> Error {
    Error::Open {
        kind: Kind::Pptx,
        reason,
    }
}

/// Returns the XML of the slides in presentation order (`p:sldIdLst`).
fn slides(archive: &mut Archive<'_>) -> Result<Vec<String>, Error> {
    let (main, xml) = archive.main_document().map_err(open_error)?;
    let doc = roxmltree::Document::parse(&xml).map_err(|e| open_error(e.to_string()))?;
    let rels = archive.relationships(&main).map_err(open_error)?;
    let mut slides = Vec::new();
    for id in doc.descendants().filter(|n| n.has_tag_name((P, "sldId"))) {
        let Some(rid) = id.attribute((R, "id")) else {
            continue;
        };
        let Some(rel) = rels.iter().find(|rel| rel.id == rid) else {
            continue;
        };
        if let Some(slide) = archive.part(&rel.target).map_err(open_error)? {
            slides.push(slide);
        }
    }
    Ok(slides)
}

/// Appends the text of each shape under `tree`, recursing into groups.
fn collect_shapes(tree: Node<'_, '_>, out: &mut Vec<String>) {
    for shape in tree
        .children()
        .filter(|n| n.tag_name().namespace() == Some(P))
    {
        match shape.tag_name().name() {
            "grpSp" => collect_shapes(shape, out),
            "graphicFrame" => table_text(shape, out),
            "sp" => {
                let text = shape
                    .children()
                    .find(|n| n.has_tag_name((P, "txBody")))
                    .map(frame_text)
                    .unwrap_or_default();
                if !text.is_empty() {
                    out.push(text);
                }
            }
            _ => {}
        }
    }
}

/// Appends each table row with text: its non-empty cells (trimmed), tab-joined.
fn table_text(frame: Node<'_, '_>, out: &mut Vec<String>) {
    let Some(table) = frame.descendants().find(|n| n.has_tag_name((A, "tbl"))) else {
        return;
    };
    for row in table.children().filter(|n| n.has_tag_name((A, "tr"))) {
        let mut cells = Vec::new();
        for cell in row.children().filter(|n| n.has_tag_name((A, "tc"))) {
            let text = cell
                .children()
                .find(|n| n.has_tag_name((A, "txBody")))
                .map(frame_text)
                .unwrap_or_default();
            let trimmed = text.trim();
            if !trimmed.is_empty() {
                cells.push(trimmed.to_string());
            }
        }
        if !cells.is_empty() {
            out.push(cells.join("\t"));
        }
    }
}

/// Returns a text body's paragraphs joined by `\n`; a line break inside a paragraph is
/// `\v`, runs and fields give their `a:t`.
fn frame_text(body: Node<'_, '_>) -> String {
    let mut paragraphs = Vec::new();
    for paragraph in body.children().filter(|n| n.has_tag_name((A, "p"))) {
        let mut text = String::new();
        for item in paragraph.children() {
            if item.has_tag_name((A, "r")) || item.has_tag_name((A, "fld")) {
                let t = item.children().find(|n| n.has_tag_name((A, "t")));
                text.push_str(t.and_then(|t| t.text()).unwrap_or_default());
            } else if item.has_tag_name((A, "br")) {
                text.push('\u{0B}');
            }
        }
        paragraphs.push(text);
    }
    paragraphs.join("\n")
}
