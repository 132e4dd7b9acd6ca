"""tinygrad's `nn.datasets`: `mnist()` (and Fashion-MNIST), the four standard IDX files downloaded once into uopkit's
cache folder (`UOPKIT_CACHE_DIR`, else `~/.cache/uopkit`, under `datasets/`) and read from there afterwards.

>>> arr = parse_idx(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9]))
>>> arr.dtype.name, arr.tolist()
('uint8', [7, 8, 9])
"""

from __future__ import annotations

import gzip
import os
import pathlib
import tempfile

import numpy as np

from uopkit.diskcache import cache_path
from uopkit.dtype import dtypes, to_numpy_dtype
from uopkit.tensor import Tensor

__all__ = ["mnist", "parse_idx", "MNIST_URL", "FASHION_MNIST_URL"]

# the mirrors tinygrad and torchvision read the standard files from (the original site often refuses downloads)
MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
MNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)

# an IDX file's element type code -> its (big-endian) numpy dtype
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def parse_idx(data: bytes, name: str = "IDX data") -> np.ndarray:
    """An IDX file's array (the format of the MNIST files: 0, 0, a type code, the number of dims, each dim as a
    big-endian uint32, then the values big-endian), gzip-compressed or not; its values in native byte order."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] not in _IDX_TYPES:
        raise ValueError(f"{name}: not an IDX file (it starts with {data[:4]!r})")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{name}: the IDX header names {ndim} dims but the file has {len(data)} bytes")
    shape = tuple(int(d) for d in np.frombuffer(data[4:header], dtype=">u4"))
    dtype = np.dtype(_IDX_TYPES[data[2]])
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(
            f"{name}: an IDX array of shape {shape} {dtype} needs {expected} bytes, the file has {len(data)}"
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _fetch(url: str, path: pathlib.Path) -> bytes:
    # the cached file, else downloaded once into the cache (written whole, then renamed: never half a file there)
    if path.exists():
        return path.read_bytes()
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as e:
        raise OSError(
            f"nn.datasets: couldn't download {url} ({e}); with no network, put that file at {path} (it is read from "
            "there, never downloaded again)"
        ) from e
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return data


def mnist(
    device: str | None = None, fashion: bool = False, base_url: str | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """tinygrad's `nn.datasets.mnist()`: X_train, Y_train, X_test, Y_test as Tensors on `device`. The images are
    uint8 of shape (60000, 1, 28, 28) and (10000, 1, 28, 28), the labels 0..9 as `dtypes.default_int` (shapes (60000,)
    and (10000,)), ready for `cross_entropy`. `fashion=True`: Fashion-MNIST, the same files' layout. The four files are
    downloaded on first use from `base_url` (MNIST_URL or FASHION_MNIST_URL) into the cache folder, `datasets/mnist`
    or `datasets/fashion-mnist` under it; offline, an OSError names the URL and the path to put the file at."""
    url = base_url or (FASHION_MNIST_URL if fashion else MNIST_URL)
    folder = cache_path() / "datasets" / ("fashion-mnist" if fashion else "mnist")
    arrays = [parse_idx(_fetch(url + name, folder / name), name) for name in MNIST_FILES]
    for images, labels, split in ((arrays[0], arrays[1], "train"), (arrays[2], arrays[3], "t10k")):
        if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
            raise ValueError(
                f"nn.datasets.mnist: the {split} files hold images {images.shape} and labels {labels.shape}, not "
                "(N, rows, cols) and (N,)"
            )
    x_train, y_train, x_test, y_test = arrays
    label_dtype = to_numpy_dtype(dtypes.default_int)
    return (
        Tensor(np.ascontiguousarray(x_train[:, None], dtype=np.uint8), device=device),
        Tensor(y_train.astype(label_dtype), device=device),
        Tensor(np.ascontiguousarray(x_test[:, None], dtype=np.uint8), device=device),
        Tensor(y_test.astype(label_dtype), device=device),
    )
