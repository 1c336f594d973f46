"""Reading the original's TensorFlow checkpoints (``PREFIX.index`` + ``PREFIX.data-*``) without TensorFlow.

The authors' released Car T0/T1 checkpoints must give exactly the arrays of the reference npz files (every
key, dtype, shape and bit), and ``pgnn import-weights PREFIX`` must write the same model as the npz import.
Damaged copies (truncated, flipped bytes, missing files) and checkpoints that do not fit the config must be a
``DataError`` naming the file. Small bundles written here by an independent minimal writer cover what the
released files do not: several data blocks, big-endian bytes, other dtypes, optimizer slots, and the formats
the reader refuses (string tensors, snappy blocks, partitioned variables).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pgnn.cli import main as cli_main
from pgnn.core.errors import DataError
from pgnn.nn.tf_bundle_format import crc32c, mask_crc
from pgnn.nn.tf_checkpoint import (
    checkpoint_prefix,
    data_shard_path,
    index_path,
    read_bundle_index,
    read_tf_checkpoint,
)
from pgnn.nn.weights import checkpoint_from_released_weights

PREFIX_NAME = "model-1400000"


def released_prefix(reference: Path, name: str) -> Path:
    return reference / "tf_checkpoints" / f"car_auto_{name}_train" / PREFIX_NAME


def npz_arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


@pytest.fixture
def t0_copy(pointgnn_reference: Path, tmp_path: Path) -> Path:
    """A writable copy of the T0 checkpoint folder (index, data shard, config); returns its prefix."""
    src = released_prefix(pointgnn_reference, "T0")
    folder = tmp_path / "car_auto_T0_train"
    folder.mkdir()
    for name in (f"{PREFIX_NAME}.index", f"{PREFIX_NAME}.data-00000-of-00001", "config"):
        shutil.copyfile(src.parent / name, folder / name)
    return folder / PREFIX_NAME


# --- a minimal, independent TensorBundle writer ---------------------------------------------------------

TF_DTYPE_CODES = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int64": 9, "bool": 10, "float16": 19}
MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _fixed32_field(number: int, value: int) -> bytes:
    return _varint(number << 3 | 5) + value.to_bytes(4, "little")


def _block(entries: list[tuple[bytes, bytes]]) -> bytes:
    """Entries without prefix compression, one restart point at 0."""
    body = b"".join(_varint(0) + _varint(len(k)) + _varint(len(v)) + k + v for k, v in entries)
    return body + (0).to_bytes(4, "little") + (1).to_bytes(4, "little")


def _table(entries: list[tuple[bytes, bytes]], per_block: int, first_block_type: int = 0) -> bytes:
    out = bytearray()

    def put(contents: bytes, block_type: int = 0) -> bytes:
        handle = _varint(len(out)) + _varint(len(contents))
        trailer = bytes([block_type])
        out.extend(contents + trailer + mask_crc(crc32c(contents + trailer)).to_bytes(4, "little"))
        return handle

    index = []
    for i in range(0, len(entries), per_block):
        chunk = entries[i : i + per_block]
        index.append((chunk[-1][0], put(_block(chunk), first_block_type if i == 0 else 0)))
    handles = put(_block([])) + put(_block(index))
    return bytes(out) + handles + bytes(40 - len(handles)) + MAGIC


def write_bundle(
    prefix: Path,
    tensors: dict[str, np.ndarray],
    *,
    big_endian: bool = False,
    per_block: int = 3,
    first_block_type: int = 0,
    dtype_codes: dict[str, int] | None = None,
    sliced: tuple[str, ...] = (),
) -> None:
    """Write ``tensors`` as a one-shard bundle at ``prefix`` (keys sorted, as TF writes them)."""
    data = bytearray()
    entries = [(b"", _int_field(1, 1) + _int_field(2, int(big_endian)) + _bytes_field(3, _int_field(1, 1)))]
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        raw = a.astype(a.dtype.newbyteorder(">" if big_endian else "<")).tobytes()
        shape = b"".join(_bytes_field(2, _int_field(1, d)) for d in a.shape)
        value = (
            _int_field(1, (dtype_codes or {}).get(name, TF_DTYPE_CODES[a.dtype.name]))
            + _bytes_field(2, shape)
            + _int_field(4, len(data))
            + _int_field(5, len(raw))
            + _fixed32_field(6, mask_crc(crc32c(raw)))
            + (_bytes_field(7, b"") if name in sliced else b"")
        )
        entries.append((name.encode(), value))
        data += raw
    index_path(prefix).write_bytes(_table(entries, per_block, first_block_type))
    data_shard_path(prefix, 0, 1).write_bytes(bytes(data))


# --- crc32c ---------------------------------------------------------------------------------------------


def test_crc32c_matches_known_values_and_chains() -> None:
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros
    assert crc32c(b"\xff" * 32) == 0x62A8AB43  # RFC 3720 B.4: 32 bytes of 0xff
    data = np.random.default_rng(0).integers(0, 256, 70_001, dtype=np.uint8).tobytes()
    chained = 0
    for start in range(0, len(data), 1000):  # short pieces: byte by byte; the whole: numpy lanes
        chained = crc32c(data[start : start + 1000], chained)
    assert crc32c(data) == chained
    assert crc32c(data[:50_000] + b"\x01" + data[50_001:]) != chained


# --- the released checkpoints ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["T0", "T1"])
def test_released_checkpoint_reads_exactly_as_the_npz(pointgnn_reference: Path, name: str) -> None:
    prefix = released_prefix(pointgnn_reference, name)
    header, entries = read_bundle_index(prefix)
    assert (header.num_shards, header.big_endian) == (1, False)
    ours = read_tf_checkpoint(prefix)
    ref = npz_arrays(pointgnn_reference / f"car_auto_{name}_train.npz")
    assert list(ours) == list(entries) and sorted(ours) == sorted(ref)
    for key, expected in ref.items():
        got = ours[key]
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape), key
        assert got.tobytes() == expected.tobytes(), key
    assert int(ours["Variable"]) == 1_400_000


@pytest.mark.parametrize("name", ["T0", "T1"])
def test_import_weights_from_checkpoint_equals_npz_import(
    pointgnn_reference: Path, tmp_path: Path, name: str
) -> None:
    prefix = released_prefix(pointgnn_reference, name)
    from_ckpt, from_npz = tmp_path / "ckpt.pt", tmp_path / "npz.pt"
    assert cli_main(["import-weights", str(prefix), str(from_ckpt)]) == 0  # config: 'config' beside it
    npz = pointgnn_reference / f"car_auto_{name}_train.npz"
    assert cli_main(["import-weights", str(npz), str(from_npz)]) == 0
    a = torch.load(from_ckpt, weights_only=True)
    b = torch.load(from_npz, weights_only=True)
    assert a["model"].keys() == b["model"].keys()
    for key, tensor in b["model"].items():
        assert a["model"][key].dtype == tensor.dtype and torch.equal(a["model"][key], tensor), key
    assert {k: v for k, v in a.items() if k not in ("model", "source")} == {
        k: v for k, v in b.items() if k not in ("model", "source")
    }
    assert a["step"] == 1_400_000 and a["source"]["weights"] == PREFIX_NAME


def test_checkpoint_prefix_detection(pointgnn_reference: Path, tmp_path: Path) -> None:
    prefix = released_prefix(pointgnn_reference, "T0")
    assert checkpoint_prefix(prefix) == prefix
    assert checkpoint_prefix(index_path(prefix)) == prefix
    assert checkpoint_prefix(data_shard_path(prefix, 0, 1)) == prefix
    assert checkpoint_prefix(pointgnn_reference / "car_auto_T0_train.npz") is None
    assert checkpoint_prefix(tmp_path / "model-1") is None


# --- damaged copies -------------------------------------------------------------------------------------


def _damage(path: Path, change) -> None:
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(change(data)))


def _flip(offset: int):
    def change(data: bytearray) -> bytearray:
        data[offset] ^= 0x40
        return data

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d[: len(d) // 2], "magic number"),
        (lambda d: d[:20], "at least 48 bytes"),
        (_flip(-1), "magic number"),
        (_flip(100), "crc32c mismatch in data block 0"),
        (_flip(-54), "crc32c mismatch in the index block"),  # its last byte (before trailer and footer)
        (_flip(-48), "metaindex block"),  # the footer's first block handle
    ],
)
def test_damaged_index_is_a_data_error_naming_it(t0_copy: Path, change, message: str) -> None:
    _damage(index_path(t0_copy), change)
    with pytest.raises(DataError, match=message) as err:
        read_tf_checkpoint(t0_copy)
    assert err.value.path == str(index_path(t0_copy))


def test_truncated_data_shard_is_a_data_error_naming_it(t0_copy: Path) -> None:
    shard = data_shard_path(t0_copy, 0, 1)
    _damage(shard, lambda d: d[:-100])
    with pytest.raises(DataError, match=r"the file has only \d+ bytes \(truncated\?\)") as err:
        read_tf_checkpoint(t0_copy)
    assert err.value.path == str(shard)


def test_flipped_data_byte_is_a_crc_error_naming_the_tensor(t0_copy: Path) -> None:
    name = "layer1/combined_features/fully_connected_1/weights"
    _, entries = read_bundle_index(t0_copy)
    shard = data_shard_path(t0_copy, 0, 1)
    _damage(shard, _flip(entries[name].offset + entries[name].size // 2))
    with pytest.raises(DataError, match=f"crc32c mismatch for tensor '{name}'") as err:
        read_tf_checkpoint(t0_copy)
    assert err.value.path == str(shard)
    # reading the other tensors only does not touch the damaged one
    assert len(read_tf_checkpoint(t0_copy, keep=lambda n: n != name)) == len(entries) - 1


def test_missing_files_are_data_errors_naming_them(
    t0_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = data_shard_path(t0_copy, 0, 1)
    moved = tmp_path / "moved"
    shard.rename(moved)
    with pytest.raises(DataError, match="no such file") as err:
        read_tf_checkpoint(t0_copy)
    assert err.value.path == str(shard)
    moved.rename(shard)
    index_path(t0_copy).unlink()  # a data shard without its index is still taken for a checkpoint
    assert cli_main(["import-weights", str(t0_copy), str(tmp_path / "x.pt")]) == 1
    assert f"{index_path(t0_copy)}: expected a TensorFlow checkpoint index" in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


def test_checkpoint_that_does_not_fit_the_config(
    pointgnn_reference: Path, t0_copy: Path, tmp_path: Path
) -> None:
    # T0's variables with T1's config: layer2 is missing
    with pytest.raises(DataError, match="missing") as err:
        checkpoint_from_released_weights(t0_copy, pointgnn_reference / "car_auto_T1_train_config.json")
    assert err.value.path == str(index_path(t0_copy))
    # a config whose set MLP is narrower: right names, wrong shape
    config = json.loads((t0_copy.parent / "config").read_text())
    config["model_kwargs"]["layer_configs"][0]["kwargs"]["output_MLP_depth_list"] = [300, 256]
    narrow = tmp_path / "narrow.json"
    narrow.write_text(json.dumps(config))
    with pytest.raises(DataError, match="layer1/combined_features/fully_connected_1/weights") as err:
        checkpoint_from_released_weights(t0_copy, narrow)
    assert err.value.path == str(index_path(t0_copy))


# --- bundles written here -------------------------------------------------------------------------------


@pytest.mark.parametrize("big_endian", [False, True])
def test_bundle_round_trip(tmp_path: Path, big_endian: bool) -> None:
    rng = np.random.default_rng(1)
    tensors = {
        "a/float32": rng.standard_normal((3, 5)).astype(np.float32),
        "a/float64": rng.standard_normal(7),
        "b/int64": rng.integers(-(2**40), 2**40, (2, 2, 2)),
        "b/int32_scalar": np.array(-7, dtype=np.int32),
        "c/bool": rng.random(9) > 0.5,
        "c/float16": rng.standard_normal(4).astype(np.float16),
        "c/uint8": rng.integers(0, 256, 11, dtype=np.uint8),
        "d/empty": np.zeros((0, 3), dtype=np.float32),
    }
    prefix = tmp_path / "model-7"
    write_bundle(prefix, tensors, big_endian=big_endian, per_block=2)  # 5 data blocks
    _, entries = read_bundle_index(prefix)
    assert list(entries) == sorted(tensors)
    ours = read_tf_checkpoint(prefix)
    for name, expected in tensors.items():
        got = ours[name]
        assert got.dtype == expected.dtype and got.dtype.isnative and got.shape == expected.shape, name
        assert np.array_equal(got, expected), name


def test_unsupported_bundles_are_refused_clearly(tmp_path: Path) -> None:
    tensors = {"w": np.ones((2, 2), np.float32), "name": np.zeros(3, np.uint8)}
    prefix = tmp_path / "strings"
    write_bundle(prefix, tensors, dtype_codes={"name": 7})
    with pytest.raises(DataError, match="'name' has dtype string") as err:
        read_tf_checkpoint(prefix)
    assert err.value.path == str(index_path(prefix))
    assert list(read_tf_checkpoint(prefix, keep=lambda n: n == "w")) == ["w"]

    prefix = tmp_path / "compressed"
    write_bundle(prefix, tensors, first_block_type=1)
    with pytest.raises(DataError, match="is snappy-compressed"):
        read_tf_checkpoint(prefix)

    prefix = tmp_path / "sliced"
    write_bundle(prefix, tensors, sliced=("w",))
    with pytest.raises(DataError, match="'w' is saved in slices"):
        read_tf_checkpoint(prefix)


def test_optimizer_state_is_skipped_and_global_step_kept(pointgnn_reference: Path, tmp_path: Path) -> None:
    variables = npz_arrays(pointgnn_reference / "car_auto_T0_train.npz")
    step = variables.pop("Variable")
    tensors = dict(variables)
    tensors |= {f"{k}/Momentum": np.full_like(v, 0.5) for k, v in variables.items()}
    tensors |= {"beta1_power": np.array(0.9, np.float32), "global_step": np.array(int(step), np.int64)}
    prefix = tmp_path / "model-1400000"
    write_bundle(prefix, tensors, per_block=16)
    config = pointgnn_reference / "car_auto_T0_train_config.json"
    ours = checkpoint_from_released_weights(prefix, config)
    ref = checkpoint_from_released_weights(pointgnn_reference / "car_auto_T0_train.npz", config)
    assert ours["step"] == 1_400_000
    assert all(torch.equal(ours["model"][k], v) for k, v in ref["model"].items())
