"""Where the throwaway PostgreSQL's binaries are, and which OS user runs them.

Why apart from the server (`tests.harness.pg`): whether PostgreSQL can run here at all is asked
before anything starts -- by the test session (`postgres_available` decides between a throwaway
server and a skip) and by every start -- and its answer says what to install.

- The server binaries (``initdb``, ``pg_ctl``, ``postgres``) come from the distribution
  (Debian: ``apt-get install postgresql``), which keeps them off PATH in
  ``/usr/lib/postgresql/<version>/bin``; ``$REWIND_PG_BIN`` points elsewhere.
- ``initdb`` and ``postgres`` refuse to run as root. When we are root, every
  PostgreSQL binary is run as the ``postgres`` OS user (created by the Debian
  package) via ``subprocess``'s ``user=``/``group=`` (a setuid in the child:
  no PAM, no shell quoting, unlike ``su``/``runuser``), and the temp dir is
  chowned to it. The temp dir is created under ``/tmp`` by default because the
  server user must be able to traverse every parent directory (`check_traversable`).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
from pathlib import Path

from rewind.errors import Failed

__all__ = ["INSTALL_HINT", "SERVER_OS_USER", "PostgresError", "PostgresNotInstalled", "check_traversable",
           "find_pg_bin", "postgres_available", "server_user"]

SERVER_OS_USER = "postgres"
INSTALL_HINT = "install it with: apt-get update && apt-get install -y postgresql"
_REQUIRED = ("initdb", "pg_ctl", "postgres")


class PostgresError(Failed, RuntimeError):
    """The throwaway server could not be set up, started or stopped; the message says why."""


class PostgresNotInstalled(PostgresError):
    """No PostgreSQL server binaries were found."""


def _version_key(path: Path) -> tuple[int, ...]:
    """Sort key for /usr/lib/postgresql/<version>/bin: numeric, so 15 > 9.6."""
    parts = re.findall(r"\d+", path.parent.name)
    return tuple(int(p) for p in parts) if parts else (-1,)


def find_pg_bin() -> Path:
    """The directory holding initdb, pg_ctl and postgres.

    Order: ``$REWIND_PG_BIN``, then ``/usr/lib/postgresql/*/bin`` newest first
    (Debian/Ubuntu keep the server binaries off PATH), then PATH.
    """
    candidates: list[Path] = []
    env = os.environ.get("REWIND_PG_BIN")
    if env:
        candidates.append(Path(env))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    which = shutil.which("pg_ctl")
    if which:
        candidates.append(Path(which).resolve().parent)
    for cand in candidates:
        if all(os.access(cand / exe, os.X_OK) for exe in _REQUIRED):
            return cand
    looked = ", ".join(str(c) for c in candidates) or "/usr/lib/postgresql/*/bin and PATH"
    raise PostgresNotInstalled(
        f"PostgreSQL server binaries ({', '.join(_REQUIRED)}) not found (looked in {looked}); {INSTALL_HINT}"
    )


def server_user() -> tuple[int, int] | None:
    """(uid, gid) to run PostgreSQL as, or None to run as ourselves (non-root)."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(SERVER_OS_USER)
    except KeyError:
        raise PostgresError(
            f"running as root, and PostgreSQL refuses to run as root, but the '{SERVER_OS_USER}' OS user "
            f"does not exist; {INSTALL_HINT} (the package creates it) or run as a non-root user"
        ) from None
    return pw.pw_uid, pw.pw_gid


def postgres_available() -> bool:
    """True if a throwaway server can be started here (binaries present, a usable OS user)."""
    try:
        find_pg_bin()
        server_user()
    except PostgresError:
        return False
    return True


def check_traversable(parent: Path, ids: tuple[int, int] | None) -> None:
    """The server user must reach the temp dir: every ancestor needs o+x (or be theirs)."""
    if ids is None:
        return
    p = parent.resolve()
    for d in [p, *p.parents]:
        st = d.stat()
        if st.st_uid != ids[0] and not st.st_mode & stat.S_IXOTH:
            raise PostgresError(
                f"the '{SERVER_OS_USER}' user cannot traverse {d} (mode {stat.filemode(st.st_mode)}); "
                f"choose a parent_dir under /tmp"
            )
