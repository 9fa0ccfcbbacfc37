"""One error hierarchy, so that every caller can tell "refused, nothing done" from "tried and broke".

Why: a person at 3 a.m. (and the Airflow task that retries, and the CI script that reads an exit
code) needs to know whether anything changed. A *refusal* means the input or the situation was
wrong and nothing was touched: fix the input, run again, no retry helps. A *failure* means the
work started and broke (a broker went away, a file vanished): a retry may help, and the message
says what was left as it was. A *proof violation* means the work ran and the data disproves a
guarantee.

Every class carries the exit code of the command line (``rewind.cli``) and whether an Airflow
task should retry it (``rewind_airflow.errors.airflow_exception`` maps them). Domain errors
subclass these (e.g. ``ReplayRefused(Refused)``), so ``except Refused`` catches every refusal.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2          # argparse's own code for a command line it cannot parse
EXIT_REFUSED = 3
EXIT_PROOF_VIOLATION = 4

EXIT_CODES_HELP = (f"exit codes: {EXIT_OK} ok, {EXIT_FAILED} failed (tried and broke; the message says what was "
                   f"left as it was), {EXIT_USAGE} usage error, {EXIT_REFUSED} refused (nothing was done), "
                   f"{EXIT_PROOF_VIOLATION} proof violation (the data disproves a guarantee)")


class RewindError(Exception):
    """Base of every error Rewind raises on purpose; its message says the cause and what to change."""

    exit_code = EXIT_FAILED
    retry = True


class Refused(RewindError):
    """Bad input or an unsafe situation: nothing was done. Fix the input; retrying changes nothing."""

    exit_code = EXIT_REFUSED
    retry = False


class Failed(RewindError):
    """The work started and broke; the message says what was left as it was. A retry may help."""

    exit_code = EXIT_FAILED
    retry = True


class ProofViolation(RewindError):
    """The proof ran and the data disproves a guarantee (duplicates, gaps, wrong windows)."""

    exit_code = EXIT_PROOF_VIOLATION
    retry = False


def exit_code_of(exc: BaseException) -> int:
    """The command line's exit code for ``exc`` (``EXIT_FAILED`` for anything unforeseen)."""
    return exc.exit_code if isinstance(exc, RewindError) else EXIT_FAILED


class SinkRefused(Refused, ValueError):
    """Bad input to a sink (a table spec, rows, a batch id, a database URL, a table without its columns):
    nothing was written; the message says what to change. Here, not in ``rewind.sink``, because a
    stream author's table declarations (``rewind.api.tables``) raise it and import nothing of the sink."""
