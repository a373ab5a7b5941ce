"""Writes the inputs of the chat channels' conformance tables (`slack_mrkdwn.json`,
`discord_split.json`, …): the shared corpus of model replies in `telegram_html.json` plus each
channel's own cases. Then fill in 0.3.5's answers with `fill_expected.py`:

    python3 tests/conformance/make_channel_tables.py
    /work/ref035/bin/python tests/conformance/fill_expected.py tests/conformance/slack_mrkdwn.json …

A table that exists keeps each case's `deliberate` note (matched by name).
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = "0.3.5 output"


def corpus() -> list:
    """The corpus replies of the Telegram table: (name, Markdown)."""
    with open(os.path.join(HERE, "telegram_html.json"), encoding="utf-8") as f:
        table = json.load(f)
    return [
        (c["name"], c["input"])
        for c in table["cases"]
        if c["source"] == CORPUS and c["function"] == "markdown_to_html"
    ]


CJK_PARAGRAPH = "人工智能正在改变世界。" * 30
EMOJI_LINE = "👩\u200d👩\u200d👧\u200d👦🇨🇳👍🏽" * 20
LONG_CODE = "```python\n" + "".join(f"print('第{i}行 a && b')\n" for i in range(40)) + "```\nDone ✅"

SLACK_EXTRA = [
    ("mentions_channels_and_specials_kept", "Hi <@U0123ABC>, see <#C0456|general> and <!here> & a <b> c > d"),
    ("mention_inside_bold", "**<@U0123ABC> 请看** this"),
    ("mention_with_display_name", "cc <@U0123ABC|alice> and <!subteam^S123|@devs>"),
    ("quote_continuation_lines", "> line one\n> line two\n>\n> after"),
    ("quote_with_list", "> - a\n> - b"),
    ("three_levels_of_bullets", "- a\n  - b\n    - c\n      - d\n\n1. x\n2. y"),
    ("loose_list", "- loose\n\n- list"),
    ("ordered_list_starting_at_three", "3. three\n4. four"),
    ("rule_alone", "---\n\nx"),
    ("link_text_with_pipe", "[a|b](https://x.io/p)"),
    ("autolink_with_query", "<https://x.io/a?b=1&c=2>"),
    ("bare_url_with_query", "see https://x.io/?a=1&b=2 now"),
    ("email_autolink", "mail <me@x.io>"),
    ("relative_link_and_image", "[rel](/p) ![alt](i.png)"),
    ("image_with_title", '![c](https://x.io/c.png "T") ![](https://x.io/d.png "Only title")'),
    ("javascript_link_is_text", "[click](javascript:alert(1))"),
    ("link_with_title_and_cjk_path", '[文档](https://example.com/文档?q=1&x=2 "标题")'),
    ("link_with_spaces_encoded", "[x](<https://x.io/a b>)"),
    ("link_with_percent_and_brackets", "[x](https://x.io/a%20b/[1]/é)"),
    ("link_to_a_chinese_domain", "[官网](https://例子.测试/路径?q=猫) 和 <https://例子.测试/a>"),
    ("link_with_user_port_and_idn", "[y](https://user@bücher.de:8080/x)"),
    ("mailto_to_a_chinese_domain", "[写信](mailto:张@例子.cn)"),
    ("heading_with_bold_inside", "# **Bold** head\n\ntext"),
    ("cjk_bold_before_fullwidth_colon", "**注意：**后面的内容很重要。"),
    ("cjk_bold_after_fullwidth_paren", "（**重点**）和「**引号**」"),
    ("shebang_in_fence", "```python\n#!/bin/sh\nx && y\n```\nafter `a<b`"),
    ("indented_code_block", "    indented\n    code"),
    ("single_and_double_tilde", "~one~ ~~two~~ ~~~three~~~"),
    ("table_then_text", "| a | b |\n|---|---|\n| 1 | 2 |\n\nText"),
    ("table_inside_fence_stays", "```\n| a | b |\n|---|---|\n| 1 | 2 |\n```"),
    ("table_with_empty_header", "| | v |\n|---|---|\n| k | 1 |"),
    ("table_with_link_and_code", "| 名称 | 链接 |\n|---|---|\n| 文档 | [看](https://x.io) |\n| 代码 | `a|b` |"),
    ("emoji_shortcodes_stay", "Done :white_check_mark: :tada:"),
    ("stx_control_character_dropped", "a\x02b\n\n\x02c"),
    ("hard_breaks", "line one  \nline two\\\nline three"),
    ("leftover_double_stars_in_cjk", "这是**很重要**的事"),
    ("leftover_heading_inside_list", "- # heading in item"),
    ("entity_references", "&copy; &nbsp;x &#x1F600; &bogus;"),
    ("many_blank_lines_between_blocks", "a\n\n\n\n\nb\n\n```\ncode\n\n\n\nmore\n```"),
    ("html_comment_and_tags", "<!-- note -->\n<div>x</div>"),
    ("cjk_paragraph", CJK_PARAGRAPH),
    ("emoji_zwj_line", EMOJI_LINE),
    ("rtl_with_marks", "\u200fשלום **עולם** — مرحبا _بك_ 🌍"),
]

SLACK_SPLIT = [
    ("split_cjk_paragraph", CJK_PARAGRAPH, 100),
    ("split_lines_at_newlines", "\n".join(f"第{i}行：**粗体** & <标签>" for i in range(30)), 120),
    ("split_code_block", LONG_CODE, 200),
    ("split_words_at_spaces", " ".join(["word"] * 200), 150),
    ("split_emoji_families", EMOJI_LINE, 50),
    ("split_short_reply_whole", "短回复 🐈", 39000),
    ("split_empty_reply_is_one_space", "", 39000),
    ("split_indented_lines_keep_indent", "\n".join("    " + "缩进" * 20 for _ in range(5)), 50),
    ("split_crlf_lines", "\r\n".join(["line"] * 40), 60),
    ("split_long_link", "see " + "[link](https://x.io/" + "a" * 80 + ") " * 5, 100),
]

DISCORD_SPLIT = [
    ("cjk_paragraph", CJK_PARAGRAPH, 100),
    ("lines_at_newlines", "\n".join(f"第{i}行：**粗体** & <标签>" for i in range(30)), 120),
    ("code_block_cut_as_text", LONG_CODE, 200),
    ("words_at_spaces", " ".join(["word"] * 200), 150),
    ("emoji_families", EMOJI_LINE, 50),
    ("short_reply_whole", "短回复 🐈", 2000),
    ("empty_reply_none", "", 2000),
    ("whitespace_only_reply", "   \n  ", 2000),
    ("leading_whitespace_kept", "\n\n  hello", 2000),
    ("indented_lines_keep_indent", "\n".join("    " + "缩进" * 20 for _ in range(5)), 50),
    ("crlf_lines", "\r\n".join(["line"] * 40), 60),
    ("space_before_newline", ("x" * 49 + " \n") * 3, 50),
    ("blank_lines_dropped_at_cuts", "para one\n\n\n\npara two " * 20, 40),
    ("long_word_cut_hard", "a" * 130, 50),
    ("long_indented_word", "        " + "b" * 100, 50),
    ("at_2000_exactly", "字" * 2000, 2000),
    ("over_2000", "字" * 1999 + " " + "字" * 10, 2000),
    ("rtl_words", ("مرحبا بالعالم " * 30).strip(), 64),
]


FEISHU_EXTRA = [
    ("heading_then_table_then_text", "# 报告\n\n| 项目 | 状态 |\n|---|---|\n| **构建** | ✅ |\n| 测试 | ~~失败~~ 通过 |\n\n总结：一切正常 🎉"),
    ("two_tables_two_cards", "| a | b |\n|---|---|\n| 1 | 2 |\n\n中间\n\n| c |\n|---|\n| 3 |"),
    ("table_with_two_lines_only", "| a | b |\n|---|---|\n"),
    ("indented_table", "  | 名 | 值 |\n  |:--|--:|\n  | *x* | 1 |"),
    ("heading_inside_code_stays", "```md\n# not a heading\n| a |\n|---|\n| 1 |\n```\n\n## 真标题"),
    ("heading_with_markup", "### **粗体** 和 *斜体* 和 ~~删~~"),
    ("empty_heading_marker_runs_on", "#\n\n下一行"),
    ("link_only_short", "看 [文档](https://open.feishu.cn/document) 吧"),
    ("two_links_on_lines", "[甲](https://a.cn)和[乙](http://b.cn/x?y=1)\n\n第二行 [丙](https://c.cn)"),
    ("non_http_link_is_text", "[本地](file:///tmp/a) 和 [相对](/p)"),
    ("long_plain_text", "飞书消息。" * 50),
    ("very_long_plain_text", "飞" * 2001),
    ("single_star_italic_across_lines", "a *b\nc* d"),
    ("lone_stars_are_plain", "5 * 3 = 15"),
    ("bullet_with_leading_blank_line", "\n  - 项目"),
    ("ordered_item", "1. 第一"),
    ("emoji_rtl_plain", "مرحبا 👋 שלום 🇨🇳"),
]

FEISHU_HINTS = [
    ("one_call", 'read_file("a.md")'),
    ("two_calls", 'read_file("a.md"), exec("ls -la, pwd")'),
    ("nested_commas", 'web_search("猫, 狗"), grep(pattern=\'a, b\', path="x")'),
    ("multiline_hint", "exec(\"echo 1\")\nweb_fetch(\"https://x.cn\")"),
    ("blank_hint", "   "),
]

DINGTALK_NAMES = [
    ("plain_cjk_name", "张三"),
    ("markdown_specials", "张 三\n[x](y) *a* #1 <b> a.b-c!d|e~f`g_h{i}j+k"),
    ("long_name_cut_at_80", "王" * 100),
    ("emoji_and_rtl", "👩\u200d💻 مريم"),
    ("whitespace_runs", "  a\t\tb\u3000c  "),
]

DINGTALK_TEXTS = [
    ("group_reply_headed", "  你好 👋  ", "group:cid1", "李四"),
    ("group_reply_escaped_name", "答复", "group:cid1", "*管理员* [x]"),
    ("private_reply_plain", "\n答复\n", "user1", "李四"),
    ("group_without_name", "答复", "group:cid1", None),
    ("group_blank_name", "答复", "group:cid1", "   "),
    ("group_blank_reply", "   ", "group:cid1", "李四"),
]

EMAIL_SUBJECTS = [
    ("plain_subject", "周报", "Re: "),
    ("already_re", "RE: 周报", "Re: "),
    ("re_without_space", "re:周报", "Re: "),
    ("blank_subject", "   ", "Re: "),
    ("custom_prefix", "Plans 🚀", "回复："),
    ("empty_prefix_uses_re", "Plans", ""),
]

EMAIL_BODIES = [
    ("cjk_emoji_reply", "你好，世界！🐈 naïve café\n第二行", []),
    ("crlf_lines", "line one\r\nline two", []),
    ("lone_cr", "a\rb", []),
    ("ends_with_newline", "done\n", []),
    ("empty_reply", "", []),
    ("reply_and_failed_files", "附件如下：\n\n", ["[attachment: 报告.pdf - too large]", "[attachment: b.png - send failed]"]),
    ("blank_reply_and_failed_file", "  \n", ["[attachment: a.txt - send failed]"]),
    ("long_line", "很长的一行" * 100, []),
]


def keep_notes(path: str, cases: list) -> list:
    """Carries each existing case's `deliberate` note over to its new version."""
    if not os.path.exists(path):
        return cases
    with open(path, encoding="utf-8") as f:
        old = {c["name"]: c for c in json.load(f)["cases"]}
    for case in cases:
        note = old.get(case["name"], {}).get("deliberate")
        if note:
            case["deliberate"] = note
    return cases


