"""Discovery and validation of backend plugins.

Plugins come from two places and go through the same hook: the core's built-in backend modules
(`BUILTIN_BACKENDS`) and the installed distributions with an entry point in the group ``uopkit``. Loading is
lazy (first call to `backends()`), and every failure is contained to the plugin that caused it: it shows up in
`backends()` as an unusable backend with the reason, and every other backend keeps working.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pluggy

from uopkit.plugin import hookspecs
from uopkit.plugin.hookspecs import PROJECT_NAME, BackendInfo

# Modules of the core that provide backends through `uopkit_backends`, registered like any plugin.
BUILTIN_BACKENDS: list[str] = ["uopkit.emulator"]

CORE_DISTRIBUTION = "uopkit"


@dataclass(frozen=True)
class BackendStatus:
    """One installed backend as `uopkit devices` shows it.

    `info` is None when the plugin broke before describing itself (import error, hook raised, malformed
    data); then `name` is the plugin's entry point name in upper case.
    """

    name: str
    version: str
    spec_version: int | None
    usable: bool
    reason: str | None
    info: BackendInfo | None
    plugin: str

    @property
    def status_text(self) -> str:
        return "usable" if self.usable else f"unusable: {self.reason}"


class BackendManager:
    """Owns a pluggy PluginManager for the ``uopkit`` hooks and turns its plugins into `BackendStatus` records.

    Tests build their own instance (``BackendManager(builtins=[], entry_points=[])``) and `register` in-process
    plugins; the process-wide one is `get_manager()`.
    """

    def __init__(
        self,
        *,
        builtins: Sequence[str] | None = None,
        entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
    ) -> None:
        self.pm = pluggy.PluginManager(PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self._builtins = list(BUILTIN_BACKENDS if builtins is None else builtins)
        # None: read the installed entry points when loading
        self._entry_points = None if entry_points is None else list(entry_points)
        self._loaded = False
        # plugins that failed before their hook could run (import error, invalid hookimpls)
        self._failed: list[BackendStatus] = []
        # plugin name -> distribution name, for display
        self._distributions: dict[str, str] = {}
        self._statuses: dict[str, BackendStatus] | None = None

    # ---- registration

    def register(self, plugin: object, name: str | None = None, distribution: str | None = None) -> str | None:
        """Register a plugin (a module or an object with ``@hookimpl`` methods); returns its name, or None
        when it was rejected (then it is listed as broken)."""
        self._statuses = None
        label = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        try:
            plugin_name = self.pm.register(plugin, name=name)
            # rejects hookimpls for hooks we don't define (typos, hooks of a newer core)
            self.pm.check_pending()
        except (pluggy.PluginValidationError, ValueError) as e:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            self._record_failure(label, distribution or label, f"invalid plugin: {e}")
            return None
        if plugin_name is None:
            # pluggy returns None for blocked names
            return None
        self._distributions[plugin_name] = distribution or plugin_name
        return plugin_name

    def unregister(self, name: str) -> None:
        self._statuses = None
        self.pm.unregister(name=name)

    def _record_failure(self, plugin_name: str, distribution: str, reason: str) -> None:
        self._statuses = None
        name = plugin_name.rsplit(".", 1)[-1].upper()
        self._failed.append(BackendStatus(name, "?", None, False, reason, None, distribution))

    def load(self) -> None:
        """Register the built-in backends and the installed entry points (once)."""
        if self._loaded:
            return
        self._loaded = True
        for module_name in self._builtins:
            try:
                module = importlib.import_module(module_name)
            except Exception as e:  # a broken built-in must not break `import uopkit` either
                self._record_failure(module_name, CORE_DISTRIBUTION, f"failed to import {module_name}: {_describe(e)}")
                continue
            self.register(module, name=module_name, distribution=CORE_DISTRIBUTION)
        entry_points = self._entry_points
        if entry_points is None:
            entry_points = list(importlib.metadata.entry_points(group=PROJECT_NAME))
        # one try per entry point: pluggy's load_setuptools_entrypoints stops at the first failure
        for ep in entry_points:
            if self.pm.has_plugin(ep.name) or self.pm.is_blocked(ep.name):
                # the same distribution seen twice on sys.path
                continue
            dist = ep.dist.name if ep.dist is not None else ep.name
            try:
                plugin = ep.load()
            except Exception as e:
                self._record_failure(ep.name, dist, f"failed to import {ep.value}: {_describe(e)}")
                continue
            self.register(plugin, name=ep.name, distribution=dist)

    # ---- collection

    def backends(self) -> dict[str, BackendStatus]:
        """Every installed backend by name, usable or not, each with the reason when not. Cached."""
        self.load()
        if self._statuses is None:
            self._statuses = self._collect()
        return dict(self._statuses)

    def refresh(self) -> None:
        """Forget cached statuses (availability is checked again on the next `backends()`)."""
        self._statuses = None

    def _collect(self) -> dict[str, BackendStatus]:
        from uopkit.uop.spec import SPEC_VERSION

        statuses: dict[str, BackendStatus] = {}

        def add(status: BackendStatus) -> None:
            if status.name not in statuses:
                statuses[status.name] = status
                return
            # two plugins claim one name: the first registered keeps it, the other is listed as a duplicate
            first = statuses[status.name]
            reason = f"duplicate backend name {status.name}, already provided by {first.plugin}"
            statuses[f"{status.name} ({status.plugin})"] = BackendStatus(
                status.name, status.version, status.spec_version, False, reason, status.info, status.plugin
            )

        for status in self._failed:
            add(status)
        # call each plugin's hookimpl on its own so one failure can't hide the others
        for impl in self.pm.hook.uopkit_backends.get_hookimpls():
            dist = self._distributions.get(impl.plugin_name, impl.plugin_name)
            broken_name = impl.plugin_name.rsplit(".", 1)[-1].upper()
            if impl.hookwrapper or impl.wrapper:
                add(BackendStatus(broken_name, "?", None, False, "uopkit_backends must not be a wrapper", None, dist))
                continue
            try:
                result: Any = impl.function()
            except Exception as e:
                reason = f"uopkit_backends() raised {_describe(e)}"
                add(BackendStatus(broken_name, "?", None, False, reason, None, dist))
                continue
            problem = _check_result(result)
            if problem is not None:
                reason = f"uopkit_backends() returned {problem}"
                add(BackendStatus(broken_name, "?", None, False, reason, None, dist))
                continue
            for info in result:
                add(_status_of(info, dist, SPEC_VERSION))
        return statuses


def _status_of(info: BackendInfo, dist: str, spec_version: int) -> BackendStatus:
    if info.spec_version != spec_version:
        reason = (
            f"targets UOp spec version {info.spec_version}, but this uopkit implements spec version "
            f"{spec_version}; install versions of uopkit and {dist} that match"
        )
        return BackendStatus(info.name, info.version, info.spec_version, False, reason, info, dist)
    try:
        why_not = info.availability()
    except Exception as e:
        why_not = f"availability check raised {_describe(e)}"
    if why_not is not None and not isinstance(why_not, str):
        why_not = f"availability() returned {type(why_not).__name__}, expected str or None"
    return BackendStatus(info.name, info.version, info.spec_version, why_not is None, why_not, info, dist)


def _check_result(result: Any) -> str | None:
    """None when `result` is a well-formed list of BackendInfo, else what is wrong with it."""
    if not isinstance(result, list):
        return f"{type(result).__name__}, expected list[BackendInfo]"
    for item in result:
        if not isinstance(item, BackendInfo):
            return f"a list holding {type(item).__name__}, expected BackendInfo"
        if not isinstance(item.name, str) or not item.name or item.name != item.name.upper() or ":" in item.name:
            return f"invalid backend name {item.name!r} (expected upper case, no ':')"
        if not isinstance(item.version, str):
            return f"{item.name}: version must be a str"
        if not isinstance(item.spec_version, int) or not isinstance(item.priority, int):
            return f"{item.name}: spec_version and priority must be int"
        if not callable(item.open) or not callable(item.availability):
            return f"{item.name}: open and availability must be callable"
        if item.renderer is not None and not callable(item.renderer):
            return f"{item.name}: renderer must be None or callable"
    return None


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


_manager: BackendManager | None = None


def get_manager() -> BackendManager:
    """The process-wide manager (created, not loaded, on first use)."""
    global _manager
    if _manager is None:
        _manager = BackendManager()
    return _manager


def set_manager(manager: BackendManager | None) -> BackendManager | None:
    """Swap the process-wide manager (for tests); returns the previous one."""
    global _manager
    old, _manager = _manager, manager
    return old


def backends() -> dict[str, BackendStatus]:
    """Every installed backend by name; see `BackendManager.backends`."""
    return get_manager().backends()
