"""The local object store and the compose deployment, probed as an attacker would.

Local stack: only the S3 gateway answers, and only to its -s3.config keys. weed's own filer,
master and volume servers (HTTP on their ports, gRPC on port + 10000) take mutual TLS with
the stack's certificate, behind which the filer and volume servers also check JWTs; a client
without the certificate gets no listing, no file id and no status. Each probe first checks
that something listens on the port, so a port nobody serves cannot pass it.

Compose cannot start here; its start-up check on secrets is a script, run here as compose
runs it.
"""

from __future__ import annotations

import io
import os
import socket
import ssl
import subprocess
import uuid
from pathlib import Path

import grpc
import httpx
import pytest

from kb.objectstore import ObjectStore
from kb.settings import PipelineSettings
from kb_dev.ports import WEED_GRPC_OFFSET
from kb_dev.settings import StackSettings
from kb_dev.stack.s3 import weed_security_dir

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


def weed_port(live, part: str) -> int:
    return int(live.env[f"KB_WEED_{part.upper()}_PORT"])


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((HOST, port)) == 0


def artifacts_bucket(live) -> str:
    return live.env.get("KB_ARTIFACTS_BUCKET") or PipelineSettings.model_fields["artifacts_bucket"].default


@pytest.fixture(scope="module")
def probe_object(live) -> str:
    """An artifact written with the pipeline's own keys, which the probes then look for."""
    store = ObjectStore.connect(f"{HOST}:{live.env['KB_S3_PORT']}", live.secrets["KB_S3_ACCESS_KEY"],
                                live.secrets["KB_S3_SECRET_KEY"])
    key = f"security/object-store/probe-{uuid.uuid4().hex}.json"
    store.client.put_object(artifacts_bucket(live), key, io.BytesIO(b'{"secret": true}'), 16)
    listed = [o.object_name for o in store.client.list_objects(artifacts_bucket(live), "security/object-store/",
                                                               recursive=True)]
    assert key in listed  # the S3 gateway answers its keys: the probes below look at a real artifact
    return key


def without_credentials(port: int, path: str) -> list[tuple[str, int | str, str]]:
    """``GET path`` over plain HTTP and over TLS without a client certificate:
    (scheme, status or the error's name, body)."""
    answers = []
    for scheme in ("http", "https"):
        try:
            r = httpx.get(f"{scheme}://{HOST}:{port}{path}", verify=False, timeout=10)
            answers.append((scheme, r.status_code, r.text))
        except httpx.HTTPError as exc:
            answers.append((scheme, type(exc).__name__, ""))
    return answers


def refused(answers) -> bool:
    return all(not (isinstance(status, int) and 200 <= status < 400) for _, status, _ in answers)


def test_the_filer_port_neither_lists_nor_serves_the_artifacts_without_credentials(live, probe_object):
    port = weed_port(live, "filer")
    assert listening(port)
    bucket = artifacts_bucket(live)
    for path in (f"/buckets/{bucket}/", f"/buckets/{bucket}/security/object-store/",
                 f"/buckets/{bucket}/{probe_object}"):
        answers = without_credentials(port, path)
        assert refused(answers), (path, [(scheme, status) for scheme, status, _ in answers])
        assert not any(Path(probe_object).name in body or '"secret"' in body for _, _, body in answers), path


def test_the_filer_port_takes_no_writes_or_deletes_without_credentials(live, probe_object):
    port = weed_port(live, "filer")
    assert listening(port)
    bucket = artifacts_bucket(live)
    for method, path, kwargs in (("POST", f"/buckets/{bucket}/security/object-store/planted.txt", {"files": {"f": b"x"}}),
                                 ("DELETE", f"/buckets/{bucket}/{probe_object}", {})):
        try:
            status = httpx.request(method, f"http://{HOST}:{port}{path}", timeout=10, **kwargs).status_code
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        assert not (isinstance(status, int) and status < 400), (method, status)
    store = ObjectStore.connect(f"{HOST}:{live.env['KB_S3_PORT']}", live.secrets["KB_S3_ACCESS_KEY"],
                                live.secrets["KB_S3_SECRET_KEY"])
    names = {o.object_name for o in store.client.list_objects(bucket, "security/object-store/", recursive=True)}
    assert probe_object in names and "security/object-store/planted.txt" not in names


@pytest.mark.parametrize("path", ["/dir/assign", "/dir/status", "/vol/status", "/cluster/status", "/dir/lookup?volumeId=1"])
def test_the_master_port_hands_out_no_file_ids_or_topology_without_credentials(live, path):
    port = weed_port(live, "master")
    assert listening(port)
    answers = without_credentials(port, path)
    assert refused(answers), [(scheme, status, body[:200]) for scheme, status, body in answers]


@pytest.mark.parametrize("path", ["/status", "/ui/index.html"])
def test_the_volume_port_answers_nothing_without_credentials(live, path):
    port = weed_port(live, "volume")
    assert listening(port)
    answers = without_credentials(port, path)
    assert refused(answers), [(scheme, status, body[:200]) for scheme, status, body in answers]


def _proto_string(field: int, value: str) -> bytes:
    """One protobuf string field, enough for the requests below (no generated stubs here)."""
    data = value.encode()
    out = bytearray()
    for n in (field << 3 | 2, len(data)):
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                break
    return bytes(out) + data


# (weed part, gRPC method, request, does it stream): what weed's own tools (weed shell) call
GRPC_PROBES = [
    ("filer", "/filer_pb.SeaweedFiler/ListEntries", "artifacts", True),
    ("master", "/master_pb.Seaweed/VolumeList", b"", False),
    ("volume", "/volume_server_pb.VolumeServer/VolumeServerStatus", b"", False),
]


