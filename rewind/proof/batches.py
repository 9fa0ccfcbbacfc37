"""Which sink rows a proof leaves to the next one: those a batch wrote after the one it proves (pure).

Why not "a ``batch_id`` above N": a row's ``batch_id`` is its checkpoint's numbering, which starts
again at 0 on a new checkpoint (a stateless upgrade) and goes back on a restore, so rows an older
checkpoint committed long ago can carry ids above the current one's. The I/O side
(``rewind.checkpoints.watermark.planned_after``) lists the batches the active checkpoint planned after
N, after the sink's rows were read (a batch is planned before it writes), and hands them in here.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd


def written_later(batch_ids: pd.Series, last_batch: int | None, later: Collection[int] | None) -> np.ndarray:
    """Rows written after ``last_batch``: by a batch in ``later`` (the checkpoint's plans after it), or,
    when the checkpoint could not be read, by any id above it. A replay's rows (null) never are."""
    ids = pd.to_numeric(batch_ids, errors="coerce")
    if later is not None:
        return ids.isin(list(later)).to_numpy(dtype=bool)
    if last_batch is None:
        return np.zeros(len(ids), dtype=bool)
    return (ids > last_batch).fillna(False).to_numpy(dtype=bool)
