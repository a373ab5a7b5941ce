//! Real documents for the tests, built byte by byte: OOXML packages (ZIP + XML) and a
//! PDF with a Latin font and a Unicode (Type0, ToUnicode) font. Their text carries
//! Chinese, emoji (a ZWJ family, a flag), a combining mark and Arabic/Hebrew.

use std::io::{Cursor, Write as _};

const CT: &str = "http://schemas.openxmlformats.org/package/2006/content-types";
const PR: &str = "http://schemas.openxmlformats.org/package/2006/relationships";
const OFFICE_DOC: &str =
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument";
const REL: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const W: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";
const A: &str = "http://schemas.openxmlformats.org/drawingml/2006/main";
const P: &str = "http://schemas.openxmlformats.org/presentationml/2006/main";
const S: &str = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";

/// Returns a ZIP archive of `parts` (name, text), deflated.
pub(crate) fn zip_of(parts: &[(&str, String)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    for (name, text) in parts {
        zip.start_file(*name, options).unwrap();
        zip.write_all(text.as_bytes()).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

fn content_types(overrides: &[(&str, &str)]) -> String {
    let mut xml = format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Types xmlns="{CT}"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>"#
    );
    for (part, kind) in overrides {
        xml.push_str(&format!(
            r#"<Override PartName="/{part}" ContentType="application/vnd.openxmlformats-officedocument.{kind}"/>"#
        ));
    }
    xml.push_str("</Types>");
    xml
}

fn rels(targets: &[(&str, &str, &str)]) -> String {
    let mut xml = format!(r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{PR}">"#);
    for (id, kind, target) in targets {
        xml.push_str(&format!(
            r#"<Relationship Id="{id}" Type="{kind}" Target="{target}"/>"#
        ));
    }
    xml.push_str("</Relationships>");
    xml
}

fn run(text: &str) -> String {
    format!(r#"<w:r><w:t xml:space="preserve">{text}</w:t></w:r>"#)
}

fn cell(paragraphs: &str) -> String {
    format!("<w:tc><w:tcPr/>{paragraphs}</w:tc>")
}

/// Returns a DOCX: split runs, a hyperlink with a tab and a line break, an empty and a
/// padded paragraph, a table (an empty row, a two-paragraph cell, a nested table), a
/// no-break hyphen, a page break, and a tracked insertion (python-docx skips it).
pub(crate) fn docx() -> Vec<u8> {
    let nested = format!(
        "<w:tbl><w:tr>{}{}</w:tr></w:tbl>",
        cell(&format!("<w:p>{}</w:p>", run("内"))),
        cell(&format!("<w:p>{}</w:p>", run("🇨🇳")))
    );
    let table = format!(
        "<w:tbl><w:tblPr/><w:tr>{}{}</w:tr><w:tr>{}{}</w:tr><w:tr>{}{}</w:tr></w:tbl>",
        cell(&format!("<w:p>{}</w:p>", run("Name"))),
        cell(&format!("<w:p>{}</w:p>", run("名字"))),
        cell("<w:p/>"),
        cell("<w:p/>"),
        cell(&format!("<w:p>{}</w:p>", run("مرحبا"))),
        cell(&format!(
            "<w:p>{}</w:p><w:p>{}</w:p>{nested}",
            run("שלום"),
            run("  spaced   out ")
        )),
    );
    let body = format!(
        concat!(
            "<w:p>{}{}</w:p>",
            r#"<w:p>{}<w:hyperlink r:id="rId9"><w:r><w:t>link</w:t><w:tab/><w:t>x</w:t><w:br/><w:t>second line</w:t></w:r></w:hyperlink></w:p>"#,
            "<w:p/>",
            "<w:p>{}</w:p>",
            "{}",
            "<w:p><w:r><w:t>x</w:t><w:noBreakHyphen/><w:t>y ✅</w:t></w:r></w:p>",
            r#"<w:p><w:r><w:t>before</w:t><w:br w:type="page"/><w:t>after</w:t></w:r></w:p>"#,
            "<w:p>{}<w:ins><w:r><w:t>inserted</w:t></w:r></w:ins></w:p>",
        ),
        run("Hello "),
        run("你好 👩‍👩‍👧‍👦 🇨🇳"),
        run("See "),
        run("  café e\u{301}  "),
        table,
        run("kept"),
    );
    docx_of(&body)
}

/// Returns a DOCX whose body is `body` (WordprocessingML, `w:` and `r:` bound).
pub(crate) fn docx_of(body: &str) -> Vec<u8> {
    let document = format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="{W}" xmlns:r="{REL}"><w:body>{body}<w:sectPr/></w:body></w:document>"#
    );
    zip_of(&[
        (
            "[Content_Types].xml",
            content_types(&[("word/document.xml", "wordprocessingml.document.main+xml")]),
        ),
        (
            "_rels/.rels",
            rels(&[("rId1", OFFICE_DOC, "word/document.xml")]),
        ),
        ("word/document.xml", document),
    ])
}

fn sheet(dimension: &str, rows: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{S}"><dimension ref="{dimension}"/><sheetData>{rows}</sheetData></worksheet>"#
    )
}

/// Returns an XLSX: a sheet of shared and inline strings, whole and fractional numbers,
/// a boolean, an error and a date, with a blank row and a ragged right edge; an empty
/// sheet; and a sheet whose only cell is in column B.
pub(crate) fn xlsx() -> Vec<u8> {
    let shared = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{S}" count="3" uniqueCount="3"><si><t>名字</t></si><si><t>Count</t></si><si><r><t>👩‍👩‍👧‍👦</t></r><r><t xml:space="preserve"> family</t></r></si></sst>"#
    );
    let styles = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><styleSheet xmlns="{S}"><fonts count="1"><font/></fonts><fills count="1"><fill><patternFill patternType="none"/></fill></fills><borders count="1"><border/></borders><cellStyleXfs count="1"><xf/></cellStyleXfs><cellXfs count="2"><xf numFmtId="0"/><xf numFmtId="14" applyNumberFormat="1"/></cellXfs></styleSheet>"#
    );
    let data = sheet(
        "A1:C6",
        concat!(
            r#"<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row>"#,
            r#"<row r="2"><c r="A2" t="s"><v>2</v></c><c r="B2"><v>3</v></c><c r="C2" s="1"><v>45292</v></c></row>"#,
            r#"<row r="3"><c r="A3" t="inlineStr"><is><t>مرحبا שלום</t></is></c><c r="B3"><v>2.5</v></c></row>"#,
            r#"<row r="5"><c r="A5" t="b"><v>1</v></c><c r="B5" t="e"><v>#DIV/0!</v></c></row>"#,
            r#"<row r="6"><c r="C6" t="inlineStr"><is><t>e&#x301; 🇨🇳</t></is></c></row>"#,
        ),
    );
    let workbook = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{S}" xmlns:r="{REL}"><sheets><sheet name="数据" sheetId="1" r:id="rId1"/><sheet name="Empty" sheetId="2" r:id="rId2"/><sheet name="Second" sheetId="3" r:id="rId3"/></sheets></workbook>"#
    );
    let ws = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet";
    let ss = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings";
    let st = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles";
    let sheet_kind = "spreadsheetml.worksheet+xml";
    zip_of(&[
        (
            "[Content_Types].xml",
            content_types(&[
                ("xl/workbook.xml", "spreadsheetml.sheet.main+xml"),
                ("xl/worksheets/sheet1.xml", sheet_kind),
                ("xl/worksheets/sheet2.xml", sheet_kind),
                ("xl/worksheets/sheet3.xml", sheet_kind),
                ("xl/sharedStrings.xml", "spreadsheetml.sharedStrings+xml"),
                ("xl/styles.xml", "spreadsheetml.styles+xml"),
            ]),
        ),
        (
            "_rels/.rels",
            rels(&[("rId1", OFFICE_DOC, "xl/workbook.xml")]),
        ),
        ("xl/workbook.xml", workbook),
        (
            "xl/_rels/workbook.xml.rels",
            rels(&[
                ("rId1", ws, "worksheets/sheet1.xml"),
                ("rId2", ws, "worksheets/sheet2.xml"),
                ("rId3", ws, "worksheets/sheet3.xml"),
                ("rId4", ss, "sharedStrings.xml"),
                ("rId5", st, "styles.xml"),
            ]),
        ),
        ("xl/worksheets/sheet1.xml", data),
        ("xl/worksheets/sheet2.xml", sheet("A1", "")),
        (
            "xl/worksheets/sheet3.xml",
            sheet(
                "B2",
                r#"<row r="2"><c r="B2" t="inlineStr"><is><t>🇨🇳</t></is></c></row>"#,
            ),
        ),
        ("xl/sharedStrings.xml", shared),
        ("xl/styles.xml", styles),
    ])
}

