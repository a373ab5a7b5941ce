//! The documents of [`testdocs`] read through `read_file`'s document paths; every expected
//! text is what nanobot 0.3.5's `ReadFileTool` returned for the same bytes.

use std::path::{Path, PathBuf};

use super::page::{read_office, read_pdf};
use super::{Kind, testdocs};

const BUDGET: usize = 128_000;
const FAMILY: &str = "\u{1F469}\u{200D}\u{1F469}\u{200D}\u{1F467}\u{200D}\u{1F466}";
const FLAG: &str = "\u{1F1E8}\u{1F1F3}";

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn office(path: &Path, offset: usize, limit: usize) -> Result<String, String> {
    let kind = Kind::of(path).unwrap();
    read_office(path, kind, offset, limit, BUDGET)
}

#[test]
fn a_docx_reads_as_upstream_numbered_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "t.docx", &testdocs::docx());
    let expected = format!(
        "1| Hello 你好 {FAMILY} {FLAG}\n2| \n3| See link\tx\n4| second line\n5| \n\
         6| caf\u{e9} e\u{301}\n7| \n8| Name\t名字\n9| مرحبا\tשלום spaced out 内 | {FLAG}\n\
         10| \n11| x-y ✅\n12| \n13| beforeafter\n14| \n15| kept\n\n\
         (End of document — 15 extracted lines total)"
    );
    assert_eq!(office(&path, 1, 2000).unwrap(), expected);
    assert_eq!(
        office(&path, 3, 4).unwrap(),
        "3| See link\tx\n4| second line\n5| \n6| caf\u{e9} e\u{301}\n\n\
         (Showing extracted lines 3-6. Use offset=7 to continue.)"
    );
    assert_eq!(
        office(&path, 16, 10).unwrap_err(),
        "Error: offset 16 is beyond end of extracted document (15 lines)"
    );
}

#[test]
fn an_xlsx_reads_as_upstream_with_sheet_headers_and_python_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "t.xlsx", &testdocs::xlsx());
    let expected = format!(
        "1| --- Sheet: 数据 ---\n2| 名字\tCount\t\n\
         3| {FAMILY} family\t3\t2024-01-01 00:00:00\n4| مرحبا שלום\t2.5\t\n\
         5| True\t#DIV/0!\t\n6| \t\te\u{301} {FLAG}\n7| \n8| --- Sheet: Second ---\n\
         9| \t{FLAG}\n\n(End of document — 9 extracted lines total)"
    );
    assert_eq!(office(&path, 1, 2000).unwrap(), expected);
}

#[test]
fn a_pptx_reads_slides_in_presentation_order_as_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "t.pptx", &testdocs::pptx());
    let expected = format!(
        "1| --- Slide 1 ---\n2| 标题 Title\n3| Line one\n4| Line {FAMILY}\n5| after break\n\
         6| Grouped مرحبا\n7| A\tשלום\n8| \n9| --- Slide 3 ---\n10| e\u{301} {FLAG}\n\n\
         (End of document — 10 extracted lines total)"
    );
    assert_eq!(office(&path, 1, 2000).unwrap(), expected);
    assert_eq!(
        office(&path, 40, 2000).unwrap_err(),
        "Error: offset 40 is beyond end of extracted document (10 lines)"
    );
}

#[test]
fn a_pdf_reads_pages_with_headers_as_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "t.pdf", &testdocs::pdf(&testdocs::SAMPLE_PDF));
    let unicode_page = format!(
        "--- Page 3 ---\n你好 世界{FAMILY}{FLAG}\ne\u{301} مرحبا\nمرحبا שלום\n\n--- Page 4 ---\nThe end"
    );
    assert_eq!(
        read_pdf(&path, None, BUDGET).unwrap(),
        format!("--- Page 1 ---\nHello PDF\nSecond line\n\n{unicode_page}")
    );
    assert_eq!(read_pdf(&path, Some("3-4"), BUDGET).unwrap(), unicode_page);
    assert_eq!(
        read_pdf(&path, Some("5"), BUDGET).unwrap_err(),
        "Error: Invalid page range '5': document has 4 pages; use a page number or range within 1-4."
    );
    assert_eq!(
        read_pdf(&path, Some("2"), BUDGET).unwrap(),
        format!("(PDF has no extractable text: {})", path.display()),
        "a range without text says so, without a footer"
    );
}

#[test]
fn a_pdf_of_many_pages_pages_by_twenty_as_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let pages: Vec<String> = (1..=25)
        .map(|i| format!("BT /F1 12 Tf 72 720 Td (Page text {i}) Tj ET"))
        .collect();
    let refs: Vec<&str> = pages.iter().map(String::as_str).collect();
    let path = write(dir.path(), "t25.pdf", &testdocs::pdf(&refs));
    let first: Vec<String> = (1..=20)
        .map(|i| format!("--- Page {i} ---\nPage text {i}"))
        .collect();
    assert_eq!(
        read_pdf(&path, None, BUDGET).unwrap(),
        format!(
            "{}\n\n(Showing pages 1-20 of 25. Use pages='21-25' to continue.)",
            first.join("\n\n")
        )
    );
    assert_eq!(
        read_pdf(&path, Some("5-5"), BUDGET).unwrap(),
        "--- Page 5 ---\nPage text 5\n\n(Showing pages 5-5 of 25. Use pages='6-25' to continue.)"
    );
    let rest: Vec<String> = (21..=25)
        .map(|i| format!("--- Page {i} ---\nPage text {i}"))
        .collect();
    assert_eq!(
        read_pdf(&path, Some("21-30"), BUDGET).unwrap(),
        rest.join("\n\n")
    );
}

