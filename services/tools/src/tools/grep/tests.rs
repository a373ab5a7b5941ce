//! grep on text files and documents; expected texts are nanobot 0.3.5's `GrepTool` output
//! on the same files.
use super::*;
use crate::sandbox::Sandbox;

fn ctx() -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    std::fs::write(
        ws.join("src/a.rs"),
        "fn main() {\n    let token = 1;\n    println!(\"{token}\");\n}\n",
    )
    .unwrap();
    std::fs::write(ws.join("notes.md"), "a TOKEN here\n").unwrap();
    std::fs::write(ws.join(".git/config"), "token\n").unwrap();
    std::fs::write(ws.join("blob.bin"), b"token\0\x01").unwrap();
    (
        dir,
        ToolContext {
            sandbox: Sandbox::new(&ws, true),
            session_key: "s".into(),
            origin: Default::default(),
            file_reads: Vec::new(),
        },
    )
}

fn as_args(args: Value) -> Args {
    let Value::Object(args) = args else {
        panic!("args must be an object")
    };
    args
}

async fn call(ctx: &ToolContext, args: Value) -> String {
    Grep.execute(ctx, as_args(args)).await.content
}

#[tokio::test]
async fn output_modes_follow_upstream_formats() {
    let (_dir, ctx) = ctx();
    assert_eq!(
        call(
            &ctx,
            json!({"pattern": "token", "output_mode": "files_with_matches"})
        )
        .await,
        "src/a.rs\n\n(skipped 1 binary/unreadable files)"
    );
    assert_eq!(
        call(&ctx, json!({"pattern": "token", "case_insensitive": true, "output_mode": "count", "type": "rs"})).await,
        "src/a.rs: 2\n\n(total matches: 2 in 1 files)"
    );
    assert_eq!(
        call(&ctx, json!({"pattern": "let token", "output_mode": "content", "context_before": 1, "context_after": 1, "glob": "*.rs"})).await,
        "src/a.rs:2\n  1| fn main() {\n> 2|     let token = 1;\n  3|     println!(\"{token}\");"
    );
    assert_eq!(
        call(
            &ctx,
            json!({"pattern": "token", "head_limit": 1, "glob": "*.rs", "context_after": 0})
        )
        .await,
        "src/a.rs:2\n  1| fn main() {\n> 2|     let token = 1;\n\n(pagination: limit=1, offset=0; use offset=1 to continue)"
    );
    assert_eq!(call(&ctx, json!({"pattern": "{token}", "fixed_strings": true, "path": "src/a.rs", "output_mode": "count"})).await, "src/a.rs: 1\n\n(total matches: 1 in 1 files)");
}

#[tokio::test]
async fn errors_and_empty_results_use_upstream_text() {
    let (dir, ctx) = ctx();
    assert_eq!(
        call(&ctx, json!({"pattern": "absent"})).await,
        "No matches found for pattern 'absent' in .\n\n(skipped 1 binary/unreadable files)"
    );
    assert!(
        call(&ctx, json!({"pattern": "("}))
            .await
            .starts_with("Error: invalid regex pattern: ")
    );
    assert_eq!(
        call(&ctx, json!({"pattern": "x", "path": "nope"})).await,
        "Error: Path not found: nope"
    );
    std::fs::write(dir.path().join("secret.txt"), "token\n").unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("secret.txt"),
        ctx.sandbox.root().join("leak.txt"),
    )
    .unwrap();
    let out = call(&ctx, json!({"pattern": "token", "glob": "*.txt"})).await;
    assert_eq!(
        out,
        "No matches found for pattern 'token' in .\n\n(skipped 1 files outside the search root)"
    );
}

