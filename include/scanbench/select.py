"""How include/scanbench/documents.json was made: the mechanical parts.

The scan benchmark of issue 53 (section 4) is a list of born-digital PDFs that Debian
packages ship, of two kinds:

* ``two-column``: papers, articles, newsletters and exams set in two columns, one
  document per LaTeX class or producer (texlive-publishers-doc and other TeX Live doc
  packages, groff's mom);
* ``tables``: R vignettes and TeX documents with typeset tables.

What this script does, and what it does not:

* the two-column page test (``two_column_page``): on the page's words
  (PyMuPDF ``get_text("words")``), group words into the lines PyMuPDF reports
  (block, line); for a middle (of the page, or of the text area: leftmost word start,
  rightmost word end) a line lies in the left column when it ends before the middle, in
  the right column when it starts after it, else it spans. A page is two-column when at
  least 12 lines lie on each side and fewer than 30 % of its lines span, around the
  middle of the page or around the middle of the text area;
* the pages of a two-column document: the first ``MAX_TWO_COLUMN_PAGES`` pages that pass
  the test, leaving out the pages in ``exclude`` (pages whose two columns are only an
  index or a bibliography, or that hold next to no text, judged by eye);
* the pages of a tables document are chosen by eye (pages with typeset tables, plus at
  least one page without a table) and are written out below;
* the split: ``frozen`` when sha256(file name) as an integer is divisible by 3, else
  ``tuning``; computed once, never chosen;
* digests and page counts of the PDFs.

It does not download anything: give it a folder holding the PDFs under their ``file``
names (``--docs``); ``--debs`` optionally a folder with the .deb files to check their
sha256. ``--write`` writes documents.json; without it, the script checks that
documents.json says what it computes. The documents were chosen from the PDFs
themselves (PyMuPDF and a look at each page), never with the project's readers.
"""
from __future__ import annotations

import os
import sys

# This file's name shadows the standard library's ``select`` (which PyMuPDF needs through
# multiprocessing) when it is run as a script: take its folder off the import path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(os.path.abspath(__file__))]

import argparse
import collections
import hashlib
import json

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_TWO_COLUMN_PAGES = 4
MIN_SIDE_LINES = 12
MAX_SPANNING_SHARE = 0.3

TL = "2022.20230122"
DEBS = {
    "texlive-publishers-doc": (f"{TL}-4", "9b632913d4b0d0871bef41c414fc7ce1167e3bacb55b140901df0c95df1c5765"),
    "texlive-latex-extra-doc": (f"{TL}-4", "d222fc748216b216c5659078e8b9b2537242f5fd63af14957f999d33164ecb27"),
    "texlive-pictures-doc": (f"{TL}-3", "9f24a348a9461952e09cac3a2c5e1617f00e9054bea1ab1a124a724cc7f40751"),
    "texlive-plain-generic": (f"{TL}-4", "6c30e7a3e30734b9889a968221a5ff933142dcaf4e59976534daa3c525aa1f30"),
    "texlive-formats-extra": (f"{TL}-4", "375eb1406ad0bbdf783f9d161f4ae3aa5654786eb8ac8e7c53a1b017a41d4623"),
    "texlive-lang-chinese": (f"{TL}-1", "9cfa07bd44e7b9098e26f0ecac1b5ad210d2249d474c8074d53de92d650b0ec0"),
    "groff": ("1.22.4-10", "c30d56dad45ab7fe8d57f545381203297b23fabd7475e5acd133f15dcaef2355"),
    "r-cran-pscl": ("1.5.5-1+b1", "646b2c6c04fc385f50efe9709f0ef64302fe7e07bb1953e424fb65e8bb43ac47"),
    "r-cran-lme4": ("1.1-31-1", "232c90c0504309ee64749af8ca8359e999a00e6dc0c1abf697640f1c16ecb4aa"),
    "r-cran-survival": ("3.5-3-1", "f7b474e37620b54bd0112b3847bbad0a6b75b9c2121d6936548dd74ebd4003d5"),
    "r-cran-coin": ("1.4-2-1+b1", "391bda13701acba6329f821cfde3571827bd7a4cff91b66511945f1c9e7fa9aa"),
    "r-cran-quantreg": ("5.94-1", "c175f93533c17697dacb12642e1302814307c19617840abf253cb8c34fef5e6a"),
    "r-cran-vcd": ("1:1.4-11-1", "959639853b06a9056b4494e145bf84394a329805645e80c4384091323b6c6ae4"),
    "r-cran-effects": ("4.2.2-1", "2735e1b0ed99fd3db4af8dd812ad97213845a5a3f581d2f8cf1d6efda0fecbe4"),
    "r-cran-sandwich": ("3.0-2-1", "a90e7d3c69c70a6d73e4bc63d1f20eae3b4a73866d5266246dd5b3d980c60d79"),
    "r-cran-psych": ("2.2.9-1", "14d26be4a29b02fcc30b62251813ae4ecf42966b49d890ef407fe9bee040c74d"),
}

