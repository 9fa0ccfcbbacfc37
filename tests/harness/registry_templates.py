"""Registry entries for the demo transform with everything under one directory.

Why: tests, benchmarks and the chaos harness each need a throwaway stream (its own topic,
sink, checkpoint and status dir); writing the YAML in one place keeps them in step with the
registry's schema.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def demo_stream(name: str, topics: str | Iterable[str], home: str | Path, *, max_offsets: int = 1000,
                sink_url: str | None = None, **extra: str) -> str:
    """One ``streams:`` entry; `extra` adds or overrides keys (values are YAML text)."""
    topic_list = [topics] if isinstance(topics, str) else list(topics)
    url = sink_url or f"sqlite:///{home}/sink-{name}.db"
    keys = {"topics": f"[{', '.join(topic_list)}]", "transform": "rewind.demo.transform:DemoTransform",
            "source": f"{{options: {{startingOffsets: earliest, maxOffsetsPerTrigger: {max_offsets}}}}}",
            "sink": f'{{url: "{url}", table_prefix: {name}_}}',
            "checkpoint": f"{home}/checkpoints/{name}", "status_dir": f"{home}/status", **extra}
    return f"  {name}:\n" + "".join(f"    {k}: {v}\n" for k, v in keys.items())


def write_registry(path: str | Path, *entries: str) -> Path:
    path = Path(path)
    path.write_text("streams:\n" + "".join(entries))
    return path


def inventory_stream(name: str, topics: str | Iterable[str], home: str | Path, *, max_offsets: int = 400,
                     sink_url: str | None = None, **extra: str) -> str:
    """One ``streams:`` entry of the inventory transform (stateless, a ``latest`` table, the contract
    proof); `extra` adds or overrides keys (values are YAML text)."""
    topic_list = [topics] if isinstance(topics, str) else list(topics)
    url = sink_url or f"sqlite:///{home}/sink-{name}.db"
    keys = {"topics": f"[{', '.join(topic_list)}]", "transform": "rewind.inventory.transform:InventoryTransform",
            "source": f"{{format: kafka, options: {{startingOffsets: earliest, maxOffsetsPerTrigger: {max_offsets}}}}}",
            "sink": f'{{url: "{url}", table_prefix: {name}_}}', "checkpoint": f"{home}/checkpoints/{name}",
            "status_dir": f"{home}/status", "dq_suite": "contract", **extra}
    return f"  {name}:\n" + "".join(f"    {k}: {v}\n" for k, v in keys.items())
