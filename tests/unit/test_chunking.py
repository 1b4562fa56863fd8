"""Chunking a document read from Markdown-only page results (``kb.reading`` reads those as
paragraphs without boxes): sizes, sections, sentence and window splits."""

from kb.chunking import chunk_document
from kb.reading import read_document
from ocr_engine.api.pages import PageResult


def chunk_pages(pages, count, **kw):
    return chunk_document(read_document([PageResult(page=n, markdown=md) for n, md in pages]), count, **kw)


def words(text: str) -> int:
    return len(text.split())


def test_headings_split_chunks_and_label_them():
    pages = [
        (1, "# Manual\n\n## Install\n\nBolt it down firmly.\n\nCheck the level."),
        (2, "## Maintain\n\nGrease the bearings."),
    ]
    chunks = chunk_pages(pages, words, max_tokens=50)
    assert [c.section for c in chunks] == ["Manual / Install", "Manual / Maintain"]
    assert chunks[0].pages == [1] and chunks[1].pages == [2]
    assert "Grease" in chunks[1].text and "Bolt" not in chunks[1].text


def test_a_subsection_is_labelled_with_the_section_it_falls_under():
    pages = [
        (1, "# The xtable Gallery\n\n## 2 Gallery\n\n### 2.5 glm\n\nA logistic model.\n\n### 2.6 prcomp\n\nLoadings."),
        (2, "## 3 Helper functions\n\nAlignment and digits."),
    ]
    chunks = chunk_pages(pages, words, max_tokens=50)
    assert [c.section for c in chunks] == ["The xtable Gallery / 2 Gallery / 2.5 glm",
                                           "The xtable Gallery / 2 Gallery / 2.6 prcomp",
                                           "The xtable Gallery / 3 Helper functions"]


def test_a_page_break_closes_the_chunk_but_keeps_the_section():
    pages = [(1, "## Part\n\nFirst half of the story."), (2, "Second half of the story.")]
    chunks = chunk_pages(pages, words, max_tokens=50)
    assert [c.pages for c in chunks] == [[1], [2]]
    assert chunks[1].section == "Part"


def test_no_chunk_exceeds_the_budget_and_no_text_is_lost():
    sentence = "The pump must be primed before it starts."
    para = " ".join([sentence] * 40)
    chunks = chunk_pages([(3, para)], words, max_tokens=30, overlap_sentences=0)
    assert len(chunks) > 1
    assert all(c.tokens <= 30 for c in chunks)
    assert sum(c.text.count("primed") for c in chunks) == 40
    assert all(c.pages == [3] for c in chunks)


def test_chinese_without_spaces_is_split_at_sentence_ends():
    para = "档案扫描分辨率不低于三百点每英寸。" * 30
    chunks = chunk_pages([(1, para)], len, max_tokens=60, overlap_sentences=0)
    assert len(chunks) > 1
    assert all(c.tokens <= 60 for c in chunks)
    assert "".join(c.text for c in chunks).count("三百点") == 30


def test_chunks_are_deterministic():
    pages = [(i, f"## S{i}\n\n" + "word " * 90) for i in range(1, 5)]
    a = chunk_pages(pages, words, max_tokens=40)
    b = chunk_pages(pages, words, max_tokens=40)
    assert [(c.text, c.pages) for c in a] == [(c.text, c.pages) for c in b]


def chars(text: str) -> int:
    return len(text)


def test_a_paragraph_long_heading_is_clipped_so_chunks_stay_within_the_limit():
    # seen in the Debian Reference: the text layer marks a whole paragraph as a heading
    heading = "## " + "Secure password on the Internet and more words " * 10
    chunks = chunk_pages([(1, heading + "\n\nShort body text.")], words, max_tokens=40)
    assert chunks and all(c.tokens <= 40 for c in chunks)
    assert chunks[0].section.endswith("…") and words(chunks[0].section) <= 10


def test_a_word_longer_than_the_limit_is_cut_and_nothing_is_lost():
    cjk = "档案扫描分辨率不低于三百点每英寸" * 8  # 128 characters between two spaces
    chunks = chunk_pages([(1, f"before {cjk} after")], chars, max_tokens=40, overlap_sentences=0)
    assert all(c.tokens <= 40 for c in chunks)
    assert "".join(c.text.replace(" ", "") for c in chunks) == f"before{cjk}after"
