"""``kb``: run the local stack, ingest documents, search the knowledge base.

One module per group of commands (``stack``, ``documents``, ``search``, ``store``, ``bench``), each
adding its subcommands to the parser. Errors reach the user as ``kb: error [code]: ...``:
every library and workbench call raises ``KbError`` at its own boundary, so nothing else
is mapped here.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from kb.errors import KbError
from kb_dev.cli import bench, documents, search, stack, store


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kb", description="run the local stack, ingest documents, search the knowledge base")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (stack, documents, search, store, bench):
        group.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # progress of long runs must show up when stdout is a file or a pipe too
    sys.stdout.reconfigure(line_buffering=True)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retry warnings repeat what we report
    args = build_parser().parse_args(argv)
    # The stack's processes (weed, Airflow's tasks, the services) run in folders of their own:
    # a relative KB_STATE_DIR would name another folder in each, so it is made absolute here.
    if os.environ.get("KB_STATE_DIR"):
        os.environ["KB_STATE_DIR"] = str(Path(os.environ["KB_STATE_DIR"]).expanduser().absolute())
    try:
        return args.func(args)
    except KbError as exc:
        print(f"kb: error [{exc.code}]: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