#[test]
fn long_documents_are_cut_at_the_budget_as_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let long = format!("BT /F1 12 Tf 72 720 Td ({}) Tj ET", "x".repeat(130_000));
    let pdf = write(
        dir.path(),
        "long.pdf",
        &testdocs::pdf(&[&long, testdocs::SAMPLE_PDF[3]]),
    );
    assert_eq!(
        read_pdf(&pdf, None, BUDGET).unwrap(),
        format!(
            "--- Page 1 ---\n{}... (truncated at 128000 chars)\n\n\
             (Showing pages 1-1 of 2. Use pages='2-2' to continue.)",
            "x".repeat(BUDGET - 15)
        )
    );
    let body = format!(
        "<w:p><w:r><w:t>{}</w:t></w:r></w:p><w:p><w:r><w:t>next</w:t></w:r></w:p>",
        "字".repeat(130_000)
    );
    let docx = write(dir.path(), "long.docx", &testdocs::docx_of(&body));
    assert_eq!(
        office(&docx, 1, 2000).unwrap(),
        format!(
            "1| {}...\n\n(Document text truncated at ~128K chars; line clipped. \
             Use offset=2 to continue.)",
            "字".repeat(BUDGET - 6)
        )
    );
    assert_eq!(
        office(&docx, 2, 2000).unwrap(),
        "2| \n3| next\n\n(End of document — 3 extracted lines total)"
    );
}

#[test]
fn corrupt_and_encrypted_documents_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let not_zip = write(dir.path(), "bad.docx", b"not a zip");
    assert_eq!(
        office(&not_zip, 1, 2000).unwrap_err(),
        "Error reading .DOCX file: invalid Office document: File is not a zip file"
    );
    let mut encrypted = testdocs::docx();
    let central = encrypted
        .windows(4)
        .position(|w| w == b"PK\x01\x02")
        .unwrap();
    encrypted[central + 8] |= 1;
    let encrypted = write(dir.path(), "enc.DOCX", &encrypted);
    assert_eq!(
        office(&encrypted, 1, 2000).unwrap_err(),
        "Error reading .DOCX file: encrypted Office documents are not supported"
    );
    let other_zip = testdocs::zip_of(&[("a.txt", "hi".into())]);
    for (name, kind) in [("x.docx", "DOCX"), ("x.xlsx", "XLSX"), ("x.pptx", "PPTX")] {
        let path = write(dir.path(), name, &other_zip);
        let error = office(&path, 1, 2000).unwrap_err();
        let prefix = format!("Error reading .{kind} file: failed to open {kind}: ");
        assert!(error.starts_with(&prefix), "{error}");
    }
    let empty = write(dir.path(), "empty.pdf", b"");
    assert_eq!(
        read_pdf(&empty, None, BUDGET).unwrap_err(),
        "Error reading PDF: Cannot read an empty file"
    );
    let whole = testdocs::pdf(&testdocs::SAMPLE_PDF);
    // Without a MediaBox pdf-extract panics; the panic is caught and reported.
    let text = String::from_utf8_lossy(&whole).replace("/MediaBox", "/NoMedBox");
    let no_box = write(dir.path(), "nobox.pdf", text.as_bytes());
    assert_eq!(
        read_pdf(&no_box, None, BUDGET).unwrap_err(),
        "Error reading PDF: the PDF could not be parsed"
    );
    let garbage = b"%PDF-1.4 garbage".to_vec();
    for (name, bytes) in [
        ("cut.pdf", whole[..whole.len() / 2].to_vec()),
        ("g.pdf", garbage),
    ] {
        let path = write(dir.path(), name, &bytes);
        match read_pdf(&path, None, BUDGET) {
            Err(error) => assert!(error.starts_with("Error reading PDF: "), "{error}"),
            Ok(text) => assert!(text.starts_with("--- Page 1 ---"), "{text}"),
        }
    }
}

#[test]
fn documents_without_text_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let blank = write(dir.path(), "blank.pdf", &testdocs::pdf(&["", ""]));
    assert_eq!(
        read_pdf(&blank, None, BUDGET).unwrap(),
        format!("(PDF has no extractable text: {})", blank.display())
    );
    let body = "<w:p/><w:p><w:r><w:t>   </w:t></w:r></w:p>";
    let docx = write(dir.path(), "blank.docx", &testdocs::docx_of(body));
    assert_eq!(
        office(&docx, 1, 2000).unwrap(),
        format!("(DOCX has no extractable text: {})", docx.display())
    );
}
