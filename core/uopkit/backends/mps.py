"""torch.backends.mps: uopkit has no Metal backend, so nothing runs on 'mps'."""


def is_available() -> bool:
    """torch.backends.mps.is_available: False, uopkit has no Metal backend."""
    return False


def is_built() -> bool:
    """torch.backends.mps.is_built: False, uopkit has no Metal backend."""
    return False
