"""Progress readable in a log: plain lines off a terminal (run_plan, generate_dataset, track), a bar on
one."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

import pgnn.core.progress as progress_module
from pgnn.core.progress import Progress, format_duration, silenced, track, with_length
from pgnn.core.shards import ShardPlan, ShardTask, run_plan


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def count_lines_at_any_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count lines of loops that take microseconds: lift the one-line-a-second limit."""
    monkeypatch.setattr(progress_module, "MIN_SECONDS", 0.0)


LINE = re.compile(
    r"^(?P<desc>.+): (?P<n>\d+)/(?P<total>\d+) (?P<unit>\w+), (?P<rate>[\d.]+ \S+), (?P<tail>.+)$"
)


def test_format_duration() -> None:
    assert format_duration(7.4) == "7s"
    assert format_duration(111) == "1m51s"
    assert format_duration(7500) == "2h05m"
    assert format_duration(float("nan")) == "?"


def test_lines_every_n_items_and_at_the_end() -> None:
    stream = io.StringIO()
    with Progress(10, "graphs@train", "shard", every=4, stream=stream) as progress:
        for _ in range(10):
            progress.update()
    lines = stream.getvalue().splitlines()
    assert [LINE.match(x)["n"] for x in lines] == ["4", "8", "10"]
    first = LINE.match(lines[0])
    assert first["desc"] == "graphs@train" and first["total"] == "10" and first["unit"] == "shards"
    assert first["tail"].startswith("eta ")
    assert lines[-1].split(", ")[-1].startswith("done in ")
    assert "\r" not in stream.getvalue()  # no bar off a terminal


def test_lines_every_few_seconds_even_between_counts() -> None:
    stream = io.StringIO()
    progress = Progress(1000, "train", "step", every=10**6, seconds=0.0, stream=stream)
    for _ in range(3):
        progress.update()
    assert [LINE.match(x)["n"] for x in stream.getvalue().splitlines()] == ["1", "2", "3"]


def test_a_resumed_run_counts_its_own_items() -> None:
    stream = io.StringIO()
    with Progress(100, "train", "step", initial=90, every=5, stream=stream) as progress:
        for _ in range(10):
            progress.update()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("train: 95/100 steps, ")
    assert lines[-1].startswith("train: 100/100 steps, ")


def test_no_final_line_when_stopped_early_or_disabled() -> None:
    stream = io.StringIO()
    with pytest.raises(RuntimeError):
        with Progress(10, "x", every=100, stream=stream) as progress:
            progress.update()
            raise RuntimeError("boom")
    assert stream.getvalue() == ""
    with Progress(10, "x", every=1, stream=stream, enabled=False) as progress:
        progress.update(10)
    assert stream.getvalue() == ""


def test_unknown_total() -> None:
    stream = io.StringIO()
    items = list(track((i for i in range(3)), "predict", "frame", stream=stream))
    assert items == [0, 1, 2]
    assert stream.getvalue().startswith("predict: 3 frames, ")
    stream = io.StringIO()
    list(track(with_length((i for i in range(3)), 3), "predict", "frame", every=1, stream=stream))
    assert stream.getvalue().splitlines()[0].startswith("predict: 1/3 frames, ")


def test_a_terminal_gets_a_bar_not_lines() -> None:
    stream = FakeTty()
    for _ in track(range(5), "synth", "frame", every=1, stream=stream):
        pass
    text = stream.getvalue()
    assert "\r" in text  # tqdm's bar
    assert "synth: 1/5 frames" not in text
    assert "synth: 5/5 frames" in text  # the summary line stays


def test_log_callable_receives_the_lines() -> None:
    got: list[str] = []
    with Progress(2, "eval", "frame", every=1, log=got.append, stream=io.StringIO()) as progress:
        progress.update(2)
    assert len(got) == 1 and got[0].startswith("eval: 2/2 frames, ")


def _write_shard(task: ShardTask, path: Path) -> None:
    path.write_text(",".join(task.frames))


def test_run_plan_logs_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tuple(ShardTask(f"shard-{i:04d}.txt", (f"{i:06d}",), f"key{i}") for i in range(3))
    plan = ShardPlan(tmp_path / "out", tasks, _write_shard, "graphs@train", {}, "v1")
    run_plan(plan)
    out = capsys.readouterr().out.splitlines()
    progress = [x for x in out if LINE.match(x)]
    assert [LINE.match(x)["n"] for x in progress] == ["1", "2", "3"]
    assert progress[0].startswith("graphs@train: 1/3 shards, ") and "eta " in progress[0]
    assert "done in " in progress[-1]
    run_plan(plan)  # everything current: no progress lines
    assert not [x for x in capsys.readouterr().out.splitlines() if LINE.match(x)]
    run_plan(ShardPlan(tmp_path / "out2", tasks, _write_shard, "k", {}, "v1"), log=None)
    assert capsys.readouterr().out == ""


def test_generate_dataset_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pgnn.data.synthetic.dataset import generate_dataset

    generate_dataset(tmp_path, 2, 0)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("synth: 1/2 frames, ") and "eta " in err[0]
    assert err[-1].startswith("synth: 2/2 frames, ") and "done in " in err[-1]


def test_silenced_and_the_environment_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    with silenced():
        list(track(range(3), "x", every=1, stream=stream))
    assert stream.getvalue() == ""
    monkeypatch.setenv("PGNN_PROGRESS", "0")
    list(track(range(3), "x", every=1, stream=stream))
    assert stream.getvalue() == ""
    monkeypatch.setenv("PGNN_PROGRESS", "1")
    list(track(range(3), "x", every=1, stream=stream))
    assert stream.getvalue().startswith("x: 1/3 items, ")


def test_a_fast_loop_writes_only_its_last_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_module, "MIN_SECONDS", 1.0)
    stream = io.StringIO()
    list(track(range(100), "eval (reading)", "frame", every=1, stream=stream))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eval (reading): 100/100 frames, ")
