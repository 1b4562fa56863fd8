"""Sparse vectors, snippets and the evaluation harness, without any service."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kb.errors import EvalSetError
from kb_dev.evaluation import Question, load_questions, rank_of
from kb.points import language
from kb.retrieval import snippet
from kb.sparse import SparseEncoder, term_id, tokenize

ZH = "档案扫描分辨率不低于三百点每英寸，彩色档案使用二十四位色深。"
EN = "Replace the hydraulic filter every 500 operating hours; the pressure must stay above two bar."


@pytest.mark.parametrize("tokenizer", ["bigram", "jieba"])
@pytest.mark.parametrize("text", [ZH, EN, ZH + " " + EN])
def test_document_vectors_are_non_empty_sorted_positive_and_stable_across_processes(text, tokenizer):
    enc = SparseEncoder(tokenizer)
    v = enc.encode_document(text)
    assert len(v) > 5 and v.indices == sorted(set(v.indices)) and all(x > 0 for x in v.values)
    # another interpreter (another hash seed) gives the same vector
    code = ("import sys, json; from kb.sparse import SparseEncoder; "
            f"v = SparseEncoder({tokenizer!r}).encode_document(sys.argv[1]); print(json.dumps([v.indices, v.values]))")
    other = subprocess.run([sys.executable, "-c", code, text], capture_output=True, text=True, check=True)
    assert json.loads(other.stdout) == [v.indices, v.values]


def test_tokens_cover_chinese_and_english_and_bm25_saturates():
    assert tokenize("档案扫描") == ["档案", "案扫", "扫描"]
    assert "扫描" in tokenize("档案扫描", "jieba")
    assert tokenize("The Filter, filters and FILTER!") == ["filter", "filters", "filter"]
    enc = SparseEncoder()
    one, many = enc.encode_document("filter pump"), enc.encode_document("filter " * 20 + "pump")
    w = lambda v, t: dict(zip(v.indices, v.values))[term_id(t)]  # noqa: E731
    assert w(one, "filter") < w(many, "filter") < enc.k1 + 1  # grows with tf, bounded by k1 + 1
    assert enc.encode_query("filter filter pump").values == [1.0, 1.0]


def test_signature_names_the_scheme():
    assert SparseEncoder("bigram").signature != SparseEncoder("jieba").signature
    with pytest.raises(ValueError, match="unknown sparse tokenizer"):
        SparseEncoder("whitespace")


def test_snippet_centres_on_the_query_terms():
    text = "Unrelated words about packaging. " * 10 + "Replace the hydraulic filter every 500 hours. " + "More filler text here. " * 10
    s = snippet(text, "how often is the hydraulic filter replaced", width=80)
    assert "hydraulic filter" in s and s.startswith("…") and len(s) < 110
    zh = "无关的内容。" * 30 + ZH + "其他内容。" * 30
    assert "分辨率" in snippet(zh, "扫描分辨率是多少", width=40)


def test_language_and_groups():
    assert language("档案扫描分辨率不低于多少？") == "zh" and language("How often?") == "en"
    assert language("列出内存中所有timer 单元") == "zh"
    assert Question("a.pdf", 1, "怎样列出定时器？", "systemctl list-timers").group == "cross"
    assert Question("a.pdf", 1, "Which command?", "列出内存中所有timer 单元").group == "cross"
    assert Question("a.pdf", 1, "Which command?", "systemctl list-timers").group == "en"


def test_rank_needs_the_right_document_and_page():
    q = Question("a.pdf", 3, "q", "x")
    hits = [{"key": "b.pdf", "pages": [3], "text": "x"}, {"key": "a.pdf", "pages": [2], "text": "x"},
            {"key": "a.pdf", "pages": [3, 4], "text": "x"}]
    assert rank_of(q, hits) == 3 and rank_of(q, hits[:2]) is None


def test_an_answer_over_a_page_break_needs_a_hit_that_holds_both_pages_and_the_whole_answer():
    answer = "We found that a rotated square pen gives a much more satisfying output"
    q = Question("a.pdf", 3, "q", answer, pages=(3, 4))
    assert q.group == "cross-page"
    whole = "... We found that a rotated squ-\nare pen gives a much  more satisfying output, as shown"
    halves = [{"key": "a.pdf", "pages": [3], "text": whole}, {"key": "a.pdf", "pages": [4], "text": whole},
              {"key": "b.pdf", "pages": [3, 4], "text": whole}]
    assert rank_of(q, halves) is None
    # both pages, but a figure's caption read between the halves (tb87fahmy p.6-7, as indexed)
    interrupted = {"key": "a.pdf", "pages": [3, 4],
                   "text": "We found that a rotated Figure 3: Effect of the pen. square pen gives a much more satisfying output"}
    assert rank_of(q, halves + [interrupted]) is None
    # whitespace, a line break and the hyphen of a word cut over the break do not matter
    assert rank_of(q, halves + [interrupted, {"key": "a.pdf", "pages": [2, 3, 4], "text": whole}]) == 5


@pytest.mark.parametrize("line, message", [
    ("not json", "not JSON"),
    ('{"doc": "a.pdf", "page": "3", "question": "q", "answer_substring": "x"}', "'page' must be a int"),
    ('{"doc": "a.pdf", "page": 0, "question": "q", "answer_substring": "x"}', "page must be >= 1"),
    ('{"doc": "a.pdf", "page": 1, "question": "q"}', "'answer_substring' must be a str"),
    ('{"doc": "a.pdf", "page": 1, "pages": [1, 3], "question": "q", "answer_substring": "x"}', "consecutive"),
    ('{"doc": "a.pdf", "page": 2, "pages": [1, 2], "question": "q", "answer_substring": "x"}', "consecutive"),
])
def test_bad_question_sets_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"doc": "a.pdf", "page": 1, "question": "q", "answer_substring": "x"}\n' + line + "\n")
    with pytest.raises(EvalSetError, match=f"qa.jsonl:2: .*{message}"):
        load_questions(path)


def test_the_projects_eval_set_loads_and_has_every_group():
    from pathlib import Path

    questions = load_questions(Path(__file__).resolve().parents[2] / "include" / "eval" / "qa.jsonl")
    groups = [q.group for q in questions]
    assert len(questions) >= 40 and groups.count("en") >= 20 and groups.count("zh") >= 20 and "cross" in groups
    assert groups.count("cross-page") >= 20
