"""pgnn.core.io: parallel hashing gives the serial hashes, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgnn.core.io import sha256_file, sha256_files


@pytest.mark.parametrize("threads", [None, 1, 3])
def test_sha256_files_matches_sha256_file_in_order(tmp_path: Path, threads: int | None) -> None:
    paths = []
    for i in range(70):  # more than one chunk of 32
        p = tmp_path / f"f{i}"
        p.write_bytes(bytes([i]) * (i * 997))
        paths.append(p)
    assert sha256_files(paths, threads) == [sha256_file(p) for p in paths]
    assert sha256_files([], threads) == []


def test_sha256_files_raises_the_first_missing_file(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    with pytest.raises(FileNotFoundError) as info:
        sha256_files([tmp_path / "a", tmp_path / "missing", tmp_path / "a"], threads=2)
    assert info.value.filename == str(tmp_path / "missing")
