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
    """The proofs and the replay read what a transform declares (rewind.api.contract), never a
    stream's own modules: every stream gets the same guarantees (issue 26)."""
    streams = ("rewind.demo", "rewind.inventory")
    bad = {m: sorted(i for i in imports_of(p, m) if i.startswith(streams)) for m, p in modules().items()
           if m.startswith(("rewind.proof", "rewind.replay", "rewind.sink", "rewind.api", "rewind.driver"))}
    assert not {m: v for m, v in bad.items() if v}


def test_the_design_cards_top_level() -> None:
    """Beside dags/: spark_jobs/ (the spark-submit applications, thin: they import rewind, never Airflow, and hand
    their arguments on) and plugins/ (an Airflow plugins folder, for deployments that use one: it registers the
    page of rewind_airflow), as DESIGN.md lays them out and the README's map names them."""
    jobs = {p.stem: p for p in (ROOT / "spark_jobs").glob("*.py") if p.stem != "__init__"}
    assert set(jobs) == {"stream", "replay", "preflight"}, jobs
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


def package_of(module: str) -> str:
    """``rewind.proof.dq`` -> ``proof``; a module at the top of ``rewind`` is its own package (``registry``)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "rewind" and len(parts) > 1 else parts[0]


def package_graph() -> dict[str, dict[str, set[str]]]:
    """Package -> package it imports -> the modules that do (imports inside functions counted)."""
    graph: dict[str, dict[str, set[str]]] = {}
    for m, p in modules().items():
        if not m.startswith("rewind."):
            continue
        src = package_of(m)
        for i in imports_of(p, m):
            if i.startswith("rewind.") and (dst := package_of(i)) != src and i.split(".")[1] != "__init__":
                graph.setdefault(src, {}).setdefault(dst, set()).add(m)
    return graph


def test_packages_depend_one_way() -> None:
    """No two packages of rewind/ import each other, counting imports inside functions (issue 35: six pairs
    hid that way, 402 of 561 imports between packages inside functions). Nor any longer loop."""
    graph = package_graph()
    pairs = sorted((a, b, sorted(graph[a][b]), sorted(graph[b][a])) for a in graph for b in graph[a]
                   if a < b and a in graph.get(b, {}))
    assert not pairs, "packages that import each other: " + "; ".join(
        f"{a} <-> {b} ({', '.join(x)} / {', '.join(y)})" for a, b, x, y in pairs)
    state: dict[str, int] = {}
    loops: list[list[str]] = []

    def visit(p: str, path: list[str]) -> None:
        state[p] = 1
        for q in sorted(graph.get(p, {})):
            if state.get(q) == 1:
                loops.append(path[path.index(q):] + [q])
            elif q not in state:
                visit(q, [*path, q])
        state[p] = 2

    for p in sorted(graph):
        if p not in state:
            visit(p, [p])
    assert not loops, "package loops: " + "; ".join(" -> ".join(loop) for loop in loops)


def test_what_a_stream_author_imports_needs_neither_pyspark_nor_airflow() -> None:
    """``rewind.api`` (the contract, declarations, tables) imports no driver, sink, Spark or Airflow code."""
    import subprocess
    import sys

    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('pyspark', 'airflow', 'py4j'):\n"
            "            raise ImportError(f'{name} is not installed here')\n"
            "sys.meta_path.insert(0, Block())\n"
            "import rewind.api as api\n"
            "t = api.output_table('t', key=('id',))\n"
            "print(sorted(m for m in sys.modules if m.startswith('rewind.')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = eval(done.stdout)  # noqa: S307 - our own child's printed list
    assert not [m for m in loaded if m.split(".")[1] not in ("api", "errors")], loaded


def test_an_import_of_rewind_inside_a_function_says_why() -> None:
    """Imports between rewind's modules sit at the top of the module; one inside a function is there for
    start-up time only (``rewind --help`` and a refusal answer before pandas, boto3 or PySpark load; a
    module that loads PySpark), and says so on its line with ``# lazy: <why>`` (issue 35: 402 of 561
    imports between packages hid inside functions, some of them hiding a cycle)."""
    unmarked = []
    for m, p in modules().items():
        if not m.startswith("rewind."):  # the core; the provider imports it lazily for Airflow's DAG parsing
            continue
        tree = ast.parse(p.read_text())
        lines = p.read_text().splitlines()
        top = {id(n) for n in tree.body}
        guarded = {id(x) for n in ast.walk(tree) if isinstance(n, (ast.If, ast.Try)) and n in tree.body
                   for x in ast.walk(n)}
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if not any(n == "rewind" or n.startswith("rewind.") for n in names) or id(node) in top | guarded:
                continue
            if not any("# lazy:" in lines[n - 1] for n in (node.lineno, node.end_lineno or node.lineno)):
                unmarked.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not unmarked, f"imports inside functions without '# lazy: <why>': {unmarked}"