def _grpc_call(channel: grpc.Channel, method: str, request: bytes, stream: bool) -> bytes:
    if stream:
        call = channel.unary_stream(method, request_serializer=None, response_deserializer=None)
        return b"".join(call(request, timeout=10))
    return channel.unary_unary(method, request_serializer=None, response_deserializer=None)(request, timeout=10)


@pytest.mark.parametrize("part, method, request_, stream", GRPC_PROBES, ids=[p[0] for p in GRPC_PROBES])
def test_the_grpc_ports_refuse_a_client_without_the_stacks_certificate(live, probe_object, part, method, request_,
                                                                         stream):
    port = weed_port(live, part) + WEED_GRPC_OFFSET
    assert listening(port)
    if request_ == "artifacts":
        request_ = _proto_string(1, f"/buckets/{artifacts_bucket(live)}/security/object-store")
    target = f"{HOST}:{port}"
    ca = weed_security_dir(StackSettings(state_dir=Path(live.env["KB_STATE_DIR"]))) / "ca.crt"
    channels = {"plaintext": grpc.insecure_channel(target)}
    if ca.is_file():  # TLS that trusts the server but shows no client certificate
        channels["tls"] = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=ca.read_bytes()),
                                              options=[("grpc.ssl_target_name_override", "localhost")])
    for how, channel in channels.items():
        with channel:
            with pytest.raises(grpc.RpcError) as refusal:
                answer = _grpc_call(channel, method, request_, stream)
                pytest.fail(f"{part} gRPC answered a {how} client: {len(answer)} bytes")
            assert refusal.value.code() == grpc.StatusCode.UNAVAILABLE, (how, refusal.value.code())


def test_the_stacks_certificate_is_the_credential_the_filer_asks_for(live, probe_object):
    """The refusals above are about credentials, not a dead port: with the stack's client
    certificate the filer's TLS lets the request through, and then wants its JWT."""
    folder = weed_security_dir(StackSettings(state_dir=Path(live.env["KB_STATE_DIR"])))
    assert oct((folder / "weed.key").stat().st_mode & 0o777) == "0o600"
    context = ssl.create_default_context(cafile=str(folder / "ca.crt"))
    context.load_cert_chain(folder / "weed.crt", folder / "weed.key")
    answer = httpx.get(f"https://{HOST}:{weed_port(live, 'filer')}/buckets/{artifacts_bucket(live)}/",
                       verify=context, timeout=10)
    assert answer.status_code == 401 and Path(probe_object).name not in answer.text


# --- compose: placeholder secrets refused at start-up ------------------------------------------

CHECK_SECRETS = REPO / "include" / "config" / "check-secrets.sh"


def env_example() -> dict[str, str]:
    values = {}
    for line in (REPO / ".env.example").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            name, value = line.split("=", 1)
            values[name] = value.strip("'")
    return values


def check_secrets(values: dict[str, str]) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], **values}
    return subprocess.run(["bash", str(CHECK_SECRETS)], env=env, capture_output=True, text=True, timeout=30)


def test_compose_refuses_to_start_with_the_example_placeholder_secrets():
    example = env_example()
    done = check_secrets(example)
    assert done.returncode != 0
    placeholders = {name for name, value in example.items() if value.startswith("change-me")}
    assert placeholders and all(name in done.stderr for name in placeholders), done.stderr
    assert not any(example[name] in done.stdout + done.stderr for name in placeholders)  # names, never values


def test_compose_refuses_short_secrets_and_passwords_that_break_a_url():
    good = {name: f"{uuid.uuid4().hex}{uuid.uuid4().hex}" if value.startswith("change-me") else value
            for name, value in env_example().items()}
    assert check_secrets(good).returncode == 0, check_secrets(good).stderr
    short = check_secrets({**good, "QDRANT_API_KEY": "abc123"})
    assert short.returncode != 0 and "QDRANT_API_KEY" in short.stderr
    url_breaking = check_secrets({**good, "KB_LEDGER_DB_PASSWORD": "a-long-enough-password@with/slash"})
    assert url_breaking.returncode != 0 and "KB_LEDGER_DB_PASSWORD" in url_breaking.stderr
    empty = check_secrets({k: v for k, v in good.items() if k != "REDIS_PASSWORD"} | {"REDIS_PASSWORD": ""})
    assert empty.returncode != 0 and "REDIS_PASSWORD" in empty.stderr


def test_compose_refuses_two_identities_with_one_key():
    """Two MinIO users with one access key are one user, with both policies; two roles with one
    password can each act as the other."""
    good = {name: f"{uuid.uuid4().hex}{uuid.uuid4().hex}" if value.startswith("change-me") else value
            for name, value in env_example().items()}
    assert check_secrets(good).returncode == 0, check_secrets(good).stderr
    for a, b in (("OCR_S3_ACCESS_KEY", "SEARCH_S3_ACCESS_KEY"), ("AIRFLOW_S3_SECRET_KEY", "OCR_S3_SECRET_KEY"),
                 ("QDRANT_API_KEY", "QDRANT_READ_ONLY_API_KEY"), ("AIRFLOW_DB_PASSWORD", "KB_SEARCH_DB_PASSWORD"),
                 ("AIRFLOW_S3_ACCESS_KEY", "MINIO_ROOT_USER")):
        same = check_secrets({**good, b: good[a]})
        assert same.returncode != 0 and a in same.stderr and b in same.stderr, (a, b, same.stderr)
        assert good[a] not in same.stdout + same.stderr  # names, never values
