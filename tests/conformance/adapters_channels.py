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
