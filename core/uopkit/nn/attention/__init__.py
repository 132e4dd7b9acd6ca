"""torch.nn.attention's names: `SDPBackend` and the `sdpa_kernel` context manager that picks among them, and (in
`uopkit.nn.attention.bias`) the causal biases `causal_upper_left` / `causal_lower_right` that
`F.scaled_dot_product_attention` takes as its `attn_mask`.

uopkit has one attention: the math one (scores, softmax, weighted sum), which every device compiles. So `sdpa_kernel`
checks its argument as torch's does and changes nothing: a program written for torch's fused kernels runs the same.

>>> from uopkit.nn.attention import SDPBackend, sdpa_kernel
>>> with sdpa_kernel(SDPBackend.MATH):
...     pass
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from enum import IntEnum

from uopkit.nn.attention import bias as bias

__all__ = ["SDPBackend", "sdpa_kernel", "WARN_FOR_UNFUSED_KERNELS"]

# torch's switch for warnings about why a fused kernel can't run: there are no fused kernels here, so it is never read
WARN_FOR_UNFUSED_KERNELS = False


class SDPBackend(IntEnum):
    """torch's backends of scaled_dot_product_attention, with torch's values (all of them run the math one here)."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


class _BackendArgumentError(TypeError, AssertionError):
    # a TypeError by kind, and the AssertionError torch raises for it
    pass


@contextlib.contextmanager
def sdpa_kernel(backends: list[SDPBackend] | SDPBackend, set_priority: bool = False) -> Iterator[dict]:
    """torch.nn.attention.sdpa_kernel: `backends` is an `SDPBackend` or a list of them. Every backend computes the
    same math attention here, so the block runs as without it; a backend that isn't an `SDPBackend` raises, as
    torch's."""
    listed = [backends] if isinstance(backends, SDPBackend) else backends
    if not isinstance(listed, list) or not all(isinstance(b, SDPBackend) for b in listed):
        raise _BackendArgumentError(
            f"sdpa_kernel: backends must be an SDPBackend or a list of SDPBackend, got {backends!r} (for example "
            "SDPBackend.MATH or [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])"
        )
    yield {}
