from kb.points import SearchFilter, key_prefixes
from kb.retrieval import mark_terms


def test_a_key_is_found_under_each_of_its_folders_and_by_itself():
    assert key_prefixes("corpus/scanned/a.pdf") == ["corpus/", "corpus/scanned/", "corpus/scanned/a.pdf"]
    assert key_prefixes("a.pdf") == ["a.pdf"]


def test_matched_terms_are_marked_and_everything_else_is_escaped():
    html = mark_terms("Replace the <b>impeller</b> seal; SEALS are not seal-less.", "impeller seal?")
    assert html == ("Replace the &lt;b&gt;<mark>impeller</mark>&lt;/b&gt; <mark>seal</mark>; SEALS are not "
                    "<mark>seal</mark>-less.")
    assert mark_terms("档案扫描分辨率", "扫描分辨率") == "档案<mark>扫描分辨率</mark>"
    assert mark_terms("nothing here", "pump") == "nothing here"


def test_an_empty_filter_is_no_filter():
    assert not SearchFilter() and SearchFilter(language="zh") and SearchFilter(pages=(1, 2))
