"""The README and docs/*.md name only commands and flags that exist, and the README stays a front door.

Every ``pgnn <command>`` (also ``.venv/bin/pgnn``, ``python -m pgnn.cli``) and every ``python -m flows`` in
inline code or a code block of README.md and docs/*.md must name a command of ``pgnn.cli.COMMANDS``, and each
``--flag`` on that line must be an option of the command's parser (built with ``pgnn.cli.command_parser``, or
``flows.cli.parser`` for the flows). Nothing is run. (Some docs describe runs on KITTI data, which is
CC BY-NC-SA 3.0: non-commercial use only; this test reads only the Markdown.)
"""

from __future__ import annotations

import argparse
import re
from functools import cache
from pathlib import Path

import pytest

from flows.cli import parser as flows_parser
from pgnn.cli import COMMANDS, command_parser

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 260

FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
INLINE = re.compile(r"`([^`]+)`")
PGNN = re.compile(r"^[\s(]*(?:\S*/)?(?:\S*python -m )?pgnn(?:\.cli)? ([a-z][\w-]*)(.*)", re.S)
"""A command: ``pgnn <cmd>`` (or ``.venv/bin/pgnn``, ``python -m pgnn.cli``) at the start of a code line or
span (an error message quoted in prose that names pgnn mid-sentence is no command)."""
FLOWS = re.compile(r"python -m flows(?![\w.])(.*)", re.S)
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")
END = re.compile(r"\s#|&&|\|\||[|;]")  # a comment or the next command ends a command's arguments


def snippets(text: str) -> list[str]:
    """The code of a page: each line of its code blocks, and each inline code span (joined across line
    breaks), cut at a comment or at the next command."""
    blocks = FENCE.findall(text)
    prose = FENCE.sub("", text)
    lines = [line for block in blocks for line in block.splitlines()]
    spans = [" ".join(s.split()) for paragraph in prose.split("\n\n") for s in INLINE.findall(paragraph)]
    return lines + spans


def mentions(pattern: re.Pattern[str]) -> list[tuple[str, str, str]]:
    """(page, the mention, what follows it up to a comment or the next command) for every match."""
    found = []
    for page in PAGES:
        for code in snippets(page.read_text(encoding="utf-8")):
            for part in re.split(r"&&|\|\||;|\|", code):
                m = pattern.search(part)
                if m:
                    rest = END.split(m.group(m.lastindex or 0))[0]
                    found.append((page.name, m.group(0).strip(), rest))
    return found


@cache
def parser_of(name: str) -> argparse.ArgumentParser:
    return flows_parser() if name == "flows" else command_parser(name)[1]


def options(name: str, rest: str) -> frozenset[str]:
    """The options of command ``name``, or of its sub-command when ``rest`` starts with one
    (``pgnn check train-step``)."""
    parser = parser_of(name)
    words = rest.split()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and words and words[0] in action.choices:
            parser = action.choices[words[0]]
    return frozenset(parser._option_string_actions)


PGNN_MENTIONS = mentions(PGNN)
FLOWS_MENTIONS = mentions(FLOWS)


def test_the_pages_name_commands() -> None:
    """The extraction finds the commands the README shows (so an empty match cannot pass the tests below)."""
    named = {PGNN.search(" " + text).group(1) for _, text, _ in PGNN_MENTIONS}
    assert {"train", "predict", "eval", "runs"} <= named
    assert any(page == "README.md" for page, _, _ in FLOWS_MENTIONS)


@pytest.mark.parametrize(("page", "text", "rest"), PGNN_MENTIONS, ids=lambda v: str(v)[:60])
def test_pgnn_commands_and_flags_exist(page: str, text: str, rest: str) -> None:
    name = PGNN.search(" " + text).group(1)
    assert name in COMMANDS, f"{page}: `{text}`: no command {name!r} in pgnn/cli.py COMMANDS"
    unknown = [f for f in FLAG.findall(rest) if f not in options(name, rest)]
    assert not unknown, f"{page}: `{text}`: pgnn {name} has no option {unknown}"


@pytest.mark.parametrize(("page", "text", "rest"), FLOWS_MENTIONS, ids=lambda v: str(v)[:60])
def test_flows_flags_exist(page: str, text: str, rest: str) -> None:
    unknown = [f for f in FLAG.findall(rest) if f not in options("flows", rest)]
    assert not unknown, f"{page}: `{text}`: python -m flows has no option {unknown}"


def test_no_page_names_the_old_flows_command() -> None:
    old = [p.name for p in PAGES if "python -m flows.pipeline" in p.read_text(encoding="utf-8")]
    assert not old, f"`python -m flows.pipeline` is now `python -m flows`: {old}"


def test_readme_is_a_front_door() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    assert lines[lines.index("```bash") + 1].startswith("make pipeline")
    assert lines[lines.index("```bash") + 2].startswith("make test")
