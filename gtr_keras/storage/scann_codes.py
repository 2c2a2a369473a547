"""ScaNN's AH codes on disk, two 4-bit codes a byte.

ScaNN writes the asymmetric-hashing codes of its points (`hashed_dataset.npy`) a byte a code, though with its
16 centres a subspace a code takes 4 bits (and ScaNN holds them so in memory). An index keeps them packed
(`pack_codes`): `hashed_dataset.packed.npy`, uint8 `[N, ceil(C / 2)]` with a point's code `2j` in the low 4
bits of its byte `j` and code `2j + 1` in the high 4, and `C` in `hashed_dataset.packed.json`. A point's codes
stay one row, so segment merges select rows of either layout; codes of more than 4 bits stay as ScaNN wrote
them. ScaNN reads unpacked codes only: `scann_assets` unpacks them, a block at a time, into a temporary
directory for its load. Indexes written before codes were packed are read as they are.
"""

import contextlib
import json
import os

import numpy as np

from gtr_keras.errors import DataError
from gtr_keras.storage.layout import REMEDY, SCANN_CODES, SCANN_PACKED_CODES, SCANN_PACKED_RECORD, scann_codes_file
from gtr_keras.utils import files

# Rows of codes read, packed or unpacked at a time: 12 MiB of 192 codes.
BLOCK_ROWS = 65_536
_ASSETS_PBTXT = "scann_assets.pbtxt"


def pack(codes):
    """Codes below 16, `[n, C]`, packed two a byte: uint8 `[n, ceil(C / 2)]`.

    Example:
    >>> pack(np.array([[1, 2, 3]], np.uint8))
    array([[33,  3]], dtype=uint8)
    """
    codes = np.asarray(codes, dtype=np.uint8)
    if codes.shape[1] % 2:
        codes = np.pad(codes, ((0, 0), (0, 1)))
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def unpack(packed, num_codes):
    """The `[n, num_codes]` uint8 codes that `pack` packed into `packed`.

    Example:
    >>> unpack(np.array([[33, 3]], np.uint8), 3)
    array([[1, 2, 3]], dtype=uint8)
    """
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.empty((len(packed), 2 * packed.shape[1]), np.uint8)
    codes[:, 0::2] = packed & 15
    codes[:, 1::2] = packed >> 4
    return np.ascontiguousarray(codes[:, :num_codes])


class CodeRows:
    """The AH codes of the ScaNN searcher in a local directory as ScaNN writes them (uint8 `[N, C]`), rows read
    from their file (memory-mapped) and unpacked where they are packed.

    Args:
        scann_dir: the searcher's directory.

    Attributes:
        stored: the stored rows, memory-mapped: packed where `num_codes` is set.
        num_codes: `C` of packed codes; None for codes stored a byte each.
        shape, dtype: those of the codes as ScaNN writes them.

    Example:
    >>> CodeRows("indexes/msmarco/index/scann")[:2].shape  # doctest: +SKIP
    (2, 192)
    """

    def __init__(self, scann_dir):
        path, self.num_codes = scann_codes_file(scann_dir)
        self.stored = np.load(path, mmap_mode="r")
        self.shape = (len(self.stored), self.num_codes or self.stored.shape[1])
        self.dtype = np.dtype(np.uint8) if self.num_codes else self.stored.dtype

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, rows):
        stored = self.stored[rows]
        return np.asarray(stored) if self.num_codes is None else unpack(stored, self.num_codes)


def write_rows(path, blocks, shape, dtype):
    """Writes the rows of `blocks`, arrays of `dtype`, in order as one `.npy` array of `shape` to `path`."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_2_0(f, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})
        for block in blocks:
            f.write(np.ascontiguousarray(block, dtype=dtype))


def write_packed_record(scann_dir, num_codes):
    """Writes the record of packed codes of `num_codes` codes a point to `scann_dir`."""
    with open(os.path.join(scann_dir, SCANN_PACKED_RECORD), "w", encoding="utf-8") as f:
        json.dump({"num_codes": num_codes}, f)


def _blocks(path, block_rows):
    """The rows of the 2-D `.npy` array in `path`, `block_rows` at a time, read (not mapped: its pages are not
    kept resident in this process)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
        for start in range(0, shape[0], block_rows):
            count = min(block_rows, shape[0] - start)
            yield np.fromfile(f, dtype, count * shape[1]).reshape(count, shape[1])


def pack_codes(scann_dir, block_rows=BLOCK_ROWS):
    """Replaces the AH codes ScaNN wrote to local `scann_dir`, a byte a code, by their packed file and its
    record where every code is below 16; leaves them otherwise, and codes already packed.

    Example:
    >>> pack_codes("staging/scann")  # doctest: +SKIP
    """
    path = os.path.join(scann_dir, SCANN_CODES)
    if not os.path.exists(path):
        return
    stored = np.load(path, mmap_mode="r")
    shape, dtype = stored.shape, stored.dtype
    if dtype != np.uint8 or any(block.max(initial=0) >= 16 for block in _blocks(path, block_rows)):
        return
    packed = (shape[0], (shape[1] + 1) // 2)
    write_rows(os.path.join(scann_dir, SCANN_PACKED_CODES), map(pack, _blocks(path, block_rows)), packed, np.uint8)
    write_packed_record(scann_dir, shape[1])
    os.remove(path)


@contextlib.contextmanager
def scann_assets(scann_dir, block_rows=BLOCK_ROWS):
    """The `scann_assets.pbtxt` text with which ScaNN loads the searcher in local `scann_dir`: as ScaNN wrote it,
    or, where its codes are packed, naming an unpacked copy of them in a temporary directory (written a block
    at a time, removed after the block; a killed process's is removed by the next).

    Raises:
        DataError: packed codes whose record is malformed, or assets that name no AH codes.

    Example:
    >>> with scann_assets("indexes/msmarco/index/scann") as assets:  # doctest: +SKIP
    ...     searcher = scann_pybind.ScannNumpy("indexes/msmarco/index/scann", assets)
    """
    with open(os.path.join(scann_dir, _ASSETS_PBTXT), encoding="utf-8") as f:
        assets = f.read()
    path, num_codes = scann_codes_file(scann_dir)
    if num_codes is None:
        yield assets
        return
    name = json.dumps(SCANN_CODES)
    if name not in assets:
        raise DataError(f"{os.path.join(scann_dir, _ASSETS_PBTXT)}: names no {SCANN_CODES}; {REMEDY}")
    num_rows = np.load(path, mmap_mode="r").shape[0]
    with files.temporary_directory("gtr-keras-scann-codes-") as scratch:
        unpacked = os.path.join(scratch, SCANN_CODES)
        blocks = (unpack(block, num_codes) for block in _blocks(path, block_rows))
        write_rows(unpacked, blocks, (num_rows, num_codes), np.uint8)
        yield assets.replace(name, json.dumps(unpacked))
