"""Reading a user's YAML file: a bounded ``yaml.SafeLoader`` (no objects, no code) refusing duplicated keys.

PyYAML keeps the last of two equal keys of a mapping, so a section written twice in ``params.yaml`` loses
the first one without a word. :class:`UniqueKeyLoader` makes it an error naming both lines; merge keys
(``<<: *defaults``) still override as YAML says. It also reads ``1e-3`` as a number, as YAML 1.2 and DVC do
(PyYAML's YAML 1.1 reads it as a string, which the strict params types refuse). :func:`read_yaml` turns every
problem into a :class:`pgnn.core.errors.DataError` naming the file and the line.

Bounded (:mod:`pgnn.core.bounded`): a file is at most ``MAX_YAML_BYTES``, nests at most ``MAX_DEPTH`` deep
(PyYAML's composer recurses: deeper was a RecursionError), and holds at most ``MAX_YAML_NODES`` values, as
written (counted while composing) and with every alias expanded (counted on the composed node graph before
anything is built): a "billion laughs" of nested aliases, a few hundred bytes that expand to 10^9 strings
when a caller walks them (hashing the values, quoting one in an error), is refused in milliseconds, and so
is an alias that contains itself.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.error import MarkedYAMLError
from yaml.nodes import MappingNode, Node, SequenceNode

from pgnn.core.bounded import MAX_DEPTH, MAX_YAML_BYTES, MAX_YAML_NODES, read_bytes
from pgnn.core.errors import DataError

_MERGE_TAG = "tag:yaml.org,2002:merge"


class LimitError(MarkedYAMLError):
    """A YAML document past a limit of :mod:`pgnn.core.bounded` (its ``problem`` is the whole message)."""


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, SequenceNode) else []


def check_expansion(root: Node, max_nodes: int = MAX_YAML_NODES, max_depth: int = MAX_DEPTH) -> None:
    """Raise a :class:`LimitError` if the node graph ``root`` (aliases are shared nodes) expands to more than
    ``max_nodes`` nodes or ``max_depth`` levels, or an alias contains itself. Linear in the composed nodes."""
    size: dict[int, int] = {}
    deep: dict[int, int] = {}
    ancestors: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            deep[key] = 1 + max((deep[id(k)] for k in kids), default=0)
            ancestors.discard(key)
            if size[key] > max_nodes or deep[key] > max_depth:
                what = f"{size[key]} values" if size[key] > max_nodes else f"{deep[key]} levels"
                limit = f"{max_nodes} values" if size[key] > max_nodes else f"{max_depth} levels"
                raise LimitError(
                    None, None, f"expected at most {limit} with aliases expanded, got {what}", node.start_mark
                )
        elif key in ancestors:
            raise LimitError(
                None, None, "expected plain data, got an alias that contains itself", node.start_mark
            )
        elif key not in size:
            ancestors.add(key)
            stack.append((node, True))
            stack.extend((k, False) for k in _children(node) if id(k) not in size)


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises a ``ConstructorError`` on a key written twice in one mapping, reads
    ``1e-3`` as the number YAML 1.2 (and DVC) reads (PyYAML's YAML 1.1 wants ``1.0e-3``: a string), and a
    :class:`LimitError` on a document nested or expanding past the limits of :mod:`pgnn.core.bounded`."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = self._nodes = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self._depth += 1
        self._nodes += 1
        try:
            problem = None
            if self._depth > MAX_DEPTH:
                problem = f"expected at most {MAX_DEPTH} levels of nesting, got more"
            elif self._nodes > MAX_YAML_NODES:
                problem = f"expected at most {MAX_YAML_NODES} values, got more"
            if problem is not None:
                raise LimitError(None, None, problem, self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Node | None:
        node = super().get_single_node()
        if node is not None:
            check_expansion(node)
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader's own error ("found unhashable key") follows below
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise ConstructorError(
                    None,
                    None,
                    f"expected each key once, got {key!r} again (first on line {first_line[key]})",
                    key_node.start_mark,
                )
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str, path: str | Path) -> Any:
    """The data of YAML ``text`` (``path`` names it in errors): a DataError with the line on bad YAML."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: plain data only
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        problem = getattr(e, "problem", None) or str(e)
        if isinstance(e, LimitError) or problem.startswith("expected each key once"):
            raise DataError(path, problem, line) from e
        context = getattr(e, "context", None)
        raise DataError(
            path, f"expected valid YAML, got {problem}" + (f" ({context})" if context else ""), line
        ) from e


def read_yaml(path: str | Path) -> Any:
    """The data of the YAML file ``path``; a DataError naming it (and the line) when it cannot be read or
    parsed, is past a limit, or when a mapping writes a key twice."""
    path = Path(path)
    data = read_bytes(path, "a YAML file", MAX_YAML_BYTES)
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise DataError(path, f"cannot read it: {e}") from e
    return parse_yaml(text, path)