/// The expected texts are nanobot 0.3.5's `GrepTool` output on the same files.
#[tokio::test]
async fn content_is_the_default_with_five_context_lines_on_cjk_and_emoji_files() {
    let (_dir, ctx) = ctx();
    let mut lines: Vec<String> = (1..=12).map(|i| format!("第{i}行")).collect();
    lines[6] = "心情：😀 👩‍👩‍👧‍👦 🇨🇳 e\u{301} שלום عربى".into();
    lines[8] = "又 😀".into();
    let notes = ctx.sandbox.root().join("笔记");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(notes.join("日记 📔.md"), lines.join("\n") + "\n").unwrap();
    let row7 = "心情：😀 👩‍👩‍👧‍👦 🇨🇳 e\u{301} שלום عربى";
    assert_eq!(
        call(&ctx, json!({"pattern": "😀", "path": "笔记"})).await,
        format!(
            "笔记/日记 📔.md:7\n  2| 第2行\n  3| 第3行\n  4| 第4行\n  5| 第5行\n  6| 第6行\n\
             > 7| {row7}\n  8| 第8行\n  9| 又 😀\n  10| 第10行\n  11| 第11行\n  12| 第12行\n\n\
             笔记/日记 📔.md:9\n  4| 第4行\n  5| 第5行\n  6| 第6行\n  7| {row7}\n  8| 第8行\n\
             > 9| 又 😀\n  10| 第10行\n  11| 第11行\n  12| 第12行"
        )
    );
    assert_eq!(
        call(&ctx, json!({"pattern": "😀", "path": "笔记", "context_before": 1, "context_after": 0, "head_limit": 1})).await,
        format!("笔记/日记 📔.md:7\n  6| 第6行\n> 7| {row7}\n\n(pagination: limit=1, offset=0; use offset=1 to continue)")
    );
    assert_eq!(
        call(&ctx, json!({"pattern": "😀", "path": "笔记", "context_before": 0, "context_after": 0, "offset": 1})).await,
        "笔记/日记 📔.md:9\n> 9| 又 😀\n\n(pagination: offset=1)"
    );
    let long = format!("{}😀{}", "x".repeat(2500), "y".repeat(10));
    std::fs::write(ctx.sandbox.root().join("long.txt"), format!("{long}\n")).unwrap();
    let clipped = call(
        &ctx,
        json!({"pattern": "😀", "path": "long.txt", "context_before": 0, "context_after": 0}),
    )
    .await;
    let tail: String = long.chars().skip(514).collect();
    assert_eq!(clipped, format!("long.txt:1\n> 1| ...{tail}"));
    assert_eq!(clip_line(&"é".repeat(2001), None), "é".repeat(1997) + "...");
}

fn write_documents(ctx: &ToolContext) {
    use crate::tools::documents::testdocs;
    let root = ctx.sandbox.root().join("docs");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("报告.docx"), testdocs::docx()).unwrap();
    std::fs::write(root.join("表.xlsx"), testdocs::xlsx()).unwrap();
    std::fs::write(root.join("幻灯片.pptx"), testdocs::pptx()).unwrap();
    std::fs::write(root.join("t.pdf"), testdocs::pdf(&testdocs::SAMPLE_PDF)).unwrap();
    let many: Vec<&str> = (0..102).map(|i| testdocs::SAMPLE_PDF[i % 4]).collect();
    std::fs::write(root.join("many.pdf"), testdocs::pdf(&many)).unwrap();
}

/// The expected texts are nanobot 0.3.5's `GrepTool` output on the same files.
#[tokio::test]
async fn documents_are_searched_with_source_locators_as_upstream() {
    let (_dir, ctx) = ctx();
    write_documents(&ctx);
    let around = |pattern: &str, path: &str| json!({"pattern": pattern, "path": format!("docs/{path}"), "context_before": 1, "context_after": 1});
    assert_eq!(
        call(&ctx, around("你|👩", "报告.docx")).await,
        "docs/报告.docx:1 [paragraph=1]\n> 1 [paragraph=1]| Hello 你好 👩‍👩‍👧‍👦 🇨🇳\n  3 [paragraph=2]| See link\tx"
    );
    assert_eq!(
        call(&ctx, around("👩|名字|3", "表.xlsx")).await,
        "docs/表.xlsx:2 [sheet='数据',row=1,cell=A1]\n> 2 [sheet='数据',row=1]| 名字\tCount\t\n  3 [sheet='数据',row=2]| 👩‍👩‍👧‍👦 family\t3\t2024-01-01 00:00:00\n\n\
         docs/表.xlsx:3 [sheet='数据',row=2,cell=A2]\n  2 [sheet='数据',row=1]| 名字\tCount\t\n> 3 [sheet='数据',row=2]| 👩‍👩‍👧‍👦 family\t3\t2024-01-01 00:00:00\n  4 [sheet='数据',row=3]| مرحبا שלום\t2.5\t"
    );
    assert_eq!(
        call(&ctx, around("e\u{301}|世界", "幻灯片.pptx")).await,
        "docs/幻灯片.pptx:10 [slide=3,line=1]\n  7 [slide=1,line=6]| A\tשלום\n> 10 [slide=3,line=1]| e\u{301} 🇨🇳"
    );
    assert_eq!(
        call(&ctx, around("世界|end", "t.pdf")).await,
        "docs/t.pdf:6 [page=3,line=1]\n  3 [page=1,line=2]| Second line\n> 6 [page=3,line=1]| 你好 世界👩‍👩‍👧‍👦🇨🇳\n  7 [page=3,line=2]| e\u{301} مرحبا\n\n\
         docs/t.pdf:11 [page=4,line=1]\n  8 [page=3,line=3]| مرحبا שלום\n> 11 [page=4,line=1]| The end"
    );
    assert_eq!(
        call(&ctx, json!({"pattern": "3", "path": "docs/表.xlsx", "context_before": 0, "context_after": 0, "head_limit": 1})).await,
        "docs/表.xlsx:3 [sheet='数据',row=2,cell=B2]\n> 3 [sheet='数据',row=2]| 👩‍👩‍👧‍👦 family\t3\t2024-01-01 00:00:00"
    );
}