TD = "/usr/share/doc/texlive-doc/"
RS = "/usr/lib/R/site-library/"
PUB = "texlive-publishers-doc"
EXTRA = "texlive-latex-extra-doc"

# file, package, path in the package, class or producer, language, licence (the
# package's copyright file: TeX Live's Licenses list, the R packages' copyright),
# and for two-column documents the pages left out by eye.
TWO_COLUMN = [
    ("aguplus.pdf", PUB, TD + "latex/aguplus/aguplus.pdf", "aguplus", "en", "LPPL", []),
    ("anonymous-acm.pdf", PUB, TD + "latex/anonymous-acm/anonymous-acm.pdf", "anonymous-acm (acmart sigconf)", "en", "LPPL-1.3", []),
    ("asmeconf-template.pdf", PUB, TD + "latex/asmeconf/asmeconf-template.pdf", "asmeconf", "en", "MIT", []),
    ("asmejour-template.pdf", PUB, TD + "latex/asmejour/asmejour-template.pdf", "asmejour", "en", "MIT", []),
    ("confproc-p_001.pdf", PUB, TD + "latex/confproc/example/papers/p_001.pdf", "confproc (DAFx-06 paper)", "en", "LPPL", []),
    ("elbioimp.pdf", PUB, TD + "latex/elbioimp/elbioimp.pdf", "elbioimp", "en", "LPPL", [5]),
    ("elsarticle-elstest-5p.pdf", PUB, TD + "latex/elsarticle/elstest-5p.pdf", "elsarticle (5p)", "en", "LPPL-1.2", []),
    ("imac.pdf", PUB, TD + "latex/imac/imac.pdf", "imac", "en", "GPL", []),
    ("jacow-A4.pdf", PUB, TD + "latex/jacow/JACoW_LaTeX_A4.pdf", "jacow", "en", "LPPL-1.3c", []),
    ("mnras_guide.pdf", PUB, TD + "latex/mnras/mnras_guide.pdf", "mnras", "en", "LPPL-1.3", []),
    ("nrc-userguide.pdf", PUB, TD + "latex/nrc/userguide.pdf", "nrc (nrc2)", "en", "LPPL", []),
    ("oup-authoring-template.pdf", PUB, TD + "latex/oup-authoring-template/oup-authoring-template.pdf", "oup-authoring-template", "en", "LPPL-1.2", []),
    ("procIAGssymp.pdf", PUB, TD + "latex/prociagssymp/TestprocIAGssymp.pdf", "prociagssymp", "en", "LPPL", []),
    ("quantum-template.pdf", PUB, TD + "latex/quantumarticle/quantum-template.pdf", "quantumarticle", "en", "LPPL-1.3c", []),
    ("tugboat-ltubguid.pdf", PUB, TD + "latex/tugboat/ltubguid.pdf", "tugboat (ltugboat)", "en", "LPPL-1.3", []),
    ("tugboat-plain-tubguide.pdf", PUB, TD + "plain/tugboat-plain/tubguide.pdf", "tugboat-plain (plain TeX)", "en", "other-free (TeX Live: tugboat-plain)", []),
    ("ieeepes_doc.pdf", PUB, TD + "latex/ieeepes/ieeepes_doc.pdf", "ieeepes", "en", "LPPL", []),
    ("philosophersimprint-sample.pdf", PUB, TD + "latex/philosophersimprint/sample.pdf", "philosophersimprint", "en", "LPPL-1.3", []),
    ("hgbarticle-main.pdf", PUB, TD + "latex/hagenberg-thesis/examples/HgbArticle/main.pdf", "hgbarticle (hagenberg-thesis)", "en", "CC-BY-4.0", []),
    ("hfutexam.pdf", PUB, TD + "latex/hfutexam/hfutexam.pdf", "hfutexam", "zh", "LPPL-1.3c", []),
    ("hfutexam_cankaodaan.pdf", PUB, TD + "latex/hfutexam/hfutexam_cankaodaan.pdf", "hfutexam (answer key)", "zh", "LPPL-1.3c", []),
    ("jnuexam-exam-a-a3input.pdf", PUB, TD + "latex/jnuexam/exam-a-a3input.pdf", "jnuexam", "zh", "LPPL-1.3", []),
    ("ltnews35.pdf", EXTRA, TD + "latex-dev/base/ltnews35.pdf", "ltnews (LaTeX News)", "en", "LPPL-1.3c", []),
    ("emulateapj-sample.pdf", EXTRA, TD + "latex/emulateapj/sample.pdf", "emulateapj", "en", "LPPL", [5, 7]),
    ("ftnright.pdf", EXTRA, TD + "latex-dev/tools/ftnright.pdf", "ltxdoc + ftnright", "en", "LPPL-1.3c", []),
    ("grid.pdf", EXTRA, TD + "latex/grid/grid.pdf", "article [twocolumn]", "en", "LPPL", []),
    ("flowfram-sample-article.pdf", EXTRA, TD + "latex/flowfram/samples/sample-article.pdf", "article + flowfram frames", "en", "LPPL-1.3", []),
    ("hvfloat-default2s2c.pdf", "texlive-pictures-doc", TD + "latex/hvfloat/default2s2c.pdf", "scrartcl [twoside,twocolumn]", "en", "LPPL", []),
    ("newsletr-newssamp.pdf", "texlive-plain-generic", TD + "plain/newsletr/newssamp.pdf", "newsletr (plain TeX)", "en", "other-free (TeX Live: newsletr)", []),
    ("startex-ideas.pdf", "texlive-formats-extra", TD + "otherformats/startex/ideas.pdf", "StarTeX format", "en", "public domain", []),
    ("groff-mom-sample_docs.pdf", "groff", "/usr/share/doc/groff-base/examples/mom/sample_docs.pdf.gz", "groff mom (gunzipped)", "en", "GPL-3+", []),
]

