"""The static import closure of pgnn modules, read from their source (every import statement, the ones inside
functions included), without importing anything.

It decides what a change of code invalidates: the code deps of each DVC stage (``dvc.yaml``, generated from
:mod:`pgnn.pipeline.stages`) and the code version recorded in shard manifests
(:func:`pgnn.core.shards.code_version`).
A module's closure holds the module, every ``pgnn`` module it imports (transitively) and the ``__init__.py``
of
every package on the way (Python runs those on import).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The folder holding the ``pgnn`` package (the repository root in a checkout)."""


def module_path(module: str, root: Path = PACKAGE_ROOT) -> Path | None:
    """The source file of ``module`` under ``root`` (a module file or a package's ``__init__.py``)."""
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


@cache
def direct_imports(
    module: str, root: Path = PACKAGE_ROOT, packages: tuple[str, ...] = ("pgnn",)
) -> frozenset[str]:
    """The modules of ``packages`` that ``module``'s source imports anywhere (relative imports resolved;
    for ``from pkg import name``, ``pkg.name`` too when that is a module)."""
    path = module_path(module, root)
    if path is None:
        raise ImportError(f"no source for module {module} under {root}")
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = _package_of(module, path).split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names if module_path(f"{target}.{a.name}", root))
    return frozenset(m for m in found if m.split(".")[0] in packages and module_path(m, root) is not None)


def closure(modules: Iterable[str], root: Path = PACKAGE_ROOT) -> tuple[str, ...]:
    """Every ``pgnn`` module that importing ``modules`` may run (packages' ``__init__`` included), sorted."""
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages
        todo.extend(direct_imports(name, root))
    return tuple(sorted(seen))


def closure_files(modules: Iterable[str], root: Path = PACKAGE_ROOT) -> tuple[str, ...]:
    """The source files of :func:`closure`, as sorted paths relative to ``root`` (posix)."""
    files = {module_path(m, root) for m in closure(modules, root)}
    return tuple(sorted(p.relative_to(root).as_posix() for p in files if p is not None))


def third_party(modules: Iterable[str], root: Path = PACKAGE_ROOT) -> frozenset[str]:
    """The top-level non-``pgnn`` packages imported anywhere in ``modules``' closure (e.g. ``torch``)."""
    out: set[str] = set()
    for name in closure(modules, root):
        path = module_path(name, root)
        assert path is not None
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                out.add(node.module.split(".")[0])
    return frozenset(out - {"pgnn", "__future__"})