/// The expected texts are nanobot 0.3.5's `GrepTool` output on the same files.
#[tokio::test]
async fn every_document_line_is_located_spreadsheet_matches_by_cell() {
    let (_dir, ctx) = ctx();
    write_documents(&ctx);
    let each = |path: &str| json!({"pattern": "\\S", "path": format!("docs/{path}"), "context_before": 0, "context_after": 0});
    assert_eq!(
        call(&ctx, each("表.xlsx")).await,
        "docs/表.xlsx:2 [sheet='数据',row=1,cell=A1]\n> 2 [sheet='数据',row=1]| 名字\tCount\t\n\n\
         docs/表.xlsx:3 [sheet='数据',row=2,cell=A2]\n> 3 [sheet='数据',row=2]| 👩‍👩‍👧‍👦 family\t3\t2024-01-01 00:00:00\n\n\
         docs/表.xlsx:4 [sheet='数据',row=3,cell=A3]\n> 4 [sheet='数据',row=3]| مرحبا שלום\t2.5\t\n\n\
         docs/表.xlsx:5 [sheet='数据',row=5,cell=A5]\n> 5 [sheet='数据',row=5]| True\t#DIV/0!\t\n\n\
         docs/表.xlsx:6 [sheet='数据',row=6,cell=C6]\n> 6 [sheet='数据',row=6]| \t\te\u{301} 🇨🇳\n\n\
         docs/表.xlsx:9 [sheet='Second',row=2,cell=B2]\n> 9 [sheet='Second',row=2]| \t🇨🇳"
    );
    let mut slides = each("幻灯片.pptx");
    slides["head_limit"] = json!(3);
    slides["offset"] = json!(4);
    assert_eq!(
        call(&ctx, slides).await,
        "docs/幻灯片.pptx:6 [slide=1,line=5]\n> 6 [slide=1,line=5]| Grouped مرحبا\n\n\
         docs/幻灯片.pptx:7 [slide=1,line=6]\n> 7 [slide=1,line=6]| A\tשלום\n\n\
         docs/幻灯片.pptx:10 [slide=3,line=1]\n> 10 [slide=3,line=1]| e\u{301} 🇨🇳\n\n(pagination: offset=4)"
    );
    let paragraphs: Vec<String> = call(&ctx, each("报告.docx"))
        .await
        .split("\n\n")
        .map(|block| block.split_once('\n').unwrap().0.to_string())
        .collect();
    assert_eq!(
        paragraphs,
        [1, 3, 4, 6, 8, 9, 11, 13, 15]
            .iter()
            .zip(1..)
            .map(|(line, n)| format!("docs/报告.docx:{line} [paragraph={n}]"))
            .collect::<Vec<_>>()
    );
}

/// The expected texts are nanobot 0.3.5's `GrepTool` output on the same files.
#[tokio::test]
async fn pdf_page_ranges_bound_and_continue_the_search_as_upstream() {
    let (_dir, ctx) = ctx();
    write_documents(&ctx);
    let bad = Grep
        .execute(
            &ctx,
            as_args(json!({"pattern": "end", "path": "docs/t.pdf", "pages": "9"})),
        )
        .await;
    assert!(bad.is_error);
    assert_eq!(
        bad.content,
        "Error: Invalid PDF page range '9': document has 4 pages; use a page number or range within 1-4."
    );
    assert_eq!(
        call(&ctx, json!({"pattern": "end", "path": "docs", "pages": "9", "output_mode": "count", "type": "pdf"})).await,
        "No matches found for pattern 'end' in docs\n\n(skipped 1 binary/unreadable files)\n\
         (first document error: docs/t.pdf: document has 4 pages; use a page number or range within 1-4)\n\
         (docs/many.pdf: continue PDF search with pages='10-102')"
    );
    assert_eq!(
        call(
            &ctx,
            json!({"pattern": "end", "path": "docs/many.pdf", "output_mode": "count"})
        )
        .await,
        "docs/many.pdf: 25\n\n(docs/many.pdf: continue PDF search with pages='101-102')\n(total matches: 25 in 1 files)"
    );
    assert_eq!(
        call(&ctx, json!({"pattern": "Hello", "path": "docs/many.pdf", "pages": "101-102", "context_before": 0, "context_after": 0})).await,
        "docs/many.pdf:2 [page=101,line=1]\n> 2 [page=101,line=1]| Hello PDF"
    );
    std::fs::write(ctx.sandbox.root().join("docs/坏.docx"), "not a zip").unwrap();
    let corrupt = Grep
        .execute(
            &ctx,
            as_args(json!({"pattern": "x", "path": "docs/坏.docx"})),
        )
        .await;
    assert!(corrupt.is_error);
    assert_eq!(
        corrupt.content,
        "Error searching document docs/坏.docx: invalid Office document: File is not a zip file"
    );
}
