"""torch.backends.openmp: uopkit's CPU kernels run on threads of its own pool, sized as torch's OpenMP threads are
(`Tensor.set_num_threads`, OMP_NUM_THREADS), so a program that checks for OpenMP before it sets them finds it."""


def is_available() -> bool:
    """torch.backends.openmp.is_available: True, the thread settings it guards apply to uopkit's CPU kernels."""
    return True
