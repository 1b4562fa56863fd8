"""How a message is written for each channel that carries one: a mail (HTML), a Slack-compatible
webhook (mrkdwn), a review request (Markdown). User-controlled text (a document's key, an
error message quoting it) is always text there, never markup: one escaping function per
markup, and one renderer per channel that every sender uses.

A file named ``<!channel><https://example.org|Open review>.pdf`` must not ping a Slack
channel nor plant a link; ``**x**](http://...)`` must not become a Markdown link in a
review request; ``<script>`` must not run in a mail.
"""

from __future__ import annotations

import html as _html
import re
from typing import Any

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~=&])")
SLACK_SECTION_CHARS = 2900  # Slack's section text limit is 3,000
SLACK_HEADER_CHARS = 150


def slack_text(text: object) -> str:
    """Slack mrkdwn: ``&``, ``<`` and ``>`` are the control characters (mentions, links,
    channel pings all start with ``<``); Slack's own rule is to send them as entities."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_text(text: object) -> str:
    """Markdown (CommonMark and GitHub's): every punctuation character with a meaning gets a
    backslash, and a line break becomes a space, so the text stays one literal run."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).splitlines()))


def html_text(text: object) -> str:
    return _html.escape(str(text), quote=True)


def html_body(subject: str, lines: list[str]) -> str:
    """A mail: the subject, then the lines as a list."""
    items = "".join(f"<li>{html_text(line)}</li>" for line in lines)
    return f"<p>{html_text(subject)}</p><ul>{items}</ul>"


def slack_payload(subject: str, lines: list[str], data: dict[str, Any]) -> dict[str, Any]:
    """Slack's incoming-webhook shape: ``text`` (what compatible receivers read, and Slack's
    notification), a header and one section; ``kb`` carries the facts for machines, as JSON."""
    text = "\n".join(slack_text(line) for line in lines)
    return {
        "text": f"{slack_text(subject)}\n{text}",
        "blocks": [
            # plain_text is never parsed for mentions or links
            {"type": "header", "text": {"type": "plain_text", "text": subject[:SLACK_HEADER_CHARS]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": text[:SLACK_SECTION_CHARS]}},
        ],
        "kb": data,
    }
