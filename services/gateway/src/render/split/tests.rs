use proptest::prelude::*;

use super::*;
use crate::render::corpus;

const FAMILY: &str = "👩\u{200d}👩\u{200d}👧\u{200d}👦";

fn chars(max: usize) -> Limit {
    Limit::code_points(max)
}

#[test]
fn short_content_is_one_chunk_and_blank_is_none() {
    assert_eq!(split_markdown("  hello", chars(10)), vec!["hello"]);
    assert!(split_markdown("   \n ", chars(10)).is_empty());
    assert!(split_markdown("", Limit::utf16(10)).is_empty());
}

#[test]
fn cuts_prefer_newline_then_space_then_hard() {
    assert_eq!(
        split_markdown("aaaa bbbb\ncccc", chars(12)),
        ["aaaa bbbb", "cccc"]
    );
    assert_eq!(
        split_markdown("aaaa bbbb cccc", chars(12)),
        ["aaaa bbbb", "cccc"]
    );
    assert_eq!(
        split_markdown("abcdefghij", chars(4)),
        ["abcd", "efgh", "ij"]
    );
}

#[test]
fn the_cuts_match_upstream_on_plain_text() {
    // From nanobot 0.3.5: _split_telegram_markdown("alpha beta\ngamma delta epsilon", 12)
    assert_eq!(
        split_markdown("alpha beta\ngamma delta epsilon", chars(12)),
        ["alpha beta", "gamma delta", "epsilon"]
    );
    // _split_telegram_markdown("中文中文中文 汉字汉字", 5)
    assert_eq!(
        split_markdown("中文中文中文 汉字汉字", chars(5)),
        ["中文中文中", "文", "汉字汉字"]
    );
}

#[test]
fn a_cut_inside_code_closes_and_reopens_the_same_fence() {
    let code: String = (0..30).map(|i| format!("line {i}\n")).collect();
    let md = format!("```python\n{code}```");
    let chunks = split_markdown(&md, chars(60));
    assert!(chunks.len() > 2, "{chunks:?}");
    for chunk in &chunks {
        assert!(chunk.chars().count() <= 60, "{chunk:?}");
        assert!(chunk.starts_with("```python\n"), "{chunk:?}");
        assert!(chunk.ends_with("```"), "{chunk:?}");
        assert_eq!(chunk.matches("```").count(), 2, "{chunk:?}");
    }
    let rejoined: String = chunks
        .iter()
        .map(|c| c.trim_start_matches("```python\n").trim_end_matches("```"))
        .collect::<Vec<_>>()
        .join("");
    assert_eq!(rejoined.replace('\n', ""), code.replace('\n', ""));
}

#[test]
fn a_cut_inside_a_later_fence_moves_back_to_the_fence() {
    let md = format!(
        "{}\n```\ncode\nmore code\n```",
        "intro ".repeat(5).trim_end()
    );
    let chunks = split_markdown(&md, chars(40));
    assert_eq!(chunks[0], "intro intro intro intro intro\n");
    assert_eq!(chunks[1], "```\ncode\nmore code\n```");
}

#[test]
fn a_5000_emoji_reply_splits_into_chunks_of_at_most_4096_utf16_units() {
    let reply = "😀".repeat(5000);
    let chunks = split_markdown(&reply, Limit::utf16(4096));
    let units: Vec<usize> = chunks.iter().map(|c| c.encode_utf16().count()).collect();
    assert_eq!(units, [4096, 4096, 1808]);
    assert_eq!(chunks.concat(), reply);
}

#[test]
fn a_cjk_reply_is_split_at_whole_graphemes() {
    let reply = format!("{}{FAMILY}{}", "中文".repeat(2000), "字".repeat(10));
    let limit = Limit::utf16(4005);
    let chunks = split_markdown(&reply, limit);
    assert_eq!(chunks[0], "中文".repeat(2000));
    assert_eq!(chunks[1], format!("{FAMILY}{}", "字".repeat(10)));
    corpus::assert_cut_whole(&reply, &chunks, limit);
}

#[test]
fn hard_cuts_keep_flags_accents_and_skin_tones_whole() {
    let limit = chars(5);
    for text in [
        "🇨🇳🇺🇸🇨🇳🇺🇸",
        "e\u{301}e\u{301}e\u{301}e\u{301}",
        "👍🏽👍🏽👍🏽👍🏽",
        "שָׁלוֹםשָׁלוֹם",
    ] {
        let chunks = split_markdown(text, limit);
        assert!(chunks.len() > 1, "{chunks:?}");
        corpus::assert_cut_whole(text, &chunks, limit);
    }
    assert_eq!(split_markdown("🇨🇳🇺🇸🇨🇳", Limit::utf16(10)), ["🇨🇳🇺🇸", "🇨🇳"]);
}

#[test]
fn crlf_is_never_parted_and_a_marked_space_stays() {
    assert_eq!(
        split_markdown("abc\r\ndef ghi", chars(9)),
        ["abc", "def ghi"]
    );
    // A space carrying an accent is one cluster: no cut before the accent, no lone accent.
    let text = "abcd \u{301}efgh";
    let chunks = split_markdown(text, chars(5));
    assert_eq!(chunks, ["abcd", " \u{301}efg", "h"]);
}

