"""Weights are loaded only from a folder whose every file matches a sha256 manifest.

``manifest.sha256.json`` lists each file's digest; a missing, changed or unlisted
file is refused before anything is read by the model loader. The weights digest
names the whole set (the sha256 of the sorted manifest entries).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ocr_engine.api.errors import ModelIntegrityError

MANIFEST = "manifest.sha256.json"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: Path, model_version: str) -> str:
    folder = Path(folder)
    files = {name: _sha256(folder / name) for name in _files(folder)}
    (folder / MANIFEST).write_text(json.dumps({"model_version": model_version, "files": files}, indent=2, sort_keys=True))
    return weights_digest(files)


def weights_digest(files: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{k}:{v}\n" for k, v in sorted(files.items())).encode()).hexdigest()


def _read(folder: Path) -> tuple[str, dict[str, str]]:
    """The manifest's (model_version, files), read but not checked against the files."""
    path = folder / MANIFEST
    if not path.is_file():
        raise ModelIntegrityError(f"{folder} has no {MANIFEST}; refusing to load unverified weights")
    try:
        manifest = json.loads(path.read_text())
        files: dict[str, str] = manifest["files"]  # first: a manifest that is no object fails here
        return str(manifest.get("model_version", folder.name)), files
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelIntegrityError(f"{path} is not a valid manifest: {exc}") from exc


def declared(folder: Path) -> tuple[str | None, str | None]:
    """(model_version, weights_digest) as the manifest states them, without hashing a file;
    (None, None) where there is no readable manifest (loading it will then refuse)."""
    try:
        model_version, files = _read(Path(folder))
        return model_version, weights_digest(files)
    except (ModelIntegrityError, OSError, TypeError, AttributeError):
        return None, None


def verify(folder: Path) -> tuple[str, str]:
    """(model_version, weights_digest) once every file checks out; else ModelIntegrityError."""
    folder = Path(folder)
    model_version, files = _read(folder)
    problems = []
    for name, expected in sorted(files.items()):
        target = folder / name
        if not target.is_file():
            problems.append(f"missing {name}")
        elif _sha256(target) != expected:
            problems.append(f"sha256 mismatch in {name}")
    unlisted = sorted(set(_files(folder)) - set(files))
    problems.extend(f"unlisted file {name}" for name in unlisted)
    if problems:
        raise ModelIntegrityError(f"weights in {folder} failed verification: " + "; ".join(problems[:5]))
    return model_version, weights_digest(files)
