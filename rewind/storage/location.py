"""Which storage a location names: a local path, or an ``s3://`` / ``s3a://`` URL.

| location | storage |
|---|---|
| ``s3://BUCKET/PREFIX``, ``s3a://BUCKET/PREFIX`` | ``S3Storage`` of ``config``, else of the environment's S3 |
| anything else | ``LocalStorage`` (a path; a URL of another scheme reads as a directory that does not exist) |

Every "open this checkpoint / savepoint copy / pointer" goes through here, so a new place to keep them is a
new backend and one row above, not a branch in each caller.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rewind.storage.base import Storage
from rewind.storage.local import LocalStorage
from rewind.storage.s3 import S3Storage
from rewind.storage.s3_config import S3Config, is_s3_url, parse_s3_url, resolve_s3_config

__all__ = ["open_file", "open_storage", "read_text"]


def open_storage(location: str | Path, config: S3Config | None = None) -> Storage:
    """The storage rooted at ``location`` (see the table above). ``config`` is the S3 to use for a URL (its
    bucket is the URL's); by default the environment's."""
    text = str(location)
    if not is_s3_url(text):
        return LocalStorage(text)
    bucket, prefix = parse_s3_url(text)
    base = config if config is not None else resolve_s3_config(require_bucket=False)
    return S3Storage(dataclasses.replace(base, bucket=bucket), prefix, scheme=text.split("://", 1)[0])


def open_file(location: str | Path, config: S3Config | None = None) -> tuple[Storage, str]:
    """(the storage of the folder that holds the file at ``location``, the file's name there): for a file
    kept beside a checkpoint, such as its pointer ``<checkpoint>.active.json``."""
    text = str(location).rstrip("/")
    if not is_s3_url(text):
        return LocalStorage(Path(text).parent), Path(text).name
    scheme, rest = text.split("://", 1)
    folder, _, name = rest.rpartition("/")  # folder: at least the bucket
    return open_storage(f"{scheme}://{folder}", config), name


def read_text(location: str | Path, rel: str) -> str:
    """One file under ``location`` as text (``offsets/7`` of a checkpoint), local or in S3; OSError when it
    cannot be read. Why OSError for every cause: the batch writers read the offset log of the checkpoint
    their stream writes, and treat any failure to read it alike."""
    try:
        return open_storage(location).read_bytes(rel).decode()
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - S3's errors are not OSErrors; callers catch OSError
        raise OSError(f"{str(location).rstrip('/')}/{rel}: {exc}") from exc
