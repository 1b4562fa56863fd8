"""Fetch the evaluation PDFs from their Debian packages and check them.

    python include/eval/fetch.py [--dest .kb/eval-docs] [--debs DIR]

Uses ``apt-get download`` (no root needed) unless ``--debs`` names a folder that already
holds the two .deb files; unpacks them with ``dpkg-deb -x``; copies the PDFs to ``--dest``
and checks each sha256 against SOURCES.md's. Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import hashlib
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path, default=Path(".kb/eval-docs"))
    parser.add_argument("--debs", type=Path, default=None, help="a folder with the .deb files already downloaded")
    args = parser.parse_args()
    for path in fetch(args.dest, args.debs):
        print(f"ok {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