# file, package, path, class or producer, language, licence, pages chosen by eye
TABLES = [
    ("pscl-countreg.pdf", "r-cran-pscl", RS + "pscl/doc/countreg.pdf", "R vignette (pscl, JSS style)", "en", "GPL-2", [2, 3, 17, 24]),
    ("lme4-lmer.pdf", "r-cran-lme4", RS + "lme4/doc/lmer.pdf", "R vignette (lme4, JSS style)", "en", "GPL", [2, 5, 7, 8]),
    ("survival-validate.pdf", "r-cran-survival", "/usr/lib/R/library/survival/doc/validate.pdf", "R vignette (survival)", "en", "GPL-2", [2, 3, 11, 14, 20]),
    ("survival-adjcurve.pdf", "r-cran-survival", "/usr/lib/R/library/survival/doc/adjcurve.pdf", "R vignette (survival)", "en", "GPL-2", [3, 4, 5]),
    ("coin-MAXtest.pdf", "r-cran-coin", RS + "coin/doc/MAXtest.pdf", "R vignette (coin)", "en", "GPL-2", [2, 3, 4, 6]),
    ("quantreg-crq.pdf", "r-cran-quantreg", RS + "quantreg/doc/crq.pdf", "R vignette (quantreg)", "en", "GPL-2+", [16, 17, 19]),
    ("vcd-strucplot.pdf", "r-cran-vcd", RS + "vcd/doc/strucplot.pdf", "R vignette (vcd, JSS style)", "en", "GPL-2", [2, 3, 7]),
    ("effects-functions-supported.pdf", "r-cran-effects", RS + "effects/doc/functions-supported-by-effects.pdf", "R vignette (effects)", "en", "GPL-2+", [2, 4, 6]),
    ("sandwich-CL.pdf", "r-cran-sandwich", RS + "sandwich/doc/sandwich-CL.pdf", "R vignette (sandwich, JSS style)", "en", "GPL-2", [21, 22]),
    ("psych-intro.pdf", "r-cran-psych", RS + "psych/doc/intro.pdf", "R vignette (psych)", "en", "GPL-2+", [42, 43]),
    ("texproposal-CQU-Example.pdf", "texlive-lang-chinese", TD + "latex/texproposal/figures/CQU-Example.pdf", "CQUThesis (ctexbook)", "zh", "other-free (TeX Live: texproposal)", [18, 19, 20, 21, 22]),
    ("latex-notes-zh-cn.pdf", "texlive-lang-chinese", TD + "generic/latex-notes-zh-cn/latex-notes-zh-cn.pdf", "ctexbook (LaTeX notes)", "zh", "LPPL-1.3", [24, 25, 26]),
]