fn shape(paragraphs: &str) -> String {
    format!(
        r#"<p:sp><p:nvSpPr><p:cNvPr id="2" name="s"/><p:cNvSpPr/><p:nvPr/></p:nvSpPr><p:spPr/><p:txBody><a:bodyPr/>{paragraphs}</p:txBody></p:sp>"#
    )
}

fn para(runs: &str) -> String {
    format!("<a:p>{runs}</a:p>")
}

fn text_run(text: &str) -> String {
    format!("<a:r><a:t>{text}</a:t></a:r>")
}

fn slide(shapes: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><p:sld xmlns:a="{A}" xmlns:p="{P}" xmlns:r="{REL}"><p:cSld><p:spTree><p:nvGrpSpPr><p:cNvPr id="1" name=""/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr><p:grpSpPr/>{shapes}</p:spTree></p:cSld></p:sld>"#
    )
}

fn table_cell(text: &str) -> String {
    format!(
        "<a:tc><a:txBody><a:bodyPr/>{}</a:txBody></a:tc>",
        para(&text_run(text))
    )
}

/// Returns a PPTX of three slides, listed out of file order: a title, a body with a line
/// break inside a paragraph, a group, a picture and a table; a slide without text; and
/// a slide with a combining mark and a flag.
pub(crate) fn pptx() -> Vec<u8> {
    let group = format!(
        r#"<p:grpSp><p:nvGrpSpPr><p:cNvPr id="5" name="g"/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr><p:grpSpPr/>{}</p:grpSp>"#,
        shape(&para(&text_run("Grouped مرحبا")))
    );
    let table = format!(
        r#"<p:graphicFrame><p:nvGraphicFramePr><p:cNvPr id="6" name="t"/><p:cNvGraphicFramePr/><p:nvPr/></p:nvGraphicFramePr><p:xfrm/><a:graphic><a:graphicData uri="http://schemas.openxmlformats.org/drawingml/2006/table"><a:tbl><a:tr h="1">{}{}{}</a:tr><a:tr h="1">{}{}{}</a:tr></a:tbl></a:graphicData></a:graphic></p:graphicFrame>"#,
        table_cell(" A "),
        table_cell(""),
        table_cell("שלום"),
        table_cell(""),
        table_cell(" "),
        table_cell(""),
    );
    let picture = r#"<p:pic><p:nvPicPr><p:cNvPr id="7" name="p"/><p:cNvPicPr/><p:nvPr/></p:nvPicPr><p:blipFill/><p:spPr/></p:pic>"#;
    let first = slide(&format!(
        "{}{}{group}{picture}{table}",
        shape(&para(&text_run("标题 Title"))),
        shape(&format!(
            "{}{}",
            para(&text_run("Line one")),
            para(&format!(
                "{}<a:br/>{}",
                text_run("Line 👩‍👩‍👧‍👦"),
                text_run("after break")
            ))
        )),
    ));
    let empty = slide(&shape("<a:p/>"));
    let last = slide(&shape(&para(&text_run("e\u{301} 🇨🇳"))));
    let presentation = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><p:presentation xmlns:a="{A}" xmlns:p="{P}" xmlns:r="{REL}"><p:sldIdLst><p:sldId id="256" r:id="rId3"/><p:sldId id="257" r:id="rId2"/><p:sldId id="258" r:id="rId4"/></p:sldIdLst><p:sldSz cx="9144000" cy="6858000"/><p:notesSz cx="6858000" cy="9144000"/></p:presentation>"#
    );
    let sl = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/slide";
    let slide_kind = "presentationml.slide+xml";
    zip_of(&[
        (
            "[Content_Types].xml",
            content_types(&[
                (
                    "ppt/presentation.xml",
                    "presentationml.presentation.main+xml",
                ),
                ("ppt/slides/slide1.xml", slide_kind),
                ("ppt/slides/slide2.xml", slide_kind),
                ("ppt/slides/slide3.xml", slide_kind),
            ]),
        ),
        (
            "_rels/.rels",
            rels(&[("rId1", OFFICE_DOC, "ppt/presentation.xml")]),
        ),
        ("ppt/presentation.xml", presentation),
        (
            "ppt/_rels/presentation.xml.rels",
            rels(&[
                ("rId2", sl, "slides/slide1.xml"),
                ("rId3", sl, "slides/slide2.xml"),
                ("rId4", sl, "slides/slide3.xml"),
            ]),
        ),
        ("ppt/slides/slide1.xml", empty),
        ("ppt/slides/slide2.xml", first),
        ("ppt/slides/slide3.xml", last),
    ])
}

