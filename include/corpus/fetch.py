"""Fetch the real corpus from its Debian packages and make its image-only copies.

    python include/corpus/fetch.py [--dest .kb/corpus] [--subset]

The list is documents.json beside this script; the sources and licences are in
SOURCES.md. Exit status 1 when a package cannot be fetched or a digest does not match.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kb_dev.corpus import CorpusError, fetch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path, default=Path(".kb/corpus"))
    parser.add_argument("--subset", action="store_true", help="only the documents the test ingests (~130 pages)")
    args = parser.parse_args()
    try:
        files = fetch(args.dest, subset=args.subset)
    except CorpusError as exc:
        print(f"fetch: {exc.message}", file=sys.stderr)
        return 1
    for f in files:
        print(f"ok {f.path} ({f.pages} pages{', image-only' if f.scanned else ''})")
    print(f"{len(files)} files, {sum(f.pages for f in files)} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
