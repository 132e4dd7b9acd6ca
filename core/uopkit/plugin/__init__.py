"""Backend plugins: the hook contract (hookspecs) and the manager that discovers and validates backends."""

from uopkit.plugin.hookspecs import BackendInfo, hookimpl, hookspec

__all__ = ["BackendInfo", "hookimpl", "hookspec"]
