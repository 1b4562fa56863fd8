"""Free loopback ports, for stacks that must not collide with another one (tests, benchmarks)."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports nothing listens on now (held together while chosen)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def weed_port_set() -> dict[str, int]:
    """Four base ports for weed whose +10000 gRPC twins are free too (StackSettings names)."""
    while True:
        ports = free_ports(4)
        if all(p + 10000 < 65536 for p in ports) and all(_free(p + 10000) for p in ports):
            return dict(zip(("s3_port", "weed_master_port", "weed_volume_port", "weed_filer_port"), ports))


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
