"""torch.backends for ported programs: the switches torch keeps for the libraries it calls (cuDNN, cuBLAS, oneDNN,
OpenMP, Metal). uopkit calls none of them: it compiles its own kernels. The switches are kept as set, so a program
that sets and reads them back runs unchanged, and their documentation says what, if anything, each does here.

>>> import uopkit
>>> uopkit.backends.cudnn.benchmark = True; uopkit.backends.cudnn.benchmark
True
>>> uopkit.backends.cudnn.benchmark = False; uopkit.backends.mps.is_available()
False
"""

from uopkit.backends import cuda, cudnn, mkldnn, mps, openmp

__all__ = ["cuda", "cudnn", "mkldnn", "mps", "openmp"]
