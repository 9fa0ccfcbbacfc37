"""Where Rewind keeps files: one interface (``Storage``), a local and an S3 backend, and ``open_storage``.

``base`` is the contract, ``local`` and ``s3`` the backends, ``s3_config`` the S3 settings, the one client
cache and the S3 errors, ``location`` what a path or URL opens.
"""

from rewind.storage.base import CopyMismatch, Digest, FileInfo, Storage, sha256_of
from rewind.storage.local import LocalStorage
from rewind.storage.location import open_file, open_storage, read_text
from rewind.storage.s3 import S3Storage
from rewind.storage.s3_config import (
    S3_SCHEMES,
    S3Config,
    S3Error,
    S3Unreachable,
    client_for,
    format_s3_url,
    is_s3_url,
    parse_s3_url,
    resolve_s3_config,
    s3_client,
)

__all__ = ["S3_SCHEMES", "CopyMismatch", "Digest", "FileInfo", "LocalStorage", "S3Config", "S3Error", "S3Storage",
           "S3Unreachable", "Storage", "client_for", "format_s3_url", "is_s3_url", "open_file", "open_storage",
           "parse_s3_url", "read_text", "resolve_s3_config", "s3_client", "sha256_of"]
