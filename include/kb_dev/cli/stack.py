"""``kb up``, ``kb down``, ``kb status``, ``kb alerts`` and ``kb pools sync``: the local stack."""

from __future__ import annotations

import argparse
import json
import os

from kb_dev.settings import StackSettings


def client_env() -> StackSettings:
    """The running stack's settings, with its endpoint, keys and ledger put in the environment
    for the library's own settings classes (a command that reads documents or the ledger)."""
    from kb_dev.stack.topology import load_client_env

    s = StackSettings()
    load_client_env(s)
    return s


def cmd_up(args: argparse.Namespace) -> int:
    from kb_dev.stack import topology

    settings = StackSettings()
    if args.no_observe:
        settings = settings.model_copy(update={"observe": False})
    st = topology.up(settings, airflow=not args.no_airflow, distributed=args.distributed, workers=args.workers)
    print(f"up: S3 {st['s3']['endpoint']}, Airflow {st['airflow']['url'] if st['airflow']['running'] else '(not started)'}, "
          f"store {st['store']['location']}")
    if st.get("prometheus", {}).get("running"):
        print(f"    Prometheus {st['prometheus']['url']}, alerts: `kb alerts`")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from kb_dev.stack import topology

    topology.down(StackSettings())
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from kb_dev.stack import topology

    st = topology.status(StackSettings())
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        for part in ("s3", "ocr", "search", "airflow"):
            p = st[part]
            state = "healthy" if p["healthy"] else ("running, not healthy" if p["running"] else "stopped")
            where = p.get("endpoint") or p.get("url")
            print(f"{part:8} {state:22} {where}  pid={p['pid']}" + (f"  ({p['error']})" if p.get("error") else ""))
        q = st["store"]
        print(f"{'store':8} {('prepared' if q['prepared'] else 'not prepared'):22} {q['mode']} {q['location']}")
    running = st["s3"]["healthy"] and all(st[p]["healthy"] or not st[p]["running"] for p in ("airflow", "ocr", "search"))
    return 0 if running else 1


def cmd_alerts(args: argparse.Namespace) -> int:
    from kb_dev.stack.observe import mail_folder, sent_alerts

    s = StackSettings()
    alerts = sent_alerts(s, limit=args.last or None)
    if args.json:
        print(json.dumps([a.as_dict() for a in alerts], indent=2, ensure_ascii=False))
        return 0
    if not alerts:
        print(f"no alerts sent (the mail sink keeps them in {mail_folder(s)}; `kb up` starts it)")
        return 0
    for a in alerts:
        print(f"{a.received}  {a.subject}")
        for line in a.text.splitlines()[:8]:
            print(f"    {line[:160]}")
        print()
    return 0


def cmd_pools_sync(args: argparse.Namespace) -> int:
    from kb_airflow.names import OCR_POOL
    from kb_dev import pools
    from kb_dev.stack import ocr, topology

    s = StackSettings()
    urls = args.ocr_url or [r.url for r in topology.ocr_replicas(s)]
    replicas = pools.replica_capacities(urls, os.environ.get("KB_OCR_API_KEY") or ocr.api_key(s))
    for r in replicas:
        print(f"{r.url}: {r.sequences} ({'KV budget, sequences of a typical range' if r.source == 'kv' else 'engine slots'})")
    if args.dry_run:
        print(f"would set pool {OCR_POOL} to {pools.slots_for(replicas)} slots")
        return 0
    client = topology.airflow_client(s)
    try:
        slots = pools.sync(client, replicas)
    finally:
        client.close()
    print(f"pool {OCR_POOL}: {slots} slots")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="start the local stack (S3 server, Airflow, OCR and search services, the embedded store)",
                       description="Ports and the state folder come from KB_S3_PORT, KB_WEED_MASTER_PORT, "
                                   "KB_WEED_VOLUME_PORT, KB_WEED_FILER_PORT, KB_OCR_PORT, KB_AIRFLOW_PORT, "
                                   "KB_AIRFLOW_WORKER_LOG_PORT, KB_AIRFLOW_TRIGGER_LOG_PORT and KB_STATE_DIR.")
    p.add_argument("--no-airflow", action="store_true", help="only the S3 server and the Qdrant store (no OCR service, no Airflow)")
    p.add_argument("--distributed", action="store_true",
                   help="the production topology: Postgres and Redis (Debian packages), Airflow's CeleryExecutor "
                        "with a default and a gpu worker, two OCR replicas (ports: KB_POSTGRES_PORT, KB_REDIS_PORT, "
                        "KB_OCR_REPLICA_PORTS, KB_AIRFLOW_EXTRA_WORKER_LOG_PORTS)")
    p.add_argument("--workers", type=int, choices=(1, 2), default=2,
                   help="with --distributed: 2 = one worker per queue (default, gpu); 1 = one worker for both")
    p.add_argument("--no-observe", action="store_true",
                   help="leave out the exporter, the StatsD bridge, the mail sink, Prometheus and Alertmanager "
                        "(ports: KB_EXPORTER_PORT, KB_STATSD_PORT, KB_STATSD_HTTP_PORT, KB_MAIL_PORT, "
                        "KB_PROMETHEUS_PORT, KB_ALERTMANAGER_PORT)")
    p.set_defaults(func=cmd_up)
    p = sub.add_parser("alerts", help="the alerts the local stack sent (mail to the ops team, at its mail sink)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--last", type=int, default=20, help="the last N (0: all)")
    p.set_defaults(func=cmd_alerts)
    sub.add_parser("down", help="stop what `kb up` started").set_defaults(func=cmd_down)
    p = sub.add_parser("status", help="report each part of the stack")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("pools", help="Airflow pools")
    pools_sub = p.add_subparsers(dest="pools", required=True)
    b = pools_sub.add_parser("sync", help="set the gpu_ocr pool to the OCR replicas' published capacity (their KV "
                             "budgets in sequences of a typical range, or their engine slots)")
    b.add_argument("--ocr-url", action="append", help="an OCR replica's base URL (repeat); default: the stack's")
    b.add_argument("--dry-run", action="store_true", help="print the capacities and the slots, change nothing")
    b.set_defaults(func=cmd_pools_sync)
