"""User-controlled text in every channel's markup stays text: a hostile document name in a
quarantine alert, a pages alert, the retire guard's alert, a deadline alert's prefix, a task
failure alert and a review request (Markdown, rendered by a real CommonMark renderer)."""

from __future__ import annotations

import re

import pytest
from markdown_it import MarkdownIt

from kb import channels
from kb.pipeline.alerts import DeadlineMissed, RetireHeldAlert
from kb.pipeline.messages import RetireHold
from kb.quality.alerts import Alert

HOSTILE = [
    "<!channel><https://example.org|Open review>.pdf",
    "<@U024BE7LH> <!here> &amp; <mailto:x@example.org|mail>.pdf",
    "**bold**](https://example.org)[click](https://example.org).pdf",
    "<script>alert(1)</script><img src=x onerror=alert(2)>.pdf",
]
# what Slack would read as a mention, a channel ping, a link or a mail link: `<` opens each
SLACK_CONTROL = re.compile(r"<[!@#a-z]")


def _messages(key: str):
    record = {"doc_id": "d1", "key": key, "version_id": "v1", "run_id": "run <!everyone>", "code": "validation_failed",
              "message": f"{key} has 2 empty pages", "record": "quarantine/d1/v1.json"}
    yield Alert.from_record(record, "kb-artifacts")
    yield Alert.from_record({**record, "event": "pages-failed", "failed_pages": [{"page": 2, "reason": key}]},
                            "kb-artifacts")
    hold = RetireHold(bucket="inbox", prefix=key, would_retire=3, indexed=4, max_share=0.5, allowed=2, listed=1,
                      keys=[key, "ok.pdf"], fingerprint="f")
    yield RetireHeldAlert(hold, "run-1")
    yield DeadlineMissed("kb_ingest", "run-2", 3600.0, None, None, None, "2026-12-04T00:00:00+00:00", 4000.0,
                         "running", key)


@pytest.mark.parametrize("key", HOSTILE)
def test_every_alert_keeps_a_hostile_name_as_text_in_slack_and_in_mail(key):
    for message in _messages(key):
        payload = message.slack()
        texts = [payload["text"]] + [b["text"]["text"] for b in payload["blocks"] if b["text"]["type"] == "mrkdwn"]
        for text in texts:
            assert not SLACK_CONTROL.search(text), (type(message).__name__, text)
            assert ">" not in text, (type(message).__name__, text)
        # the name is still all there, as entities, and the machine-readable part is untouched
        assert channels.slack_text(key) in payload["text"]
        assert key in str(payload["kb"])
        mail = message.html()
        assert "<script" not in mail and "<img" not in mail and "<!channel" not in mail
        assert channels.html_text(key) in mail


@pytest.mark.parametrize("key", HOSTILE)
def test_a_review_request_in_markdown_shows_a_hostile_name_as_text(key):
    """What kb_review's request body does with the pending document's fields."""
    body = f"**{channels.markdown_text(key)}** was quarantined: {channels.markdown_text(key + ' <b>x</b>')}"
    rendered = MarkdownIt("commonmark").render(body)
    assert "<a " not in rendered and "<script" not in rendered and "<img" not in rendered
    assert rendered.count("<strong>") == 1  # only the body's own emphasis
    plain = re.sub(r"<[^>]+>", "", rendered).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") \
        .replace("&quot;", '"')
    assert key in plain


def test_slack_text_leaves_ordinary_names_alone():
    assert channels.slack_text("manuals/aquila-p200 (rev. 3).pdf") == "manuals/aquila-p200 (rev. 3).pdf"
