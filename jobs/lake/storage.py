"""The lake's small files, read and written in one place: reports, summaries, checkpoints, JSON
sidecars, by every job (driver or rank), the Airflow plugin and the tools alike. (Spark's own
DataFrame reads and writes go through Hadoop.)

Everything here goes through a ``pyarrow.fs`` filesystem chosen from the path: a local folder,
``file://``, ``s3://`` (Hadoop's ``s3a://`` is read as ``s3://``; credentials, region and endpoint
from the usual ``AWS_*`` variables), ``gs://``, ``hdfs://``. Writes are atomic: a whole new file
appears or nothing does (written next to its final name and moved there; an object store's single
put is atomic on its own).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Any

import pyarrow.fs as pafs


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) for a lake path or URI."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), uri
    scheme, rest = uri.split("://", 1)
    if scheme in ("s3", "s3a"):
        # Built here rather than from the URI, which would ask AWS for the bucket's region first.
        return pafs.S3FileSystem(
            region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            endpoint_override=os.environ.get("AWS_ENDPOINT_URL") or None,
        ), rest
    return pafs.FileSystem.from_uri(uri)


def _join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}"


def list_files(folder: str, suffix: str) -> list[str]:
    """The files directly in ``folder`` whose names end with ``suffix``, sorted, as lake paths."""
    fs, path = filesystem(folder)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    names = sorted(info.base_name for info in infos if info.type == pafs.FileType.File)
    return [_join(folder, name) for name in names if name.endswith(suffix) and not name.startswith((".", "_"))]


def read_bytes(uri: str) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    fs, path = filesystem(uri)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as stream:
        return stream.read()


def write_bytes(uri: str, data: bytes) -> None:
    """Write ``data`` to ``uri`` atomically, replacing what was there."""
    fs, path = filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    if fs.type_name in ("s3", "gcs"):
        with fs.open_output_stream(path) as out:  # one put: the object appears whole or not at all
            out.write(data)
        return
    staging = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with fs.open_output_stream(staging) as out:
            out.write(data)
        fs.move(staging, path)  # a rename on local and HDFS filesystems
    finally:
        if fs.get_file_info(staging).type == pafs.FileType.File:
            fs.delete_file(staging)


def create_exclusive(uri: str, data: bytes) -> bool:
    """Create the file ``uri`` holding ``data`` unless it exists; whether this call created it.

    On a local filesystem the whole file appears at once and exactly one of several concurrent
    callers wins (a hard link, which fails when the name exists). Elsewhere it is a check and a
    write: two callers racing within a moment could both win (pyarrow has no conditional put).
    """
    fs, path = filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    if fs.type_name != "local":
        if fs.get_file_info(path).type != pafs.FileType.NotFound:
            return False
        write_bytes(uri, data)
        return True
    staging = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with open(staging, "wb") as out:  # a full disk fails here: the staging goes all the same
            out.write(data)
        os.link(staging, path)
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staging)


def write_text(uri: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``uri`` atomically, replacing what was there."""
    write_bytes(uri, text.encode("utf-8"))


def read_json(uri: str) -> Any | None:
    data = read_bytes(uri)
    return None if data is None else json.loads(data)


def write_json(uri: str, value: Any) -> None:
    write_bytes(uri, json.dumps(value, indent=2, sort_keys=True).encode())


def delete_file(uri: str) -> None:
    """Remove the file at ``uri``; nothing happens when it does not exist."""
    fs, path = filesystem(uri)
    if fs.get_file_info(path).type == pafs.FileType.File:
        fs.delete_file(path)


def delete_dir(uri: str) -> None:
    """Remove ``uri`` and everything under it; nothing happens when it does not exist."""
    fs, path = filesystem(uri)
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def exists(uri: str) -> bool:
    """Whether a file or folder is at ``uri``."""
    fs, path = filesystem(uri)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def entries(folder: str) -> list[tuple[str, bool]]:
    """(name, is a folder) of each entry directly in ``folder``; none when it does not exist."""
    fs, path = filesystem(folder)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return [(info.base_name, info.type == pafs.FileType.Directory) for info in infos]


def files_under(folder: str) -> list[tuple[str, int, int]]:
    """(path relative to ``folder``, modification time in ns, size) of every file anywhere under
    ``folder``, in one listing (one call on an object store); none when it does not exist."""
    fs, path = filesystem(folder)
    base = path.rstrip("/") + "/"
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return [(info.path.removeprefix(base), info.mtime_ns or 0, info.size or 0)
            for info in infos if info.type == pafs.FileType.File]


def read_head(uri: str, size: int) -> bytes:
    """Up to the first ``size`` bytes of the file at ``uri`` (not the whole file)."""
    fs, path = filesystem(uri)
    with fs.open_input_stream(path) as stream:
        return stream.read(size)


def is_dir(uri: str) -> bool:
    """Whether ``uri`` is a folder (a partition, on an object store a prefix with objects under it)."""
    fs, path = filesystem(uri)
    return fs.get_file_info(path).type == pafs.FileType.Directory
