"""One file of a stream's checkpoint as text, wherever the checkpoint is (local or ``s3a://``).

Why apart from ``store``: reading S3 needs ``rewind.s3``'s client, and ``rewind.s3`` itself uses
``store``'s URL parsing; here both are used and neither imports the other back.
"""

from __future__ import annotations

import functools
from pathlib import Path

from rewind.checkpoints.store import CheckpointStore, is_s3_url, open_store

__all__ = ["read_text"]


def read_text(location: str | Path, rel: str) -> str:
    """One file of a checkpoint as text (``offsets/7``), local or in S3; OSError when unreadable.

    Why: the batch writers read the offset log of the checkpoint their stream writes, which may be
    ``s3a://`` (the S3 client is made once per location: a batch reads two files)."""
    if not is_s3_url(location):
        return (Path(location) / rel).read_text()
    try:
        return _s3_store(str(location)).read_bytes(rel).decode()
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - botocore's errors are not OSErrors; callers catch OSError
        raise OSError(f"{str(location).rstrip('/')}/{rel}: {exc}") from exc


@functools.lru_cache(maxsize=8)
def _s3_store(location: str) -> CheckpointStore:
    from rewind.s3 import s3_client

    return open_store(location, s3_client())
