"""0.3.5's outbound text paths of the chat channels with JSON in and out, for
`slack_mrkdwn.json`, `discord_split.json` and `<channel>_text.json`.

Each wrapper mirrors what the channel's `send` does to a reply's text before it reaches the
platform's API, without a network or a bus.
"""

from nanobot.channels.slack.runtime import SLACK_MAX_MESSAGE_LEN, SlackChannel
from nanobot.utils.helpers import split_message as _split_message


def slack_mrkdwn(text: str) -> str:
    """`SlackChannel._to_mrkdwn`: Markdown (tables first) through slackify-markdown, fixed up."""
    return SlackChannel._to_mrkdwn(text)


def slack_chunks(text: str, limit: int = SLACK_MAX_MESSAGE_LEN) -> list:
    """What `SlackChannel.send` posts for a reply: the mrkdwn, split at `limit` characters."""
    mrkdwn = SlackChannel._to_mrkdwn(text) if text else " "
    return _split_message(mrkdwn, limit)


def split_message(text: str, limit: int) -> list:
    """`nanobot.utils.helpers.split_message` (Discord's splitter, at 2,000)."""
    return _split_message(text, limit)


# Feishu: `FeishuChannel`'s message type, post body, card elements and tool-hint card.
def _feishu():
    from types import SimpleNamespace

    from nanobot.channels.feishu.runtime import FeishuChannel

    channel = FeishuChannel.__new__(FeishuChannel)
    channel.config = SimpleNamespace(tool_hint_prefix="🔧")
    return FeishuChannel, channel


def feishu_format(text: str) -> str:
    cls, _ = _feishu()
    return cls._detect_msg_format(text)


def feishu_post(text: str) -> dict:
    import json

    cls, _ = _feishu()
    return json.loads(cls._markdown_to_post(text))


def feishu_cards(text: str) -> list:
    """The elements of each card `send` posts for an `interactive` reply."""
    cls, channel = _feishu()
    return cls._split_elements_by_table_limit(channel._build_card_elements(text))


def feishu_tool_hint(hint: str) -> str:
    """The markdown of the tool-hint card (prefix `🔧`)."""
    _, channel = _feishu()
    return channel._format_tool_hint_delta(hint.strip())


# DingTalk: the Markdown `DingTalkChannel.send` posts (its group header, as in `send`).
def dingtalk_sender_name(name: str) -> str:
    from nanobot.channels.dingtalk.runtime import _escape_markdown_sender_name

    return _escape_markdown_sender_name(name)


def dingtalk_text(content: str, chat_id: str, sender_name) -> str:
    from nanobot.channels.dingtalk.runtime import _escape_markdown_sender_name

    content = content.strip() if content else ""
    safe = _escape_markdown_sender_name(sender_name) if isinstance(sender_name, str) else ""
    if content and chat_id.startswith("group:") and safe:
        content = f"# @{safe}\n\n{content}"
    return content


# Email: `EmailChannel._reply_subject` and the plain body `send` writes (as in `send`).
def email_subject(subject: str, prefix: str) -> str:
    from types import SimpleNamespace

    from nanobot.channels.email.runtime import EmailChannel

    channel = SimpleNamespace(config=SimpleNamespace(subject_prefix=prefix))
    return EmailChannel._reply_subject(channel, subject)


def email_body(content: str, failed: list) -> str:
    from email.message import EmailMessage

    if failed:
        fallback = "\n".join(failed)
        content = f"{content.rstrip()}\n\n{fallback}" if content.strip() else fallback
    msg = EmailMessage()
    msg.set_content(content)
    return msg.get_content()
