"""torch.backends.cuda: `matmul.allow_tf32` is torch's other spelling of the float32 matmul precision
(`Tensor.set_float32_matmul_precision`: True is 'high', False 'highest', as torch links them), kept and read back;
uopkit's CUDA backend takes TF32 from the TF32 environment variable when a device opens, so it changes no kernel.
The other flags are kept as set. `is_built()` says whether uopkit's CUDA backend is installed."""

from __future__ import annotations

from uopkit.plugin.manager import get_manager


class _Matmul:
    """torch.backends.cuda.matmul's flags."""

    __slots__ = ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")

    def __init__(self) -> None:
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True

    @property
    def allow_tf32(self) -> bool:
        """Whether the float32 matmul precision is below 'highest' (torch links the two)."""
        from uopkit.tensor.tensor import Tensor

        return bool(Tensor.get_float32_matmul_precision() != "highest")

    @allow_tf32.setter
    def allow_tf32(self, value: bool) -> None:
        from uopkit.tensor.tensor import Tensor

        Tensor.set_float32_matmul_precision("high" if value else "highest")


matmul = _Matmul()


def is_built() -> bool:
    """torch.backends.cuda.is_built: whether uopkit's CUDA backend is installed (whether it can run here is
    `uopkit.cuda.is_available()`)."""
    return get_manager().status("CUDA") is not None
