"""The driver's lease, handed to the JVM that writes its checkpoint.

Spark writes a stream's checkpoint (offset and commit logs, state store versions) from JVM threads
that Python does not see. Rewind sets Spark's checkpoint file manager to
``io.rewind.checkpoint.FencedCheckpointFileManager`` (``rewind/jvm``): it publishes a file only
while the lease granted to the checkpoint is valid, and publishes the files that plan and commit
batches only if absent (a hard link locally, ``If-None-Match: *`` on S3A). This module grants:
at the take and at every renewal the epoch and the wall-clock time until which the JVM may write
(``LeaseKeeper.valid_until_wall``), and on a takeover a fence, after which that JVM writes nothing
there. A JVM with no grant for a checkpoint (a replay, a tool) writes as Spark's own managers do.
"""

from __future__ import annotations

import logging
from typing import Any

from rewind.control.lease import Lease
from rewind.control.leases import LeaseKeeper

log = logging.getLogger(__name__)

__all__ = ["FENCED_MANAGER", "fence", "grant", "use_fenced_file_manager", "withdraw"]

FENCED_MANAGER = "io.rewind.checkpoint.FencedCheckpointFileManager"
FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"


def _manager_class(spark: Any) -> Any:
    return getattr(spark._jvm, FENCED_MANAGER)  # the class, through py4j


def use_fenced_file_manager(spark: Any) -> None:
    """Every checkpoint a query of this session starts writes through the fenced manager."""
    spark.conf.set(FILE_MANAGER, FENCED_MANAGER)


def grant(spark: Any, checkpoint: str, keeper: LeaseKeeper) -> None:
    """Grant the JVM ``keeper``'s lease for ``checkpoint`` now and at every renewal; fence it on a takeover."""
    manager = _manager_class(spark)
    root = str(checkpoint)

    def renewed(lease: Lease, valid_until: float) -> None:
        manager.hold(root, lease.epoch, int(valid_until * 1000))

    def fenced(line: str) -> None:
        manager.fence(root, line)

    renewed(keeper.lease, keeper.valid_until_wall())
    keeper.on_renewed.append(renewed)
    keeper.on_fenced.append(fenced)
    if keeper.fenced.is_set():  # taken over between the take and now
        fenced(f"fenced: epoch {keeper.epoch} was taken over")
    log.info("checkpoint %s: written under lease epoch %d (%s)", root, keeper.epoch, FENCED_MANAGER)


def fence(spark: Any, checkpoint: str, why: str) -> None:
    """This JVM writes nothing more into ``checkpoint`` (the query stopped, or the lease is given up)."""
    try:
        _manager_class(spark).fence(str(checkpoint), why)
    except Exception:  # noqa: BLE001 - the session may be gone already
        log.warning("checkpoint %s: the JVM could not be fenced (%s)", checkpoint, why)


def withdraw(spark: Any, checkpoint: str) -> None:
    """After the query stopped: nothing more is written there by this JVM (its background threads
    included) until a new grant."""
    fence(spark, checkpoint, f"the driver's query on {checkpoint} has stopped")