def write(name: str, area: str, reference: dict, cases: list) -> None:
    path = os.path.join(HERE, name)
    table = {"area": area, "reference": reference, "cases": keep_notes(path, cases)}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(table, f, ensure_ascii=False, indent=2)
        f.write("\n")


def case(name: str, function: str, *args) -> dict:
    out = {"name": name, "source": CORPUS, "function": function}
    if len(args) == 1:
        out["input"] = args[0]
    else:
        out["args"] = list(args)
    out["expected"] = None
    return out


def main() -> None:
    slack = [case(n, "to_mrkdwn", t) for n, t in corpus() + SLACK_EXTRA]
    slack += [case(n, "chunks", t, limit) for n, t, limit in SLACK_SPLIT]
    write(
        "slack_mrkdwn.json",
        "Slack: Markdown to mrkdwn (SlackChannel._to_mrkdwn) and the messages a reply becomes",
        {
            "to_mrkdwn": "adapters_channels:slack_mrkdwn",
            "chunks": "adapters_channels:slack_chunks",
        },
        slack,
    )
    corpus_texts = corpus()
    feishu = [case(f"format_{n}", "format", t) for n, t in corpus_texts + FEISHU_EXTRA]
    feishu += [case(f"cards_{n}", "cards", t) for n, t in corpus_texts + FEISHU_EXTRA if t.strip()]
    feishu += [case(f"post_{n}", "post", t) for n, t in corpus_texts + FEISHU_EXTRA if "](" in t]
    feishu += [case(f"tool_hint_{n}", "tool_hint", t) for n, t in FEISHU_HINTS]
    write(
        "feishu_text.json",
        "Feishu: message type, post body, card elements and tool-hint card (FeishuChannel)",
        {
            "format": "adapters_channels:feishu_format",
            "post": "adapters_channels:feishu_post",
            "cards": "adapters_channels:feishu_cards",
            "tool_hint": "adapters_channels:feishu_tool_hint",
        },
        feishu,
    )
    dingtalk = [case(f"name_{n}", "sender_name", t) for n, t in DINGTALK_NAMES]
    dingtalk += [case(n, "text", c, chat, who) for n, c, chat, who in DINGTALK_TEXTS]
    write(
        "dingtalk_text.json",
        "DingTalk: the Markdown a reply is sent as (its group header and escaped sender name)",
        {
            "sender_name": "adapters_channels:dingtalk_sender_name",
            "text": "adapters_channels:dingtalk_text",
        },
        dingtalk,
    )
    email = [case(f"subject_{n}", "subject", s_, p) for n, s_, p in EMAIL_SUBJECTS]
    email += [case(f"body_{n}", "body", c, f) for n, c, f in EMAIL_BODIES]
    write(
        "email_text.json",
        "Email: the reply's subject and plain body (EmailChannel._reply_subject, send)",
        {
            "subject": "adapters_channels:email_subject",
            "body": "adapters_channels:email_body",
        },
        email,
    )
    write(
        "discord_split.json",
        "Discord: a reply split into messages (split_message at MAX_MESSAGE_LEN)",
        {"split": "adapters_channels:split_message"},
        [case(n, "split", t, limit) for n, t, limit in DISCORD_SPLIT],
    )


if __name__ == "__main__":
    main()
