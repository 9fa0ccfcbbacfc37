"""The layout keeps its promises: rewind/ never imports Airflow, no import cycle, modules stay small.

Read from the code itself (the ``ast`` of every module), so the README's map cannot drift from it
unnoticed: a new cycle, an Airflow import in the core, or a module grown past 400 lines fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rewind", "rewind_airflow")
MAX_LINES = 400
#: Modules allowed past MAX_LINES, each with the reason.
LONG_MODULES: dict[str, str] = {}


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def imports_of(path: Path, name: str) -> set[str]:
    """Modules imported anywhere in the file (top level and inside functions), absolute names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_rewind_never_imports_airflow() -> None:
    bad = {m: sorted(i for i in imports_of(p, m) if i == "airflow" or i.startswith("airflow."))
           for m, p in modules().items() if m.split(".")[0] == "rewind"}
    assert not {m: i for m, i in bad.items() if i}, bad


def test_no_import_cycle() -> None:
    mods = modules()
    graph = {m: {i for i in imports_of(p, m) if i in mods and i != m} for m, p in mods.items()}
    # a package's __init__ is entered by importing any of its modules: drop those edges (they hold no code)
    graph = {m: {i for i in deps if not m.startswith(i + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_modules_stay_small() -> None:
    big = {str(p.relative_to(ROOT)): n for p in modules().values()
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    unexplained = {f: n for f, n in big.items() if f not in LONG_MODULES}
    assert not unexplained, f"modules over {MAX_LINES} lines without a reason in LONG_MODULES: {unexplained}"
    stale = set(LONG_MODULES) - set(big)
    assert not stale, f"LONG_MODULES lists modules that are small now: {stale}"


def test_the_readme_map_names_every_package() -> None:
    readme = (ROOT / "README.md").read_text()
    folders = sorted({str(p.parent.relative_to(ROOT)) for p in modules().values()} - {"rewind"})
    missing = [f for f in folders if f"`{f}/" not in readme and f"`{f}`" not in readme]
    assert not missing, f"README's map of the code lacks {missing}"


def test_no_proof_or_replay_imports_a_streams_code() -> None:
    """The proofs and the replay read what a transform declares (rewind.stream.contract), never a
    stream's own modules: every stream gets the same guarantees (issue 26)."""
    streams = ("rewind.demo", "rewind.inventory")
    bad = {m: sorted(i for i in imports_of(p, m) if i.startswith(streams)) for m, p in modules().items()
           if m.startswith(("rewind.proof", "rewind.replay", "rewind.sink", "rewind.stream"))}
    assert not {m: v for m, v in bad.items() if v}


def test_the_design_cards_top_level() -> None:
    """Beside dags/: spark_jobs/ (the spark-submit applications, thin: they import rewind, never Airflow, and hand
    their arguments on) and plugins/ (an Airflow plugins folder, for deployments that use one: it registers the
    page of rewind_airflow), as DESIGN.md lays them out and the README's map names them."""
    jobs = {p.stem: p for p in (ROOT / "spark_jobs").glob("*.py") if p.stem != "__init__"}
    assert set(jobs) == {"stream", "replay"}, jobs
    for name, path in jobs.items():
        imported = imports_of(path, f"spark_jobs.{name}")
        assert {i.split(".")[0] for i in imported} <= {"sys", "rewind"}, imported
        assert len(path.read_text().splitlines()) <= 20, f"{path} is not thin"
    plugin_files = sorted((ROOT / "plugins").glob("*.py"))
    assert plugin_files, "plugins/ holds no plugin"
    for path in plugin_files:
        assert {i.split(".")[0] for i in imports_of(path, path.stem)} <= {"__future__", "importlib", "rewind_airflow"}
    readme = (ROOT / "README.md").read_text()
    assert "`spark_jobs/`" in readme and "`plugins/`" in readme