def split_of(file: str) -> str:
    """frozen for one file name in three, by its sha256; never chosen by hand."""
    return "frozen" if int(hashlib.sha256(file.encode()).hexdigest(), 16) % 3 == 0 else "tuning"


def side_counts(page, mid: float) -> tuple[int, int, int]:
    """(left, right, spanning) counts of the page's lines around the abscissa ``mid``."""
    lines = collections.defaultdict(list)
    for w in page.get_text("words"):
        lines[(w[5], w[6])].append(w)
    left = right = span = 0
    for ws in lines.values():
        x0 = min(w[0] for w in ws)
        x1 = max(w[2] for w in ws)
        if x1 < mid:
            left += 1
        elif x0 > mid:
            right += 1
        else:
            span += 1
    return left, right, span


def two_column_page(page) -> bool:
    """Two columns around the middle of the page or around the middle of the text area
    (a two-sided layout shifts the text block; marginal notes widen it)."""
    words = page.get_text("words")
    if not words:
        return False
    mids = (page.rect.x0 + page.rect.width / 2,
            (min(w[0] for w in words) + max(w[2] for w in words)) / 2)
    for mid in mids:
        left, right, span = side_counts(page, mid)
        total = left + right + span
        if left >= MIN_SIDE_LINES and right >= MIN_SIDE_LINES and span < MAX_SPANNING_SHARE * total:
            return True
    return False


def two_column_pages(doc, exclude=()) -> list[int]:
    out = []
    for i in range(doc.page_count):
        if i + 1 in exclude:
            continue
        if two_column_page(doc[i]):
            out.append(i + 1)
        if len(out) == MAX_TWO_COLUMN_PAGES:
            break
    return out


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build(docs_dir: str, debs_dir: str | None = None) -> dict:
    import pymupdf

    out = []
    for kind, rows in (("two-column", TWO_COLUMN), ("tables", TABLES)):
        for file, package, path, cls, lang, licence, extra in rows:
            pdf = os.path.join(docs_dir, file)
            doc = pymupdf.open(pdf)
            pages = two_column_pages(doc, extra) if kind == "two-column" else list(extra)
            version, deb_sha = DEBS[package]
            if debs_dir:
                for name in os.listdir(debs_dir):
                    if name.startswith(package + "_") and name.endswith(".deb"):
                        got = sha256_file(os.path.join(debs_dir, name))
                        if got != deb_sha:
                            raise SystemExit(f"{name}: sha256 {got} != {deb_sha}")
            out.append({
                "file": file, "package": package, "version": version, "deb_sha256": deb_sha,
                "path": path, "sha256": sha256_file(pdf), "pages_total": doc.page_count,
                "pages": pages, "kind": kind, "class": cls, "language": lang,
                "licence": licence, "split": split_of(file),
            })
            if file in READ_BEFORE_SPLIT:  # counts as tuning, whatever its hash says
                out[-1].update(split="tuning", split_why=READ_BEFORE_SPLIT[file])
    return {"documents": out}


# Documents read while the layout model's rules were first tried, before this list existed: the
# hash put them in frozen, but a frozen document must be one no rule was chosen on.
READ_BEFORE_SPLIT = {
    file: ("frozen by its hash, but read before the list was drawn: its pages were the first the layout model's "
           "rules were tried and debugged on (jacow) or measured on (aguplus), so it counts as tuning")
    for file in ("jacow-A4.pdf", "aguplus.pdf")
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", required=True, help="folder with the PDFs under their file names")
    ap.add_argument("--debs", help="folder with the .deb files, to check their sha256")
    ap.add_argument("--write", action="store_true", help="write documents.json")
    a = ap.parse_args(argv)
    data = build(a.docs, a.debs)
    target = os.path.join(HERE, "documents.json")
    text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    if a.write:
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        with open(target, encoding="utf-8") as f:
            if json.load(f) != data:
                print("documents.json differs from what select.py computes", file=sys.stderr)
                return 1
    counts = collections.Counter((d["kind"], d["split"]) for d in data["documents"])
    for (kind, split), n in sorted(counts.items()):
        print(f"{kind:10} {split:6} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
