"""The Redis part of the distributed stack (Debian's ``redis-server``): the Celery broker."""

from __future__ import annotations

import os
import shutil

from kb_dev.errors import ServiceDidNotStart
from kb_dev.settings import StackSettings
from kb_dev.stack.process import check_ports_free, part_pid, start_process, stop_part, wait_until
from kb_dev.stack.secrets import write_private

PART = "redis"


def start(s: StackSettings, secrets_: dict[str, str]) -> None:
    if part_pid(s, PART):
        return
    binary = shutil.which("redis-server")
    if not binary:
        raise ServiceDidNotStart("`redis-server` was not found; install Debian's `redis-server` package")
    check_ports_free(s.host, {"Redis": s.redis_port})
    folder = s.state_dir / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "redis.conf"
    # the password in a 0600 file, not on the command line where `ps` shows it
    write_private(conf, f"bind {s.host}\nport {s.redis_port}\nrequirepass {secrets_['KB_REDIS_PASSWORD']}\n"
                         f"dir {folder}\nsave \"\"\nappendonly no\nprotected-mode yes\n")
    pid = start_process(s, PART, [binary, str(conf)], dict(os.environ), folder)

    def ready() -> bool:
        import redis

        return bool(redis.Redis(host=s.host, port=s.redis_port, password=secrets_["KB_REDIS_PASSWORD"],
                                socket_timeout=2).ping())

    wait_until(s, PART, pid, ready, f"answering PING on {s.host}:{s.redis_port}")


def stop(s: StackSettings) -> bool:
    return stop_part(s, PART)


def url(s: StackSettings, secrets_: dict[str, str], db: int = 0) -> str:
    return f"redis://:{secrets_['KB_REDIS_PASSWORD']}@{s.host}:{s.redis_port}/{db}"
