"""Running the suite with Great Expectations 1.x, and rendering its Data Docs.

Why apart: this is the only module that imports Great Expectations (4-5 s on first import, so
lazily), and it turns GE's result objects into plain ``FailedExpectation``s with example rows, so
nothing else needs GE's types. It decides nothing: what is checked is ``rewind.proof.checks``,
what is judged is ``rewind.proof.frames``. The actions on a result (storing it locally and in S3)
are ``rewind.proof.publish``. Data Docs are built here, into the run directory, because GE renders
them from the in-memory stores of the context the validation ran in, which ends with the run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from rewind.proof.checks import CHECKS, FRAME_NOTES, SUITE, Check
from rewind.proof.report import FailedExpectation, jsonable

DOCS_SITE = "rewind_dq"
EXAMPLES = 5
RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
_GX_LOCK = threading.Lock()  # get_context sets GE's process-wide current context
#: Great Expectations logs, at INFO and while it is being imported, one line for every closure its
#: public-API decorator meets ("Skipping registering function ... because it is a closure"): some
#: two hundred lines in every DQ task log and on the command line, none of them about the proof.
CHATTY_LOGGERS = ("great_expectations._docs_decorators",)


def quiet_great_expectations() -> None:
    """Silence GE's import-time chatter (``CHATTY_LOGGERS``) below WARNING; call before importing GE."""
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


quiet_great_expectations()


class Validation(NamedTuple):
    """What ``validate_frames`` returns (a tuple, so ``results, failures, total = ...`` reads it too)."""

    suites: dict[str, Any]               # GE results as JSON, per suite name
    failures: list[FailedExpectation]    # with example rows
    expectations: int                    # how many were run


def _gx_context(docs_dir: Path | None) -> Any:
    """An ephemeral context (in-memory stores) with one Data Docs site in ``docs_dir`` (None: no site).

    Creating one takes a few milliseconds (importing great_expectations takes 4-5 s, once per process),
    so every proof gets its own context: its in-memory stores then hold only this run's results,
    and its docs site is this run's directory.
    """
    quiet_great_expectations()
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites={} if docs_dir is None else {DOCS_SITE: {
            "class_name": "SiteBuilder", "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}},
        analytics_enabled=False, progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False))
    return gx.get_context(mode="ephemeral", project_config=config)


def _expectation(check: Check) -> Any:
    import great_expectations.expectations as gxe

    return getattr(gxe, check.expectation)(**check.kwargs, description=f"[{check.name}] {check.proves}",
                                           meta={"rewind_check": check.name})


def validate_frames(frames: Mapping[str, pd.DataFrame], stream: str, run_id: str, docs_dir: Path | None,
                    checks: Sequence[Check] = CHECKS, suite_name: str = SUITE,
                    notes: Mapping[str, str] = FRAME_NOTES) -> Validation:
    """Validate each frame with its suite ``STREAM.exactly_once.FRAME``; build Data Docs into ``docs_dir``.

    Returns the GE results as JSON per suite, the failed expectations with example rows, and how many ran.
    """
    quiet_great_expectations()
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    by_name = {c.name: c for c in checks}
    results: dict[str, Any] = {}
    failures: list[FailedExpectation] = []
    run = RunIdentifier(run_name=run_id, run_time=datetime.now(UTC))
    total = 0
    with _GX_LOCK:
        ctx = _gx_context(docs_dir)
        source = ctx.data_sources.add_pandas(name=f"{stream}_proof")
        for frame_name, df in frames.items():
            frame_checks = [c for c in checks if c.frame == frame_name]
            if not frame_checks:
                continue
            name = f"{stream}.{suite_name}.{frame_name}"
            batch_def = source.add_dataframe_asset(name=frame_name).add_batch_definition_whole_dataframe("whole")
            suite = ctx.suites.add(gx.ExpectationSuite(
                name=name, expectations=[_expectation(c) for c in frame_checks],
                meta={"stream": stream, "frame": frame_name, "notes": notes[frame_name]}))
            vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch_def, suite=suite))
            res = vd.run(batch_parameters={"dataframe": df}, result_format=RESULT_FORMAT, run_id=run)
            results[name] = res.to_json_dict()
            total += len(res.results)
            for r in res.results:
                if r.success:
                    continue
                check = by_name[r.expectation_config.meta["rewind_check"]]
                failures.append(_failure(check, r, df))
        if docs_dir is not None:
            ctx.build_data_docs(site_names=[DOCS_SITE])
    return Validation(results, failures, total)


def _failure(check: Check, r: Any, df: pd.DataFrame) -> FailedExpectation:
    """A failed GE result as the check it was, with up to ``EXAMPLES`` offending rows (or errors)."""
    res = dict(r.result or {})
    idx = res.get("partial_unexpected_index_list") or []
    examples: list[dict[str, Any]] = []
    errors = _exception_messages(r.exception_info)
    if errors:
        examples = [{"error": e} for e in errors[:EXAMPLES]]
    elif idx and not isinstance(idx[0], dict):
        examples = [jsonable(rec) for rec in df.loc[[i for i in idx[:EXAMPLES] if i in df.index]]
                    .to_dict(orient="records")]
    else:
        examples = [{"value": jsonable(v)} for v in (res.get("partial_unexpected_list") or [])[:EXAMPLES]]
    return FailedExpectation(check.name, check.frame, check.expectation, check.proves,
                             res.get("unexpected_count"), res.get("element_count"), examples,
                             jsonable(res.get("observed_value")))


def _exception_messages(info: Any) -> list[str]:
    """GE 1.x puts a failed metric's exception under its metric id (or, older, at the top level)."""
    if not isinstance(info, dict):
        return []
    if "exception_message" in info:
        return [str(info["exception_message"])] if info.get("raised_exception") else []
    return [str(v["exception_message"]) for v in info.values()
            if isinstance(v, dict) and v.get("raised_exception") and v.get("exception_message")]
