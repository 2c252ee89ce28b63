"""Find a dataset's raw files, check their SHA-256, download them when online.

Book: 8.2.2 a simple GNN training case (finding and checking dataset files).

Used in: no notebook directly.

Search order for every raw file (first hit wins):

1. ``$GNNBOOK_DATA_DIR/<folder>/<file>``
2. the course's ``data/`` cache (``<repo>/data/<folder>/<file>``)
3. ``../shared/datasets/<folder>/<file>`` beside the repository (tests and CI)
4. the pinned public URL, downloaded into the ``data/`` cache

Example:
    >>> from gnnbook.data.registry import DATASETS
    >>> paths = raw_files(DATASETS["cora"])      # doctest: +SKIP
    >>> sorted(paths)[0]                         # doctest: +SKIP
    'ind.cora.allx'
"""
from __future__ import annotations

import difflib
import hashlib
import os
import tempfile
from pathlib import Path

from .registry import DatasetSpec

REPO_ROOT = Path(__file__).resolve().parents[2]


def unknown_name(kind: str, name: str, known: list[str], elsewhere: str = "") -> "DatasetError":
    """The error for a dataset name no loader knows: the closest known name, all of them, and where else to look."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return DatasetError(f"unknown {kind} '{name}'.{hint} Known: {', '.join(known)}. {elsewhere}".rstrip())


class DatasetError(RuntimeError):
    """A dataset cannot be loaded; the message says why and what to do."""


def cache_dir() -> Path:
    """The writable cache: ``$GNNBOOK_DATA_DIR`` or the repository's ``data/``."""
    env = os.environ.get("GNNBOOK_DATA_DIR")
    if env:
        return Path(env)
    if (REPO_ROOT / "pyproject.toml").exists():
        return REPO_ROOT / "data"
    return Path.home() / ".cache" / "gnnbook"


def search_dirs() -> list[Path]:
    """Directories searched for raw files, in order."""
    dirs = []
    if os.environ.get("GNNBOOK_DATA_DIR"):
        dirs.append(Path(os.environ["GNNBOOK_DATA_DIR"]))
    dirs.append(REPO_ROOT / "data")
    dirs.append(REPO_ROOT.parent / "shared" / "datasets")
    return list(dict.fromkeys(dirs))


def sha256_of(path: str | Path) -> str:
    """The SHA-256 of a file's bytes as hex, read in 1 MiB blocks (the one file digest of the package).

    Example:
        >>> sha256_of(__file__) == hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
        True
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_verified(path: Path, expected_sha256: str) -> bytes:
    """Read ``path`` and return its bytes only if their SHA-256 matches."""
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha256:
        raise DatasetError(
            f"checksum mismatch for {path}: expected SHA-256 {expected_sha256}, got {actual}. "
            "The file is corrupt or not the pinned version: delete it and let gnnbook "
            "download it again, or copy the original file in its place."
        )
    return data


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers never see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _download(url: str, dest: Path, expected_sha256: str) -> None:
    import requests
    from tqdm.auto import tqdm

    try:
        response = requests.get(url, stream=True, timeout=30)
        response.raise_for_status()
    except requests.RequestException as exc:
        raise ConnectionError(str(exc)) from exc
    total = int(response.headers.get("content-length", 0)) or None
    chunks = []
    with tqdm(total=total, unit="B", unit_scale=True, desc=f"download {dest.name}") as bar:
        for chunk in response.iter_content(1 << 16):
            chunks.append(chunk)
            bar.update(len(chunk))
    data = b"".join(chunks)
    if hashlib.sha256(data).hexdigest() != expected_sha256:
        raise DatasetError(f"downloaded {url} but its SHA-256 does not match the pinned one")
    atomic_write_bytes(dest, data)


def raw_files(spec: DatasetSpec, download: bool = True) -> dict[str, Path]:
    """Paths of every raw file of ``spec``, downloading missing ones if allowed."""
    found: dict[str, Path] = {}
    missing: list[str] = []
    for file in spec.files:
        hits = [d / spec.folder / file for d in search_dirs() if (d / spec.folder / file).is_file()]
        if hits:
            found[file] = hits[0]
        else:
            missing.append(file)
    reason = "downloads are disabled"
    if missing and download:
        target = cache_dir() / spec.folder
        try:
            for file in list(missing):
                _download(spec.url(file), target / file, spec.files[file])
                found[file] = target / file
                missing.remove(file)
        except ConnectionError as exc:
            reason = f"the download failed ({exc})"
    if missing:
        places = "\n".join(f"  - {d / spec.folder}" for d in search_dirs())
        raise DatasetError(
            f"dataset '{spec.name}': raw file(s) {', '.join(missing)} not found and {reason}. "
            f"Put the original files (from {spec.url_template.format(file='<file>')}) in one of:\n"
            f"{places}\nor set GNNBOOK_DATA_DIR to a folder holding '{spec.folder}/'."
        )
    return found


def fetch(spec: DatasetSpec, download: bool = True) -> list[tuple[str, Path, bool]]:
    """Find (or download) every raw file of ``spec`` and check its SHA-256 now: ``(file, path, ok)`` per file.

    This is ``python -m gnnbook datasets --fetch``: run once online (or with ``$GNNBOOK_DATA_DIR`` pointing at a
    classroom's copy), and every later load works offline.  A download is checked before it is written.
    """
    return [(file, path, sha256_of(path) == spec.files[file]) for file, path in raw_files(spec, download).items()]