/// Returns a PDF of `objects` (object 1 the catalog), with a correct xref table.
fn pdf_of(objects: &[String]) -> Vec<u8> {
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    let size = objects.len() + 1;
    out.extend_from_slice(format!("xref\n0 {size}\n0000000000 65535 f \n").as_bytes());
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!("trailer\n<< /Size {size} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n").as_bytes(),
    );
    out
}

fn stream(data: &str) -> String {
    format!("<< /Length {} >>\nstream\n{data}\nendstream", data.len())
}

/// Glyphs of the Unicode font, CID 1 upward.
const GLYPHS: [&str; 9] = [
    "你",
    "好",
    "世界",
    "👩‍👩‍👧‍👦",
    "🇨🇳",
    "e\u{301}",
    "مرحبا",
    "שלום",
    " ",
];

fn to_unicode() -> String {
    let mut cmap = String::from(
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def /CMapName /Adobe-Identity-UCS def /CMapType 2 def 1 begincodespacerange <0000> <FFFF> endcodespacerange\n",
    );
    cmap.push_str(&format!("{} beginbfchar\n", GLYPHS.len()));
    for (i, glyph) in GLYPHS.iter().enumerate() {
        let hex: String = glyph.encode_utf16().map(|u| format!("{u:04X}")).collect();
        cmap.push_str(&format!("<{:04X}> <{hex}>\n", i + 1));
    }
    cmap.push_str("endbfchar endcmap CMapName currentdict /CMap defineresource pop end end");
    cmap
}

