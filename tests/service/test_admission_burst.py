"""The OCR service admits a request before it reads it: in a burst of 20 concurrent 50 MB
uploads, the requests beyond its places (slots + queue) are answered 429 before a byte of
their body is read, and the service's memory stays within what its places can hold.

The uploads are sent as a careful client sends a large body: ``Expect: 100-continue``, the
body only after the server asks for it (uvicorn asks when the app first reads). A request
answered 429 without a ``100 Continue`` first is one whose body the server never read.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from tests.conftest import start_service

KEY = "burst-key-for-tests"
UPLOADS, SIZE = 20, 50 * 2**20
MAX_FILE_MB, CONCURRENCY, QUEUE = 60, 1, 1
BOUNDARY = "kbburstboundary"


def _status(sock: socket.socket) -> int:
    head = b""
    while b"\r\n\r\n" not in head:
        got = sock.recv(4096)
        if not got:
            raise ConnectionError(f"closed after {head!r}")
        head += got
    return int(head.split(b" ", 2)[1])


def _upload(port: int) -> tuple[bool, int]:
    """(whether the server asked for the body, the final status)."""
    part = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.pdf"\r\n'
            "Content-Type: application/pdf\r\n\r\n").encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall((f"POST /v1/parse HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
                      f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
                      f"Content-Length: {len(part) + SIZE + len(tail)}\r\nExpect: 100-continue\r\n\r\n").encode())
        status = _status(sock)
        if status != 100:
            return False, status
        sock.sendall(part + b"%PDF-1.7\n")  # not a PDF past its header: read whole, then refused 422
        block = b"0" * (1 << 20)
        sent = 9
        while sent < SIZE:
            n = min(len(block), SIZE - sent)
            sock.sendall(block[:n])
            sent += n
        sock.sendall(tail)
        return True, _status(sock)


@pytest.fixture
def service(s3_server, tmp_path):
    with start_service(s3_server, tmp_path, {
        "OCR_SERVICE_API_KEYS": KEY, "OCR_SERVICE_MAX_FILE_MB": str(MAX_FILE_MB),
        "OCR_SERVICE_MAX_CONCURRENCY": str(CONCURRENCY), "OCR_SERVICE_MAX_QUEUE": str(QUEUE),
    }) as svc:
        yield svc


def test_a_burst_of_large_uploads_is_refused_before_it_is_read_and_memory_stays_bounded(service):
    proc = psutil.Process(service["proc"].pid)
    baseline = proc.memory_info().rss
    peak, stop = [baseline], threading.Event()

    def watch():
        while not stop.is_set():
            peak.append(proc.memory_info().rss)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(UPLOADS) as pool:
            outcomes = list(pool.map(lambda _: _upload(service["port"]), range(UPLOADS)))
    finally:
        stop.set()
        watcher.join()
    places = CONCURRENCY + QUEUE
    refused_unread = [o for o in outcomes if o == (False, 429)]
    read = [o for o in outcomes if o[0]]
    assert len(refused_unread) >= UPLOADS - places, outcomes
    assert 1 <= len(read) <= places and all(status == 422 for _, status in read), outcomes
    assert all(o in ((False, 429), (True, 422)) for o in outcomes), outcomes
    # what its places can hold: each a document read into memory, and MuPDF's copy of it
    grew = max(peak) - baseline
    bound = places * 2 * MAX_FILE_MB * 2**20
    print(f"\nRSS {baseline / 2**20:.0f} MB -> peak {max(peak) / 2**20:.0f} MB (+{grew / 2**20:.0f} MB; "
          f"bound {bound / 2**20:.0f} MB; {UPLOADS} x {SIZE / 2**20:.0f} MB sent)")
    assert grew <= bound, f"RSS grew {grew / 2**20:.0f} MB in the burst, over {bound / 2**20:.0f} MB"
