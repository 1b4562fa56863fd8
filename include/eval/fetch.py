"""Fetch the evaluation PDFs from their Debian packages and check them.

    python include/eval/fetch.py [--dest .kb/eval-docs] [--debs DIR] [--scanbench-cache .kb/scanbench]
                                 [--questions include/eval/qa.jsonl]

The Debian Reference: uses ``apt-get download`` (no root needed) unless ``--debs`` names a
folder that already holds the two .deb files; unpacks them with ``dpkg-deb -x``; copies the
PDFs to ``--dest`` and checks each sha256 against SOURCES.md's.

The scan benchmark's documents that questions name (``"doc": "scanbench/<name>.pdf"`` or
``"scanbench/<name>.scan.pdf"``, issue 53): each original is fetched as ``kb bench scans``
fetches it (``kb_dev.scanbench.fetch`` into ``--scanbench-cache``, checked against the sha256
in ``include/scanbench/documents.json``); then ``--dest/scanbench/<name>.pdf`` is the PDF of
the document's used pages (``kb_dev.scanbench.used_pages``: the pages ``documents.json``
lists, renumbered 1..k, text layer kept; the questions' page numbers are this PDF's) and
``--dest/scanbench/<name>.scan.pdf`` its image-only copy (``kb_dev.scanbench.scanned`` at
``SCANBENCH_SKEW`` degrees, with the document's own faults). Neither made file is
byte-for-byte stable (PDF ids), so only the originals are checked by digest.
``kb ingest .kb/eval-docs/scanbench --prefix scanbench --wait`` puts them at the keys the
questions name. Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "2.100"
PDFS = {
    "debian-reference.en.pdf": ("debian-reference-en", "32775deeca0770ac25282b0c894cbaae83f4dd4ab00e891b94e8f009c0366728"),
    "debian-reference.zh-cn.pdf": ("debian-reference-zh-cn", "93697b9d4a024eaf5adb2def25a646740fad405cb245032a6414222ae0e71bb1"),
}
QUESTIONS = Path(__file__).resolve().parent / "qa.jsonl"
SCANBENCH = "scanbench/"  # the folder under --dest, and the key prefix of the questions' doc
SCANBENCH_SKEW = 1.0  # degrees: the image-only copies the questions are asked of


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(dest: Path, debs: Path | None = None) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, (package, digest) in PDFS.items():
            target = dest / name
            if target.exists() and sha256(target) == digest:
                out.append(target)
                continue
            found = sorted((debs or work).glob(f"{package}_*.deb"))
            if not found:
                subprocess.run(["apt-get", "download", f"{package}={VERSION}"], cwd=work, check=True)
                found = sorted(work.glob(f"{package}_*.deb"))
            unpacked = work / package
            subprocess.run(["dpkg-deb", "-x", str(found[-1]), str(unpacked)], check=True)
            shutil.copyfile(unpacked / "usr/share/debian-reference" / name, target)
            if sha256(target) != digest:
                raise SystemExit(f"{name}: sha256 {sha256(target)} is not the one the questions were written for ({digest})")
            out.append(target)
    return out


def scanbench_file(doc: str) -> str | None:
    """The scan benchmark's file (its ``documents.json`` name) a question's ``doc`` is about,
    born-digital or image-only copy; None for a document of another source."""
    from kb_dev.corpus import original_of  # the one rule for an image-only copy's name

    if not doc.startswith(SCANBENCH):
        return None
    name = doc.removeprefix(SCANBENCH)
    return original_of(name) or name


def scanbench_files(questions: Path = QUESTIONS) -> list[str]:
    """The scan benchmark's files that the question set names, in the order of first mention."""
    names = (scanbench_file(json.loads(line)["doc"]) for line in questions.read_text(encoding="utf-8").splitlines()
             if line.strip())
    return list(dict.fromkeys(n for n in names if n))


def fetch_scanbench(dest: Path, cache: Path, files: list[str], echo=print) -> list[Path]:
    """For each file: ``dest/scanbench/<name>.pdf`` (its used pages) and ``<name>.scan.pdf``
    (their image-only copy at SCANBENCH_SKEW)."""
    from kb_dev import scanbench
    from kb_dev.corpus import SCAN_SUFFIX

    docs = {d.file: d for d in scanbench.documents()}
    unknown = [f for f in files if f not in docs]
    if unknown:
        raise SystemExit(f"not in include/scanbench/documents.json: {', '.join(unknown)}")
    chosen = [docs[f] for f in files]
    originals = scanbench.fetch(cache, chosen, echo)
    folder = dest / SCANBENCH
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for doc in chosen:
        if sha256(originals[doc.file]) != doc.sha256:
            raise SystemExit(f"{originals[doc.file]}: sha256 is not documents.json's")
        born = scanbench.used_pages(originals[doc.file], doc.pages)
        target = folder / doc.file
        target.write_bytes(born)
        scan = folder / (doc.file.removesuffix(".pdf") + SCAN_SUFFIX)
        scan.write_bytes(scanbench.scanned(doc, born, SCANBENCH_SKEW))
        out += [target, scan]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path, default=Path(".kb/eval-docs"))
    parser.add_argument("--debs", type=Path, default=None, help="a folder with the .deb files already downloaded")
    parser.add_argument("--scanbench-cache", type=Path, default=Path(".kb/scanbench"),
                        help="where the scan benchmark's originals and .debs are kept (as kb bench scans --dest)")
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    args = parser.parse_args()
    for path in fetch(args.dest, args.debs):
        print(f"ok {path} ({path.stat().st_size} bytes)")
    for path in fetch_scanbench(args.dest, args.scanbench_cache, scanbench_files(args.questions)):
        print(f"made {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