/// Returns a PDF of `pages` content streams (a blank one has no text); `/F1` is
/// Helvetica, `/F2` a Unicode font whose CIDs 1-9 are [`GLYPHS`].
pub(crate) fn pdf(pages: &[&str]) -> Vec<u8> {
    let n = pages.len();
    let font_base = 3 + 2 * n;
    let kids: Vec<String> = (0..n).map(|i| format!("{} 0 R", 3 + i)).collect();
    let mut objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {n} /MediaBox [0 0 612 792] >>",
            kids.join(" ")
        ),
    ];
    for i in 0..n {
        objects.push(format!(
            "<< /Type /Page /Parent 2 0 R /Resources << /Font << /F1 {font_base} 0 R /F2 {} 0 R >> >> /Contents {} 0 R >>",
            font_base + 1,
            3 + n + i
        ));
    }
    objects.extend(pages.iter().map(|p| stream(p)));
    objects.extend([
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>".to_string(),
        format!("<< /Type /Font /Subtype /Type0 /BaseFont /Uni /Encoding /Identity-H /DescendantFonts [{} 0 R] /ToUnicode {} 0 R >>", font_base + 2, font_base + 4),
        format!("<< /Type /Font /Subtype /CIDFontType2 /BaseFont /Uni /CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> /FontDescriptor {} 0 R /DW 1000 >>", font_base + 3),
        "<< /Type /FontDescriptor /FontName /Uni /Flags 4 /FontBBox [0 0 1000 1000] /ItalicAngle 0 /Ascent 880 /Descent -120 /CapHeight 700 /StemV 80 >>".to_string(),
        stream(&to_unicode()),
    ]);
    pdf_of(&objects)
}

/// The pages of the sample PDF: Latin lines; a blank page; Unicode lines (a space glyph
/// between words, a TJ gap wide enough to be a space); and a last Latin line.
pub(crate) const SAMPLE_PDF: [&str; 4] = [
    "BT /F1 12 Tf 72 720 Td (Hello PDF) Tj 0 -20 Td (Second line) Tj ET",
    "",
    "BT /F2 12 Tf 72 720 Td <000100020009000300040005> Tj 0 -20 Td [<0006> -500 <0007>] TJ 0 -20 Td <000700090008> Tj ET",
    "BT /F1 12 Tf 72 720 Td (The end) Tj ET",
];
