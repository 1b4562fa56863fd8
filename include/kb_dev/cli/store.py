"""``kb store``: the embedded store's copies and log, and moving a store without re-work."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def cmd_store_status(args: argparse.Namespace) -> int:
    from kb.settings import PipelineSettings
    from kb.store.oplog import OpLog

    client_env_loaded()
    p = PipelineSettings()
    if p.qdrant_url:
        out = {"mode": "server", "url": p.qdrant_url, "collection": p.collection}
    else:
        oplog = OpLog(p.store_dir)
        try:
            now = time.time()
            out = {"mode": "embedded", "location": str(p.store_dir), "dimension": oplog.dimension(),
                   "log_rows": oplog.pending(), "last_row": oplog.last_seq(),
                   "copies": [{"name": r.name, "applied": r.applied, "flushed": r.flushed, "alive": r.alive(now),
                               "building_hnsw": r.optimizing and r.alive(now)} for r in oplog.replicas()]}
        finally:
            oplog.close()
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if out["mode"] == "server":
        print(f"Qdrant server {out['url']}, collection {out['collection']}")
        return 0
    print(f"embedded store at {out['location']}: {out['dimension'] or 'no'}-d vectors; log: {out['log_rows']} row(s) "
          f"kept, last {out['last_row']}")
    for c in out["copies"]:
        state = "building HNSW" if c["building_hnsw"] else ("answering" if c["alive"] else "not running")
        print(f"  {c['name']}: applied {c['applied']}, flushed {c['flushed']}, {state}")
    return 0


def cmd_store_migrate(args: argparse.Namespace) -> int:
    from kb.settings import PipelineSettings, StoreSettings
    from kb.store.migrate import copy_to_server, legacy_store, migrate_local_mode

    client_env_loaded()
    p = PipelineSettings()

    def progress(n: int) -> None:
        if n % 10_240 < 256:
            print(f"  {n} points ...", file=sys.stderr)

    if args.to_server:
        key = os.environ.get("KB_QDRANT_API_KEY")
        copied = copy_to_server(p, args.to_server, key, args.collection, StoreSettings(), progress)
        print(f"copied {copied} points (vectors and payloads as they are) into {args.to_server}, collection "
              f"{args.collection or p.collection}; set KB_QDRANT_URL={args.to_server} to use it")
        return 0
    if legacy_store(p) is None:
        print(f"no local-mode store at {p.resolved_qdrant_path} (nothing to move)")
        return 0
    copied = migrate_local_mode(p, StoreSettings(), progress)
    print(f"moved {copied} points from {p.resolved_qdrant_path} into the embedded store's log (no OCR, no "
          "embedding); the search service applies them when it starts")
    return 0


def client_env_loaded() -> None:
    from kb_dev.cli.stack import client_env

    client_env()


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("store", help="the vector store: its copies and log; moving a store without re-work")
    store_sub = p.add_subparsers(dest="store", required=True)
    b = store_sub.add_parser("status", help="the embedded store's copies, how far each is, the log")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_store_status)
    b = store_sub.add_parser("migrate", help="move a local-mode Qdrant store into the embedded store (kb up does it "
                                             "too), or, with --to-server, copy the embedded store into a Qdrant server")
    b.add_argument("--to-server", metavar="URL", help="a Qdrant server (its key from KB_QDRANT_API_KEY); stop the "
                                                      "search service first (kb down): its copies hold the store")
    b.add_argument("--collection", help="the server's collection (default KB_COLLECTION)")
    b.set_defaults(func=cmd_store_migrate)
