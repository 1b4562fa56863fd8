"""``kb ingest``'s options, checked before anything is uploaded."""

from __future__ import annotations

import pytest

from kb_dev.cli import main


@pytest.mark.parametrize("flag", ["--force", "--reread"])
def test_a_run_option_without_wait_is_refused_before_any_upload(flag, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KB_STATE_DIR", str(tmp_path / "state"))  # no stack runs there: an upload would fail otherwise
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(b"%PDF-1.4\n")
    assert main(["ingest", str(pdf), flag]) == 2
    said = capsys.readouterr()
    assert "add --wait" in said.err and "uploaded" not in said.out


@pytest.mark.parametrize("pages, read, said", [
    (0, 0, "0 pages, 0 chunks"),
    (6, 6, "6 pages, 4 chunks"),
    (6, 2, "6 pages (2 read by this run, the rest reused), 4 chunks"),
])
def test_the_run_line_says_how_many_pages_this_run_read_only_where_it_reused_some(pages, read, said, capsys):
    from kb_dev.cli.documents import _print_summary

    _print_summary("success", {"documents_indexed": 1, "pages": pages, "pages_read": read,
                               "chunks": 0 if not pages else 4})
    assert said in capsys.readouterr().out


def test_a_relative_state_dir_is_made_absolute_before_any_part_starts(tmp_path, monkeypatch, capsys):
    """weed, Airflow's tasks and the services run in folders of their own: a relative
    KB_STATE_DIR named another folder in each (weed: "Check Meta Folder ... no such file")."""
    import os

    from kb_dev.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KB_STATE_DIR", "state/here")
    main(["status", "--json"])
    assert os.environ["KB_STATE_DIR"] == str(tmp_path / "state" / "here")
