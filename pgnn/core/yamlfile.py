"""Reading a user's YAML file: ``yaml.SafeLoader`` (no objects, no code) that refuses duplicated keys.

PyYAML keeps the last of two equal keys of a mapping, so a section written twice in ``params.yaml`` loses
the first one without a word. :class:`UniqueKeyLoader` makes it an error naming both lines; merge keys
(``<<: *defaults``) still override as YAML says. It also reads ``1e-3`` as a number, as YAML 1.2 and DVC do
(PyYAML's YAML 1.1 reads it as a string, which the strict params types refuse). :func:`read_yaml` turns every
problem into a :class:`pgnn.core.errors.DataError` naming the file and the line.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

from pgnn.core.errors import DataError

_MERGE_TAG = "tag:yaml.org,2002:merge"


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises a ``ConstructorError`` on a key written twice in one mapping, and reads
    ``1e-3`` as the number YAML 1.2 (and DVC) reads (PyYAML's YAML 1.1 wants ``1.0e-3``: a string)."""

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
        if problem.startswith("expected each key once"):
            raise DataError(path, problem, line) from e
        context = getattr(e, "context", None)
        raise DataError(
            path, f"expected valid YAML, got {problem}" + (f" ({context})" if context else ""), line
        ) from e


def read_yaml(path: str | Path) -> Any:
    """The data of the YAML file ``path``; a DataError naming it (and the line) when it cannot be read or
    parsed, or when a mapping writes a key twice."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(path, f"cannot read it: {e}") from e
    return parse_yaml(text, path)
