"""``rewind stream new NAME``: a new stream's package and registry entry, as text (pure: no I/O).

Why: a PySpark user who has never seen Rewind should start from a stream that already runs and
proves itself (``rewind verify`` exits 0), then change the 2-3 marked places, not from a blank
page and the contract's docstrings. The package is ``NAME/`` with ``transform.py`` (every member
of ``rewind.api.contract.Transform`` for a simple JSON record), ``producer.py`` (test records)
and ``test_NAME.py`` (``expect()`` on a few records); the registry entry is appended to the
registry's text, keeping its comments. The command line (``rewind.cli.stream``) checks the
paths and writes; everything here is text in, text out, and refuses with one line.
"""

from __future__ import annotations

import keyword
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from rewind.cli import scaffold_templates as templates
from rewind.errors import Refused

#: A stream name that is also a package name: the registry's rule (it becomes DAG ids, table names
#: and S3 keys), which makes it a lowercase Python identifier.
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
#: Packages a stream's package must not shadow (besides the standard library's): what it imports.
TAKEN_PACKAGES = frozenset(("rewind", "rewind_airflow", "pyspark", "pandas", "numpy", "pyarrow", "confluent_kafka",
                            "yaml", "pydantic", "sqlalchemy", "airflow", "pytest", "tests", "test"))
_STREAMS_LINE = re.compile(r"^streams:[ \t]*(?P<value>\{[^\n#]*\}|null|~)?[ \t]*(?P<comment>#[^\n]*)?$", re.MULTILINE)


class ScaffoldRefused(Refused, ValueError):
    """A name, topic or registry the scaffold cannot use; nothing was written."""


def check_name(name: str) -> None:
    """Refuse a stream name that is not a lowercase identifier, or that would shadow a package."""
    if not NAME_RE.match(name) or keyword.iskeyword(name):
        raise ScaffoldRefused(f"stream name {name!r}: use a lowercase Python identifier (letters, digits and _, "
                              "starting with a letter, at most 41 characters): it names the package, the tables, "
                              "the DAGs and the S3 keys")
    if name in sys.stdlib_module_names or name in TAKEN_PACKAGES:
        raise ScaffoldRefused(f"stream name {name!r} is also the name of a Python package it would shadow "
                              f"(`import {name}`): choose another")


def class_name(name: str) -> str:
    """``my_orders`` -> ``MyOrdersTransform``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_")) + "Transform"


def _fill(template: str, name: str, topic: str = "", partitions: int = 1, directory: str = "") -> str:
    holes = {"__NAME__": name, "__CLASS__": class_name(name), "__TOPIC__": topic, "__PARTITIONS__": str(partitions),
             "__DIR__": directory}
    return re.sub("|".join(holes), lambda m: holes[m.group(0)], template)


def package_files(name: str, topic: str | None = None, partitions: int = 3) -> dict[str, str]:
    """The new package as ``{relative path: text}`` (paths start with ``NAME/``)."""
    check_name(name)
    topic = check_topic(topic or name)
    return {f"{name}/{file}": _fill(text, name, topic, partitions)
            for file, text in (("__init__.py", templates.INIT), ("transform.py", templates.TRANSFORM),
                               ("producer.py", templates.PRODUCER), (f"test_{name}.py", templates.TEST))}


def check_topic(topic: str) -> str:
    if not TOPIC_RE.match(topic):
        raise ScaffoldRefused(f"topic {topic!r}: Kafka topic names are letters, digits, '.', '_' and '-'")
    return topic


def registry_entry(name: str, topic: str | None = None, partitions: int = 3, directory: str = ".",
                   indent: str = "  ") -> str:
    """The stream's registry entry (YAML text, each line indented by ``indent``)."""
    check_name(name)
    if partitions < 1:
        raise ScaffoldRefused(f"--partitions must be at least 1, got {partitions}")
    text = _fill(templates.REGISTRY_ENTRY, name, check_topic(topic or name), partitions, directory)
    return "".join(indent + line for line in text.splitlines(keepends=True))


def add_to_registry(text: str, name: str, topic: str | None = None, partitions: int = 3, directory: str = ".",
                    where: str = "the registry") -> str:
    """The registry's text with the new stream appended below ``streams:``, its comments kept.

    ``text``: the registry as it is ("" when the file does not exist). Refused: a name already
    there, text that is not a registry, a ``streams:`` written in flow style ({...}).
    """
    try:
        doc = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as exc:
        raise ScaffoldRefused(f"{where}: not valid YAML ({str(exc).splitlines()[0]}); nothing was written")
    if doc is not None and (not isinstance(doc, dict) or set(doc) != {"streams"}
                            or not isinstance(doc["streams"], (dict, type(None)))):
        raise ScaffoldRefused(f"{where}: expected only a top-level mapping 'streams: {{name: {{...}}}}'; "
                              "nothing was written")
    streams: dict[str, Any] = (doc or {}).get("streams") or {}
    if name in streams:
        raise ScaffoldRefused(f"stream {name!r} is already in {where}: choose another name (nothing was written)")
    head = text if not text or text.endswith("\n") else text + "\n"
    line = _STREAMS_LINE.search(head)
    if line is None:
        head += "streams:\n"
        indent = "  "
    elif line.group("value") is not None:
        if streams:
            raise ScaffoldRefused(f"{where}: 'streams:' is written in flow style ({{...}}); write it as a block "
                                  "mapping, or add the entry by hand; nothing was written")
        comment = line.group("comment")
        head = head[:line.start()] + "streams:" + (f"  {comment}" if comment else "") + head[line.end():]
        indent = "  "
    else:
        indent = _entry_indent(head[line.end():]) or "  "
    out = head + registry_entry(name, topic, partitions, directory, indent)
    try:
        after = yaml.safe_load(out)
    except yaml.YAMLError:
        after = None
    if not isinstance(after, dict) or list(after.get("streams") or {}) != [*streams, name]:
        raise ScaffoldRefused(f"{where}: could not append the stream to its 'streams:' mapping (an unusual layout); "
                              "add the entry by hand (docs/add-your-stream.md shows one); nothing was written")
    return out


def _entry_indent(body: str) -> str | None:
    """The indentation of the existing entries below ``streams:`` (None: there are none)."""
    for row in body.splitlines():
        stripped = row.lstrip(" ")
        if stripped and not stripped.startswith("#"):
            return row[:len(row) - len(stripped)] or None
    return None


def next_commands(name: str, directory: str | Path, registry: str | Path | None) -> list[str]:
    """The three commands that try the new stream: produce, run what is there, prove it.

    ``registry``: the file the entry went to, when it is not the default one (``--registry``)."""
    path = f"PYTHONPATH={shlex.quote(str(directory))}"
    reg = f" --registry {shlex.quote(str(registry))}" if registry else ""
    return [f"{path} python -m {name}.producer --count 2000",
            f"{path} rewind stream run {name} --available-now{reg}",
            f"{path} rewind verify {name}{reg}"]
