"""torch.backends.mkldnn: uopkit calls no oneDNN (its CPU kernels are its own), so `is_available()` is False;
`enabled` is a flag kept as set (torch's default True) that changes no kernel."""

enabled = True


def is_available() -> bool:
    """torch.backends.mkldnn.is_available: False, uopkit calls no oneDNN."""
    return False
