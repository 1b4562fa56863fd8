"""The real corpus: PDFs nobody here wrote, from Debian packages, and image-only copies.

``include/corpus/documents.json`` lists each PDF: its package and version, its path in the
package, the sha256 of the .deb and of the PDF, pages, language, licence, whether an
image-only copy is made of it, and whether it is in the test subset. Nothing else is
committed: ``fetch`` downloads each package with ``apt-get download``, unpacks it with
``dpkg-deb -x``, checks both digests, and makes the image-only copies with
``kb_dev.samples.scanned_copy`` (150 dpi, skewed up to 1.5 degrees, 0.2 % speckle, seeded,
so a copy is the same bytes every time).

    python include/corpus/fetch.py [--dest .kb/corpus] [--subset]
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Protocol

from kb.errors import KbError

LIST = Path(__file__).resolve().parents[1] / "corpus" / "documents.json"
SCAN = {"dpi": 150, "skew_deg": 1.5, "speckle": 0.002}
SCAN_SUFFIX = ".scan.pdf"  # an image-only copy's file name: the original's, this suffix for ".pdf"


def original_of(name: str) -> str | None:
    """The born-digital file an image-only copy's name was made from (None for any other name)."""
    return name.removesuffix(SCAN_SUFFIX) + ".pdf" if name.endswith(SCAN_SUFFIX) else None


class CorpusError(KbError):
    """A package could not be fetched, or a file is not the one the list names."""

    code = "corpus_error"


@dataclass(frozen=True)
class CorpusDocument:
    file: str
    package: str
    version: str
    deb_sha256: str
    path: str
    pages: int
    bytes: int
    sha256: str
    language: str
    kind: str
    licence: str
    scanned_copy: bool
    test_subset: bool
    test_subset_scanned: bool

    @property
    def scan_file(self) -> str:
        return self.file.removesuffix(".pdf") + SCAN_SUFFIX


@dataclass(frozen=True)
class CorpusFile:
    path: Path
    document: CorpusDocument
    scanned: bool  # an image-only copy

    @property
    def pages(self) -> int:
        return self.document.pages


class PackagedFile(Protocol):
    """A file in a Debian package, pinned by the digests of the package and of the file."""

    package: str
    version: str
    deb_sha256: str
    path: str
    sha256: str


def documents() -> list[CorpusDocument]:
    names = {f.name for f in fields(CorpusDocument)}
    return [CorpusDocument(**{k: v for k, v in d.items() if k in names})
            for d in json.loads(LIST.read_text(encoding="utf-8"))["documents"]]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(dest: Path, *, subset: bool = False, echo: Callable[[str], None] = print) -> list[CorpusFile]:
    """The corpus (or the test subset) under ``dest``: ``born-digital/`` and ``scanned/``.
    Files already there with the right digest are kept; .debs are kept in ``debs/``."""
    chosen = [d for d in documents() if not subset or d.test_subset]
    out: list[CorpusFile] = []
    (dest / "born-digital").mkdir(parents=True, exist_ok=True)
    for doc in chosen:
        target = dest / "born-digital" / doc.file
        if not (target.exists() and sha256(target) == doc.sha256):
            extract_pdf(doc, download_deb(doc, dest / "debs", echo), target)
        out.append(CorpusFile(target, doc, False))
    (dest / "scanned").mkdir(parents=True, exist_ok=True)
    for doc in chosen:
        if not (doc.test_subset_scanned if subset else doc.scanned_copy):
            continue
        target = dest / "scanned" / doc.scan_file
        if not target.exists():
            from kb_dev.samples import scanned_copy

            echo(f"making an image-only copy of {doc.file} ({doc.pages} pages) ...")
            tmp = target.with_suffix(".part")
            tmp.write_bytes(scanned_copy((dest / "born-digital" / doc.file).read_bytes(), seed=doc.pages, **SCAN))
            tmp.replace(target)
        out.append(CorpusFile(target, doc, True))
    return out


def download_deb(doc: PackagedFile, debs: Path, echo: Callable[[str], None]) -> Path:
    debs.mkdir(parents=True, exist_ok=True)
    found = [p for p in debs.glob(f"{doc.package}_*.deb") if sha256(p) == doc.deb_sha256]
    if found:
        return found[0]
    echo(f"downloading {doc.package}={doc.version} ...")
    spec = f"{doc.package}={doc.version}"
    done = subprocess.run(["apt-get", "download", spec], cwd=debs, capture_output=True, text=True)
    if done.returncode != 0 and "Unable to locate" in (done.stderr + done.stdout):
        # a fresh machine has no package lists yet
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
        done = subprocess.run(["apt-get", "download", spec], cwd=debs, capture_output=True, text=True)
    if done.returncode != 0:
        raise CorpusError(f"apt-get download {spec} failed: {done.stderr.strip()[-500:]}")
    found = [p for p in debs.glob(f"{doc.package}_*.deb") if sha256(p) == doc.deb_sha256]
    if not found:
        raise CorpusError(f"{doc.package}={doc.version}: the downloaded .deb is not the one the list names")
    return found[0]


def extract_pdf(doc: PackagedFile, deb: Path, target: Path) -> None:
    extract_pdfs(deb, {doc: target})


def extract_pdfs(deb: Path, targets: dict[PackagedFile, Path]) -> None:
    """The files ``targets`` names out of ``deb`` (one pass over its data: a documentation
    package can be 600 MB), each checked against its sha256; a path ending in ``.gz`` (a
    package's gzipped example) is unpacked first."""
    with tempfile.TemporaryDirectory() as tmp:
        members = sorted({"." + doc.path for doc in targets})
        tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
        done = subprocess.run(["tar", "-x", "-C", tmp, "-f", "-", *members], stdin=tar.stdout, capture_output=True)
        tar.stdout.close()  # type: ignore[union-attr]
        tar.wait()
        for doc, target in targets.items():
            source = Path(tmp) / doc.path.lstrip("/")
            if not source.exists():
                raise CorpusError(f"{deb.name} has no {doc.path} ({done.stderr.decode(errors='replace').strip()[-300:]})")
            if source.suffix == ".gz":
                source.with_suffix("").write_bytes(gzip.decompress(source.read_bytes()))
                source = source.with_suffix("")
            if sha256(source) != doc.sha256:
                raise CorpusError(f"{doc.path} in {deb.name} has sha256 {sha256(source)}, not {doc.sha256}")
            shutil.copyfile(source, target)
