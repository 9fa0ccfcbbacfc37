"""The unit of change of an upgrade: one stream's registry entry, as YAML text.

How a new version is given: a registry file (``rewind stream upgrade NAME --registry-entry FILE``,
or the YAML pasted into the Airflow upgrade form) in the registry's own format, ``streams: {NAME:
{...}}``, validated exactly as the registry is. It may be a one-stream file or an edited copy of
the whole registry; any other stream it holds must be unchanged (an upgrade changes one stream).

Why Rewind writes the registry itself: the registry is what every process reads (the supervisor
DAG relaunching a stream, the command line, the page), so the entry that runs must be the one the
registry says. The upgrade replaces the stream's block of lines and nothing else (the rest of the
file is kept byte for byte, comments included), atomically, and only if the file is still what it
read; the block it replaced is kept by its config hash (``rewind.upgrade.history``), so a rollback
writes back the very text that ran.

The text functions are pure; ``load_candidate`` and ``write_registry`` are the I/O.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from rewind.errors import Refused
from rewind.registry import load_registry


class EntryRefused(Refused, ValueError):
    """The new entry cannot be used as given; the message says what to change. Nothing was done."""


_STREAMS = re.compile(r"^streams\s*:\s*(#.*)?$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _blank(line: str) -> bool:
    return not line.strip()


def entry_span(text: str, name: str) -> tuple[int, int]:
    """Line numbers ``[first, end)`` of stream ``name``'s entry under ``streams:`` (block style).

    The entry is its key line and every following line indented deeper (blank lines inside
    included, trailing ones not); a comment at the entries' own indent belongs to what follows it.
    """
    lines = text.split("\n")
    top = next((i for i, line in enumerate(lines) if _STREAMS.match(line)), None)
    if top is None:
        raise EntryRefused("no top-level 'streams:' block (written as a block mapping) to find the entry in")
    key = re.compile(rf"^(\s+)(['\"]?){re.escape(name)}\2\s*:(\s|$)")
    first = level = None
    for i in range(top + 1, len(lines)):
        line = lines[i]
        if _blank(line) or line.lstrip().startswith("#"):
            continue
        if _indent(line) == 0:
            break
        level = _indent(line) if level is None else level
        if _indent(line) == level and key.match(line):
            first = i
            break
    if first is None or level is None:
        raise EntryRefused(f"stream {name!r} is not an entry of the 'streams:' block")
    end = first + 1
    while end < len(lines) and (_blank(lines[end]) or _indent(lines[end]) > level):
        end += 1
    while end > first + 1 and _blank(lines[end - 1]):
        end -= 1
    return first, end


def entry_text(text: str, name: str) -> str:
    """Stream ``name``'s entry as written (its lines, unindented to the entry's own level)."""
    first, end = entry_span(text, name)
    lines = text.split("\n")[first:end]
    cut = _indent(lines[0])
    return "\n".join(line[cut:] if len(line) >= cut else line.lstrip(" ") for line in lines) + "\n"


def with_entry(text: str, name: str, entry: str) -> str:
    """``text`` with stream ``name``'s entry replaced by ``entry`` (``entry_text``'s form), re-indented to
    where the old one stood; every other line is kept as it was."""
    first, end = entry_span(text, name)
    lines = text.split("\n")
    pad = " " * _indent(lines[first])
    block = [pad + line if line.strip() else "" for line in entry.rstrip("\n").split("\n")]
    return "\n".join(lines[:first] + block + lines[end:])


def _load(text: str, where: str, directory: Path) -> Any:
    """Validate ``text`` as a registry (the same strict loader, ``${VAR}`` expanded from the environment)."""

    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=directory, prefix=".rewind-upgrade-",
                                     delete=False) as tmp:
        tmp.write(text)
    try:
        registry = load_registry(tmp.name)
    except Refused as exc:
        raise EntryRefused(f"{where}: {str(exc).replace(tmp.name, where)}") from None
    finally:
        os.unlink(tmp.name)
    return registry


def same(a: Any, b: Any) -> bool:
    """Two entries are the same stream (alerts aside: a file without the registry's top-level
    ``alerts`` block still names the same entry)."""
    return a is not None and b is not None and a.model_dump(exclude={"alerts"}) == b.model_dump(exclude={"alerts"})


def load_candidate(registry_file: str | Path, name: str, given: str, where: str) -> tuple[str, str, str, Any]:
    """From the registry's text and the given file's (``given``, named ``where`` in messages):
    ``(old entry text, new entry text, the registry's new text, the new StreamSpec)``.

    Refused (nothing was done): a file that is not a registry naming the stream, an entry that fails
    validation, another stream changed, or a registry whose layout the entry cannot be replaced in.
    """
    path = Path(registry_file)
    current = path.read_text()
    live = _load(current, str(path), path.parent)
    if name not in live.streams:
        raise EntryRefused(f"stream {name!r} is not in the registry {path}")
    try:
        doc = yaml.safe_load(given)
    except yaml.YAMLError as exc:
        raise EntryRefused(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("streams"), dict) or name not in doc["streams"]:
        raise EntryRefused(f"{where}: expected a registry file `streams: {{{name}: {{...}}}}` holding the new entry "
                           f"of {name} (the registry's own format)")
    offered = _load(given, where, path.parent)
    changed = sorted(s for s, other in offered.streams.items()
                     if s != name and (s not in live.streams or not same(other, live.streams[s])))
    if changed:
        raise EntryRefused(f"{where} also changes stream(s) {', '.join(changed)}: an upgrade changes one stream; "
                           f"give {name}'s entry alone (or an otherwise unchanged copy of the registry)")
    new_entry = entry_text(given, name)
    new_text = with_entry(current, name, new_entry)
    candidate = _load(new_text, str(path), path.parent)
    if not same(candidate.streams.get(name), offered.streams[name]) or any(
            not same(candidate.streams.get(s), spec) for s, spec in live.streams.items() if s != name):
        raise EntryRefused(f"{path}: the entry of {name} could not be replaced in this file's layout; write the "
                           "registry's 'streams:' as a block mapping, one entry per stream")
    return entry_text(current, name), new_entry, new_text, candidate.streams[name]


def write_registry(registry_file: str | Path, expected: str, text: str) -> None:
    """Replace the registry's text with ``text`` (atomic), refused when it is no longer ``expected``:
    someone changed it meanwhile, and their change must not be overwritten."""
    target = Path(registry_file).resolve()
    if target.read_text() != expected:
        raise EntryRefused(f"the registry {registry_file} changed while the upgrade ran; its entry was not written "
                           "(run the upgrade again against the registry as it is now)")
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(partial, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    shutil.copymode(target, partial)
    os.replace(partial, target)


def check_writable(registry_file: str | Path) -> None:
    target = Path(registry_file).resolve()
    if not os.access(target, os.W_OK) or not os.access(target.parent, os.W_OK):
        raise EntryRefused(f"the registry {registry_file} cannot be written: an upgrade switches the stream's entry "
                           "in it (and a rollback switches it back); make it writable, nothing was done")