#[test]
fn a_fence_reopened_in_a_cjk_block_stays_in_utf16_limits() {
    let md = format!("```\n{}\n```", format!("{FAMILY}中文\n").repeat(40));
    let limit = Limit::utf16(100);
    let chunks = split_markdown(&md, limit);
    assert!(chunks.len() > 5);
    for chunk in &chunks {
        assert!(limit.fits(chunk), "{chunk:?}");
        assert_eq!(chunk.matches("```").count(), 2, "{chunk:?}");
    }
    corpus::assert_clusters_kept(&md, &chunks, &['`']);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_chunk_is_a_whole_stretch_within_the_limit(
        text in corpus::text(160),
        max in 12usize..120,
        utf16 in any::<bool>(),
    ) {
        let limit = if utf16 { Limit::utf16(max) } else { chars(max) };
        let chunks = split_markdown(&text, limit);
        corpus::assert_cut_whole(&text, &chunks, limit);
    }

    #[test]
    fn fenced_text_keeps_every_cluster_and_every_chunk_in_the_limit(
        text in corpus::fenced_text(160),
        max in 16usize..120,
        utf16 in any::<bool>(),
    ) {
        let limit = if utf16 { Limit::utf16(max) } else { chars(max) };
        let chunks = split_markdown(&text, limit);
        for chunk in &chunks {
            prop_assert!(limit.fits(chunk), "{} > {max}: {chunk:?}", limit.measure(chunk));
        }
        // Reopened fences add only backticks and newlines.
        corpus::assert_clusters_kept(&text, &chunks, &['`']);
    }
}

/// Telegram and Slack render each Markdown chunk whole, so their messages are checked on both
/// sides: the Markdown chunks keep every cluster, the rendered text is within the limit and
/// holds no piece of a tag or an entity.
mod platforms {
    use proptest::prelude::*;

    use crate::render::corpus;
    use crate::render::measure::Limit;
    use crate::render::slack::split_mrkdwn;
    use crate::render::telegram::{MAX_HTML_LEN, split_markdown_html};

    #[test]
    fn a_5000_emoji_telegram_reply_is_sent_as_html_of_at_most_4096_utf16_units() {
        let reply = "😀".repeat(5000);
        let chunks = split_markdown_html(&reply, MAX_HTML_LEN);
        for chunk in &chunks {
            assert!(chunk.html.encode_utf16().count() <= MAX_HTML_LEN);
        }
        // 4,000 units of Markdown per chunk, as upstream's 4,000 characters would have been
        // 8,000 units: Telegram would refuse those.
        let units: Vec<usize> = chunks
            .iter()
            .map(|c| c.html.encode_utf16().count())
            .collect();
        assert_eq!(units, [4000, 4000, 2000]);
    }

    #[test]
    fn entities_stay_whole_when_escaping_forces_a_smaller_telegram_split() {
        let md = format!("{}\n{}", "<&>中文🇨🇳".repeat(600), "e\u{301}&".repeat(900));
        let chunks = split_markdown_html(&md, MAX_HTML_LEN);
        assert!(chunks.len() >= 3);
        for chunk in &chunks {
            assert!(chunk.html.encode_utf16().count() <= MAX_HTML_LEN);
            corpus::assert_whole_markup(&chunk.html);
        }
        let markdown: Vec<String> = chunks.into_iter().map(|c| c.markdown).collect();
        corpus::assert_clusters_kept(&md, &markdown, &[]);
    }

    #[test]
    fn a_slack_reply_of_emoji_and_arabic_splits_at_whole_clusters() {
        let md = "👍🏽 مرحبا & ".repeat(600);
        let parts = split_mrkdwn(&md, 2_000);
        assert!(parts.len() >= 3);
        for part in &parts {
            assert!(part.chars().count() <= 2_000);
            corpus::assert_whole_markup(part);
        }
        let escaped = md.replace('&', "&amp;");
        corpus::assert_clusters_kept(&escaped, &parts, &[]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(100))]

        #[test]
        fn telegram_html_chunks_are_within_the_limit_and_whole(
            text in corpus::fenced_text(200),
            max in 60usize..400,
        ) {
            let chunks = split_markdown_html(&text, max);
            for chunk in &chunks {
                prop_assert!(Limit::utf16(max).fits(&chunk.html), "{:?}", chunk.html);
                corpus::assert_whole_markup(&chunk.html);
            }
            let markdown: Vec<String> = chunks.into_iter().map(|c| c.markdown).collect();
            corpus::assert_clusters_kept(&text, &markdown, &['`']);
        }

        #[test]
        fn slack_messages_are_within_the_limit_and_whole(
            text in corpus::fenced_text(200),
            max in 60usize..400,
        ) {
            // Code is sent as written (as upstream), so only the escapes outside it are known:
            // no message ends inside one, and no cluster is cut or lost.
            let parts = split_mrkdwn(&text, max);
            for part in &parts {
                prop_assert!(Limit::code_points(max).fits(part), "{part:?}");
                let tail = part.rfind('&').map_or("", |at| &part[at..]);
                let cut = ["&a", "&am", "&amp", "&l", "&lt", "&g", "&gt"].contains(&tail);
                prop_assert!(!cut, "a cut escape in {part:?}");
            }
            let whole = crate::render::slack::markdown_to_mrkdwn(&text);
            corpus::assert_clusters_kept(&whole, &parts, &[]);
        }
    }
}
