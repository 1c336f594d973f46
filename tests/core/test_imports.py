"""pgnn/core/imports.py: the static import closure (lazy and relative imports, packages) on a toy package,
the no-cycle rule and the floor order on pgnn and flows/."""

from __future__ import annotations

import re
from pathlib import Path

from pgnn.core.imports import PACKAGE_ROOT, closure, closure_files, direct_imports, module_path, third_party


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def toy(root: Path) -> Path:
    write(root, "pgnn/__init__.py", "")
    write(root, "pgnn/a/__init__.py", "")
    write(root, "pgnn/a/top.py", "import numpy\n\ndef f():\n    from pgnn.a import lazy  # lazy\n")
    write(root, "pgnn/a/lazy.py", "from . import rel\nfrom .rel import X\n")
    write(root, "pgnn/a/rel.py", "import torch.nn as nn\nX = 1\n")
    write(root, "pgnn/b/__init__.py", "")
    write(root, "pgnn/b/unused.py", "import pgnn.a.top\n")
    return root


def test_closure_follows_lazy_and_relative_imports_and_parent_packages(tmp_path: Path) -> None:
    root = toy(tmp_path)
    assert direct_imports("pgnn.a.top", root) == {"pgnn.a", "pgnn.a.lazy"}
    assert direct_imports("pgnn.a.lazy", root) == {"pgnn.a", "pgnn.a.rel"}
    assert closure(["pgnn.a.top"], root) == ("pgnn", "pgnn.a", "pgnn.a.lazy", "pgnn.a.rel", "pgnn.a.top")
    assert closure_files(["pgnn.a.top"], root) == (
        "pgnn/__init__.py",
        "pgnn/a/__init__.py",
        "pgnn/a/lazy.py",
        "pgnn/a/rel.py",
        "pgnn/a/top.py",
    )
    assert "pgnn/b/unused.py" not in closure_files(["pgnn.a.top"], root)  # importers are not imports
    assert third_party(["pgnn.a.top"], root) == {"numpy", "torch"}


def test_unknown_module_is_an_error(tmp_path: Path) -> None:
    root = toy(tmp_path)
    assert module_path("pgnn.a.missing", root) is None
    try:
        closure(["pgnn.a.missing"], root)
    except ImportError as e:
        assert "pgnn.a.missing" in str(e)
    else:
        raise AssertionError("expected ImportError")


def all_modules(package: str = "pgnn") -> list[str]:
    out = []
    for p in (PACKAGE_ROOT / package).rglob("*.py"):
        m = ".".join(p.relative_to(PACKAGE_ROOT).with_suffix("").parts)
        out.append(m.removesuffix(".__init__"))
    return sorted(out)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one module (import cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_strongly_connected_finds_a_cycle() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_pgnn_has_no_import_cycles() -> None:
    """No module imports (eagerly or lazily) a module that imports it back; package __init__ files import
    nothing of their own package."""
    modules = all_modules()
    graph = {m: set(direct_imports(m)) for m in modules}
    assert len(modules) > 50
    assert strongly_connected(graph) == []


def test_flows_and_pgnn_have_no_import_cycles_and_pgnn_never_imports_flows() -> None:
    """The Prefect layer sits on top: flows/ imports pgnn and itself without a cycle (its command line and
    its flows once imported each other), and no pgnn module imports flows/."""
    packages = ("pgnn", "flows")
    modules = all_modules("pgnn") + all_modules("flows")
    graph = {m: set(direct_imports(m, packages=packages)) for m in modules}
    assert "flows.pipeline" in graph["flows.cli"]  # the graph holds the flows edges (lazy ones too)
    assert strongly_connected(graph) == []
    assert not [m for m in modules if m.startswith("pgnn") and any(d.startswith("flows") for d in graph[m])]


# The floors, top to bottom: a module imports only from its own folder or from a floor above it (an earlier
# line). training and inference share a floor and import neither each other. docs/ARCHITECTURE.md's map lists
# the same folders in the same order (checked below).
LAYERS = (
    ("core",),
    ("config",),
    ("data",),
    ("viz",),
    ("graphs",),
    ("nn",),
    ("recipe",),
    ("training", "inference"),
    ("eval",),
    ("pipeline",),
    ("commands",),
    ("cli",),
    ("flows",),
)
RANK = {folder: rank for rank, floor in enumerate(LAYERS) for folder in floor}


def folder_of(module: str) -> str:
    """``pgnn.graphs.build`` -> ``graphs``; ``pgnn`` (its __init__ applies the CPU pin) -> ``core``;
    ``flows.cli`` -> ``flows``."""
    parts = module.split(".")
    if parts[0] == "flows":
        return "flows"
    return parts[1] if len(parts) > 1 else "core"


def upward_imports(root: Path = PACKAGE_ROOT) -> list[str]:
    """Every import in pgnn/ and flows/ under ``root`` that reaches a lower floor or a sibling folder of its
    own floor, as ``importer -> imported``."""
    packages = ("pgnn", "flows")
    out = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            here = folder_of(module)
            for imported in sorted(direct_imports(module, root, packages=packages)):
                there = folder_of(imported)
                if there != here and RANK[there] >= RANK[here]:
                    out.append(f"{module} -> {imported}")
    return out


def test_the_layer_check_finds_a_planted_upward_import(tmp_path: Path) -> None:
    write(tmp_path, "pgnn/__init__.py", "")
    write(tmp_path, "pgnn/core/__init__.py", "")
    write(tmp_path, "pgnn/core/io.py", "X = 1\n")
    write(tmp_path, "pgnn/nn/__init__.py", "")
    write(tmp_path, "pgnn/nn/model.py", "from pgnn.core.io import X\n")
    write(tmp_path, "pgnn/training/__init__.py", "")
    write(tmp_path, "pgnn/training/loop.py", "import pgnn.nn.model\n")
    write(tmp_path, "pgnn/inference/__init__.py", "")
    write(tmp_path, "pgnn/inference/run.py", "def f():\n    from pgnn.training import loop  # lazy\n")
    write(tmp_path, "flows/__init__.py", "")
    sibling = ["pgnn.inference.run -> pgnn.training", "pgnn.inference.run -> pgnn.training.loop"]
    assert upward_imports(tmp_path) == sibling  # a sibling on its own floor
    write(tmp_path, "pgnn/core/planted.py", "def f():\n    import pgnn.nn.model\n")  # lazy, from below
    assert upward_imports(tmp_path) == [
        "pgnn.core.planted -> pgnn.nn.model",
        *sibling,
    ]


def test_pgnn_and_flows_import_only_from_the_floors_above() -> None:
    folders = {p.name for p in (PACKAGE_ROOT / "pgnn").iterdir() if (p / "__init__.py").is_file()}
    assert folders | {"cli", "flows"} == set(RANK)  # every folder has a floor
    assert upward_imports() == []


def test_the_architecture_map_lists_the_floors_in_order() -> None:
    text = (PACKAGE_ROOT / "docs" / "ARCHITECTURE.md").read_text()
    listed = re.findall(r"^pgnn/(\w+)/ ", text, flags=re.MULTILINE)
    assert listed == [folder for floor in LAYERS for folder in floor if folder not in ("cli", "flows")]


def test_no_module_over_500_lines() -> None:
    sizes = {m: len(module_path(m).read_text().splitlines()) for m in all_modules()}
    assert {m: n for m, n in sizes.items() if n > 500} == {}
