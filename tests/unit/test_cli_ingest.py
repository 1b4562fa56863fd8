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
