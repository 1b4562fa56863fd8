"""Process supervision: the floor every part of the local stack stands on.

A part is a process group started in a session of its own and recorded under
``<state_dir>/run/<part>.json`` (pid, pgid, command); its output goes to
``<state_dir>/logs/<part>.log``. Stopping a part stops exactly that group: SIGTERM, a
deadline, then SIGKILL (weed can ignore SIGTERM for a long time), so ``kb down`` never
touches a process it did not start.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from kb_dev.errors import PortInUse, ServiceDidNotStart
from kb_dev.settings import StackSettings


def _run_dir(s: StackSettings) -> Path:
    return s.state_dir / "run"


def _pid_file(s: StackSettings, name: str) -> Path:
    return _run_dir(s) / f"{name}.json"


def log_path(s: StackSettings, name: str) -> Path:
    return s.state_dir / "logs" / f"{name}.log"


def recorded_parts(s: StackSettings) -> list[str]:
    """The parts with a record, running or not (a part that died keeps its record until stopped)."""
    return sorted(p.stem for p in _run_dir(s).glob("*.json")) if _run_dir(s).exists() else []


def alive(pid: int) -> bool:
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
    """Start ``cmd`` as part ``name`` in a process group of its own; its pid."""
    log_path(s, name).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path(s, name), "ab") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    _run_dir(s).mkdir(parents=True, exist_ok=True)
    _pid_file(s, name).write_text(json.dumps({"pid": proc.pid, "pgid": proc.pid, "cmd": cmd[:2], "started": time.time()}))
    return proc.pid


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# A fatal line, where a Go part (weed) prints it: a goroutine dump follows it and would fill
# the tail, as it did in CI ("S3 API Server listener on ... bind: address already in use").
_FATAL = re.compile(r"^(F\d{4} \d|FATAL|panic: )")


def exited_while_starting(s: StackSettings, name: str) -> ServiceDidNotStart:
    path = log_path(s, name)
    last = tail(path)
    try:
        fatal = [line for line in path.read_text(errors="replace").splitlines() if _FATAL.match(line)]
    except OSError:
        fatal = []
    said = f"; it said: {fatal[-1]}" if fatal and fatal[-1] not in last else ""
    return ServiceDidNotStart(f"{name} exited while starting{said}; last log lines ({path}):\n{last}")


def wait_until(s: StackSettings, name: str, pid: int, ready: Callable[[], bool], what: str) -> None:
    """Until ``ready()`` (any error counts as not yet), within ``s.start_timeout_s``; a part
    that exits meanwhile fails at once, with its last log lines."""
    deadline = time.monotonic() + s.start_timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            raise exited_while_starting(s, name)
        try:
            if ready():
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise ServiceDidNotStart(
        f"{name} did not become ready ({what}) within {s.start_timeout_s:.0f}s; see {log_path(s, name)}")


def part_pid(s: StackSettings, name: str) -> int | None:
    """The part's pid while it runs; None when it was never started, was stopped, or died."""
    path = _pid_file(s, name)
    if not path.exists():
        return None
    pid = json.loads(path.read_text())["pid"]
    return pid if alive(pid) else None


def part_states(s: StackSettings, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``{part: {"running", "pid"}}`` for those of ``names`` that run or have a record."""
    recorded = recorded_parts(s)
    return {name: {"running": bool(pid), "pid": pid} for name in names
            if (pid := part_pid(s, name)) or name in recorded}


def part_members(s: StackSettings, name: str) -> list[int]:
    """Every process of the part's group (its children included), alive or not yet reaped."""
    path = _pid_file(s, name)
    return group_members(json.loads(path.read_text())["pgid"]) if path.exists() else []


def stop_part(s: StackSettings, name: str, timeout_s: float | None = None) -> bool:
    """Stop the process group recorded for ``name``; True when something was stopped."""
    return stop_parts(s, {name: timeout_s})[name]


def stop_parts(s: StackSettings, parts: Mapping[str, float | None]) -> dict[str, bool]:
    """Stop several parts at once: SIGTERM to every group, then wait for them together, each
    until its own deadline (``None``: ``s.stop_timeout_s``), then SIGKILL what is left. Stopped
    one after another, the deadlines of a tier would add up (40 s for the distributed stack's
    Airflow and workers). ``{part: True when something was stopped}``."""
    started = time.monotonic()
    groups: dict[str, int] = {}
    stopped: dict[str, bool] = {}
    for name in parts:
        path = _pid_file(s, name)
        if not path.exists():
            stopped[name] = False
            continue
        groups[name] = json.loads(path.read_text())["pgid"]
        try:
            os.killpg(groups[name], signal.SIGTERM)
            stopped[name] = True
        except ProcessLookupError:
            stopped[name] = False
    deadlines = {name: started + (t if (t := parts[name]) is not None else s.stop_timeout_s) for name in groups}
    waiting = dict(groups)
    while waiting:
        for name, pgid in list(waiting.items()):
            if not _group_alive(pgid):
                del waiting[name]
            elif time.monotonic() >= deadlines[name]:
                _kill_group(pgid)
                del waiting[name]
        if waiting:
            time.sleep(0.2)
    for name in groups:
        _pid_file(s, name).unlink(missing_ok=True)
    return {name: stopped[name] for name in parts}


def kill_part(s: StackSettings, name: str) -> bool:
    """SIGKILL the part's whole process group at once (a crash, not a shutdown); True when
    something was killed. ``kb up`` starts it again."""
    path = _pid_file(s, name)
    if not path.exists():
        return False
    killed = _kill_group(json.loads(path.read_text())["pgid"])
    path.unlink(missing_ok=True)
    return killed


def forget_part(s: StackSettings, name: str) -> None:
    """Drop the part's record (its processes were stopped some other way)."""
    _pid_file(s, name).unlink(missing_ok=True)


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
    return any(alive(pid) for pid in group_members(pgid))


def group_members(pgid: int) -> list[int]:
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


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def environment(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with ({} when it cannot be read). A process that
    has not exec'd yet shows its parent's: read a new one once it runs."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def processes(s: StackSettings) -> list[dict[str, Any]]:
    """Every live process of the stack's parts: part, pid, command, RSS, peak RSS, open fds.

    What the soak and size checks read; a part's group includes its children (Airflow's
    scheduler, API server, DAG processor, triggerer and the task processes they run)."""
    from kb.pipeline.usage import MB, peak_rss_bytes

    out = []
    for part in recorded_parts(s):
        for pid in part_members(s, part):
            if not alive(pid):
                continue
            try:
                status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                              if ":" in line)
                fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
            except OSError:
                continue
            command = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(cmdline(pid)[:4]))
            out.append({"part": part, "pid": pid, "command": command,
                        "rss_mb": round(int(status.get("VmRSS", "0 kB").split()[0]) * 1024 / MB, 1),
                        "peak_rss_mb": round(peak_rss_bytes(pid) / MB, 1), "fds": fds})
    return out
