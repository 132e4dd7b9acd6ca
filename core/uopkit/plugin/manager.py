"""Discovery and validation of backend plugins.

Plugins come from two places and go through the same hook: the core's built-in backend modules
(`BUILTIN_BACKENDS`) and the installed distributions with an entry point in the group ``uopkit``.

What the loader guarantees (docs/cache-and-plugins.md says the same for users):

- Isolation: every step that runs plugin code (importing its entry point, calling its hook, its availability
  check) runs on its own, in a worker thread, catching BaseException: an exception, a SystemExit or a
  KeyboardInterrupt raised by the plugin makes that plugin unusable, with the reason, and every other backend keeps
  working. A real Ctrl-C reaches the main thread as usual.
- Time limit: a step that does not finish within ``UOPKIT_PLUGIN_TIMEOUT`` seconds (default 20) is reported as hung
  and not waited for. Python can't stop a thread, so the hung thread is abandoned: it keeps running in the
  background (a daemon thread: it does not keep the process alive at exit). A plugin that crashes the interpreter
  (os._exit, a segfault in a driver) can't be contained in-process.
- Lazy, by name: ``Device["CPU"]`` and ``DEVICE=CPU`` import the built-in backends and the entry points named
  ``cpu`` (case-insensitive) first, and the rest only when that does not provide the device. Listing backends
  (``uopkit devices``, ``Device.DEFAULT`` without DEVICE) imports every plugin. Availability checks (which may import a
  driver binding and probe hardware) run only for the backends asked about: ``Device.DEFAULT`` checks them in
  priority order and stops at the first usable one; ``uopkit devices`` checks all.
- One name, one provider: when two distributions claim one device name, the name is unusable with a reason naming
  both, unless ``UOPKIT_BACKEND_<NAME>=<distribution>`` chooses one.
- Thread safety: loading and collecting run under one lock, and the loader counts as loaded only once everything it
  loaded is registered, so threads that ask for devices at the same time all see the same, complete answer.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pluggy

from uopkit.helpers import run_in_thread
from uopkit.plugin import hookspecs
from uopkit.plugin.hookspecs import PROJECT_NAME, BackendInfo

# Modules of the core that provide backends through `uopkit_backends`, registered like any plugin.
BUILTIN_BACKENDS: list[str] = ["uopkit.emulator"]

CORE_DISTRIBUTION = "uopkit"
DEFAULT_PLUGIN_TIMEOUT = 20.0

T = TypeVar("T")


@dataclass(frozen=True)
class BackendStatus:
    """One installed backend as `uopkit devices` shows it.

    `info` is None when the plugin broke before describing itself (import error, hook raised, malformed
    data); then `name` is the plugin's entry point name in upper case. `conflict` is True when another
    distribution claims the same name (then `reason` names both).
    """

    name: str
    version: str
    spec_version: int | None
    usable: bool
    reason: str | None
    info: BackendInfo | None
    plugin: str
    conflict: bool = False
    # False while the backend's availability is not checked yet (then `usable` is False); the manager checks it
    # before handing the status out
    checked: bool = True

    @property
    def status_text(self) -> str:
        return "usable" if self.usable else f"unusable: {self.reason}"


def plugin_timeout() -> float:
    """Seconds one plugin step may take: ``UOPKIT_PLUGIN_TIMEOUT`` (default 20)."""
    text = os.environ.get("UOPKIT_PLUGIN_TIMEOUT", "").strip()
    try:
        value = float(text) if text else DEFAULT_PLUGIN_TIMEOUT
    except ValueError:
        value = DEFAULT_PLUGIN_TIMEOUT
    return value if value > 0 else DEFAULT_PLUGIN_TIMEOUT


class PluginFailed(Exception):
    """A plugin step raised (anything, SystemExit included) or hung; the message says which and why."""


def call_isolated(fn: Callable[[], T], what: str) -> T:
    """Run plugin code `fn` in a daemon thread and return its result; raise `PluginFailed` when it raises any
    BaseException or does not finish within `plugin_timeout` (the thread is then abandoned, still running)."""
    timeout = plugin_timeout()
    finished, error, result = run_in_thread(fn, timeout, f"uopkit plugin: {what}")
    if not finished:
        raise PluginFailed(
            f"{what} did not finish within {timeout:g} s (UOPKIT_PLUGIN_TIMEOUT); it was abandoned and may still "
            "be running in the background"
        )
    if error is not None:
        raise PluginFailed(f"{what} raised {_describe(error)}")
    return result  # type: ignore[return-value]


def canonical_distribution(name: str) -> str:
    """Distribution names compare like pip compares them: case-insensitive, runs of - _ . equal."""
    return re.sub(r"[-_.]+", "-", name).lower()


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
        # one lock for loading and collecting: reentrant, since registering invalidates what collecting caches
        self._lock = threading.RLock()
        self._builtins_loaded = False
        self._loaded = False
        # device names whose entry points `load(only=...)` already went through
        self._loaded_names: set[str] = set()
        # entry points already tried (loaded or failed), by (name, value, distribution)
        self._tried: set[tuple[str, str, str]] = set()
        # plugins that failed before their hook could run (import error, invalid hookimpls)
        self._failed: list[BackendStatus] = []
        # plugin name -> distribution name, for display
        self._distributions: dict[str, str] = {}
        # plugin name -> the statuses its hook gave (hook and availability run once per plugin)
        self._plugin_statuses: dict[str, list[BackendStatus]] = {}
        self._statuses: dict[str, BackendStatus] | None = None
        # availability() results by backend: id of its BackendInfo -> (that BackendInfo, result); the entry keeps
        # the BackendInfo alive, so its id can't be reused by another one after its plugin is unregistered
        self._availability: dict[int, tuple[BackendInfo, str | None]] = {}
        # what `best` found, with the statuses dict it looked at
        self._best: tuple[dict[str, BackendStatus] | None, BackendStatus | None, BackendStatus | None] | None = None

    # ---- registration

    def register(self, plugin: object, name: str | None = None, distribution: str | None = None) -> str | None:
        """Register a plugin (a module or an object with ``@hookimpl`` methods); returns its name, or None
        when it was rejected (then it is listed as broken)."""
        with self._lock:
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
            if not self.pm.get_hookcallers(plugin):
                # imported, but nothing in it is a hook: without this it would vanish from every listing
                self.pm.unregister(plugin)
                self._record_failure(label, distribution or label, _no_hook_reason(plugin))
                return None
            self._distributions[plugin_name] = distribution or plugin_name
            return plugin_name

    def unregister(self, name: str) -> None:
        with self._lock:
            self._statuses = None
            for status in self._plugin_statuses.pop(name, []):
                if status.info is not None:
                    self._availability.pop(id(status.info), None)
            self.pm.unregister(name=name)

    def _record_failure(self, plugin_name: str, distribution: str, reason: str) -> None:
        self._statuses = None
        name = plugin_name.rsplit(".", 1)[-1].upper()
        self._failed.append(BackendStatus(name, "?", None, False, reason, None, distribution))

    def _load_builtins(self) -> None:
        if self._builtins_loaded:
            return
        for module_name in self._builtins:
            try:
                module = call_isolated(
                    functools.partial(importlib.import_module, module_name), f"importing {module_name}"
                )
            except PluginFailed as e:  # a broken built-in must not break `import uopkit` either
                self._record_failure(module_name, CORE_DISTRIBUTION, _failure_text(e, module_name))
                continue
            self.register(module, name=module_name, distribution=CORE_DISTRIBUTION)
        self._builtins_loaded = True

    def _all_entry_points(self) -> list[importlib.metadata.EntryPoint]:
        if self._entry_points is None:
            self._entry_points = list(importlib.metadata.entry_points(group=PROJECT_NAME))
        return self._entry_points

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint) -> None:
        dist = ep.dist.name if ep.dist is not None else ep.name
        if (ep.name, ep.value, dist) in self._tried:
            return
        self._tried.add((ep.name, ep.value, dist))
        name = ep.name
        if self.pm.has_plugin(name) or self.pm.is_blocked(name):
            if self.pm.is_blocked(name) or self._distributions.get(name) == dist:
                # the same distribution seen twice on sys.path
                return
            # another distribution with an entry point of the same name: register it too (under a longer name),
            # so a claim on the same device name is seen as a conflict instead of being hidden
            name = f"{ep.name} ({dist})"
        try:
            plugin = call_isolated(ep.load, f"importing {ep.value}")
        except PluginFailed as e:
            self._record_failure(ep.name, dist, _failure_text(e, ep.value))
            return
        self.register(plugin, name=name, distribution=dist)

    def load(self, only: str | None = None) -> None:
        """Register the built-in backends and the installed entry points (each once). With `only` (a device name),
        just the entry points named like it, or from the distribution ``UOPKIT_BACKEND_<only>`` chooses."""
        with self._lock:
            if self._loaded or only in self._loaded_names:
                return
            self._load_builtins()
            chosen = os.environ.get(f"UOPKIT_BACKEND_{only}") if only else None
            for ep in self._all_entry_points():
                wanted = only is None or ep.name.upper() == only
                if not wanted and chosen and ep.dist is not None:
                    wanted = canonical_distribution(ep.dist.name) == canonical_distribution(chosen)
                if wanted:
                    self._load_entry_point(ep)
            # marked loaded only now, with everything registered: another thread never sees half a list
            if only is None:
                self._loaded = True
            else:
                self._loaded_names.add(only)

    # ---- collection

    def backends(self) -> dict[str, BackendStatus]:
        """Every installed backend by name, usable or not, each with the reason when not. Cached."""
        statuses = self._statuses
        if self._loaded and statuses is not None and all(s.checked for s in statuses.values()):
            # the common case, without the lock: the dict is replaced whole, never changed in place
            return dict(statuses)
        with self._lock:
            self.load()
            for key in list(self._collected()):
                self._checked(key)
            return dict(self._collected())

    def best(self) -> tuple[BackendStatus | None, BackendStatus | None]:
        """(the usable backend with the highest priority, the contested name with the highest priority): what
        ``Device.DEFAULT`` picks from. Availability is checked in priority order, up to the first usable backend."""
        cached = self._best
        if cached is not None and cached[0] is self._statuses:
            # the common case (every Tensor made without a device asks), without the lock: the same statuses
            return cached[1], cached[2]
        with self._lock:
            self.load()
            statuses = self._collected()
            contested = max((s for s in statuses.values() if s.conflict and s.info), key=priority, default=None)
            # sorted() is stable: among equal priorities the first registered wins, as max() would pick
            best = None
            for key in sorted(statuses, key=lambda k: -priority(statuses[k])):
                status = self._checked(key)
                if status.usable and status.info is not None:
                    best = status
                    break
            # remembered with the statuses it was picked from (replaced whole whenever anything changes)
            self._best = (self._statuses, best, contested)
            return best, contested

    def _checked(self, key: str) -> BackendStatus:
        """The status under `key` with its availability checked (under the lock)."""
        statuses = self._collected()
        status = statuses[key]
        if status.checked or status.info is None:
            return status
        info = status.info
        cached = self._availability.get(id(info))
        if cached is None or cached[0] is not info:
            cached = self._availability[id(info)] = (info, _availability_of(info))
        why_not = cached[1]
        status = dataclasses.replace(status, usable=why_not is None, reason=why_not, checked=True)
        # replaced whole: lock-free readers never see a half-updated dict
        self._statuses = {**statuses, key: status}
        return status

    def _collected(self) -> dict[str, BackendStatus]:
        """The statuses of what is registered now (collected once; registering more invalidates them)."""
        if self._statuses is None:
            self._statuses = self._collect()
        return self._statuses

    def status(self, name: str) -> BackendStatus | None:
        """The backend called `name` (upper case, no index), loading only the plugins that may provide it when it can
        (see `load`); None when no installed plugin provides it."""
        statuses = self._statuses
        if statuses is not None and (self._loaded or name in self._loaded_names):
            found = statuses.get(name)
            if found is not None and found.usable:
                return found
        with self._lock:
            if not self._loaded:
                self.load(only=name)
                found = self._checked(name) if name in self._collected() else None
                if found is not None and found.info is not None:
                    # an unusable one may be the wrong pick when the user chose a distribution not loaded yet
                    if found.usable or not os.environ.get(f"UOPKIT_BACKEND_{name}"):
                        return found
            self.load()
            return self._checked(name) if name in self._collected() else None

    def refresh(self) -> None:
        """Forget cached statuses (availability is checked again on the next `backends()`)."""
        with self._lock:
            self._statuses = None
            self._plugin_statuses.clear()
            self._availability.clear()

    def _plugin_results(self, impl: Any, spec_version: int) -> list[BackendStatus]:
        """The statuses of one plugin's hook (run once, isolated)."""
        dist = self._distributions.get(impl.plugin_name, impl.plugin_name)
        broken_name = impl.plugin_name.split(" (")[0].rsplit(".", 1)[-1].upper()

        def broken(reason: str) -> list[BackendStatus]:
            return [BackendStatus(broken_name, "?", None, False, reason, None, dist)]

        if impl.hookwrapper or impl.wrapper:
            return broken("uopkit_backends must not be a wrapper")
        try:
            result: Any = call_isolated(impl.function, "uopkit_backends()")
        except PluginFailed as e:
            return broken(str(e))
        problem = _check_result(result)
        if problem is not None:
            return broken(f"uopkit_backends() returned {problem}")
        return [_status_of(info, dist, spec_version) for info in result]

    def _collect(self) -> dict[str, BackendStatus]:
        from uopkit.uop.spec import SPEC_VERSION

        # call each plugin's hookimpl on its own so one failure can't hide the others
        claims: dict[str, list[BackendStatus]] = {}
        broken: list[BackendStatus] = list(self._failed)
        for impl in self.pm.hook.uopkit_backends.get_hookimpls():
            if impl.plugin_name not in self._plugin_statuses:
                self._plugin_statuses[impl.plugin_name] = self._plugin_results(impl, SPEC_VERSION)
            for status in self._plugin_statuses[impl.plugin_name]:
                if status.info is None:
                    broken.append(status)
                else:
                    claims.setdefault(status.name, []).append(status)
        statuses: dict[str, BackendStatus] = {}
        for name, claimants in claims.items():
            for key, status in _resolve_claims(name, claimants):
                statuses[key] = status
        for status in broken:
            # a broken plugin's name is a guess (its entry point's): it never takes a name a backend claims
            key = status.name if status.name not in statuses else f"{status.name} ({status.plugin})"
            statuses.setdefault(key, status)
        return statuses


def _resolve_claims(name: str, claimants: list[BackendStatus]) -> list[tuple[str, BackendStatus]]:
    """(key, status) pairs for the backends that claim device `name`: the chosen or only one under `name`, the others
    under ``"NAME (distribution)"``, unusable."""
    variable = f"UOPKIT_BACKEND_{name}"
    chosen = os.environ.get(variable, "").strip()
    dists = ", ".join(dict.fromkeys(c.plugin for c in claimants))
    distinct = {canonical_distribution(c.plugin) for c in claimants}
    if len(claimants) > 1 and len(distinct) == 1:
        # several entry points of one distribution: choosing a distribution can't settle it, the package must
        reason = (
            f"device name {name} is claimed {len(claimants)} times by {claimants[0].plugin} (by several of its "
            "entry points in the group 'uopkit'); a distribution provides each device name once"
        )
        return _unusable_claims(name, claimants, reason)
    if chosen:
        picked = [c for c in claimants if canonical_distribution(c.plugin) == canonical_distribution(chosen)]
        if picked:
            not_chosen = f"not chosen ({variable}={chosen})"
            others = [c for c in claimants if c is not picked[0]]
            return [(name, picked[0])] + [
                (f"{name} ({c.plugin})", dataclasses.replace(c, usable=False, reason=not_chosen, checked=True))
                for c in others
            ]
        reason = f"{variable}={chosen}, but {name} is provided by {dists}; set {variable} to one of them"
        return _unusable_claims(name, claimants, reason)
    if len(claimants) == 1:
        return [(name, claimants[0])]
    reason = (
        f"device name {name} is claimed by {len(distinct)} distributions: {dists}; choose one with "
        f"{variable}=<distribution>"
    )
    return _unusable_claims(name, claimants, reason)


def _unusable_claims(name: str, claimants: list[BackendStatus], reason: str) -> list[tuple[str, BackendStatus]]:
    out = []
    for i, c in enumerate(claimants):
        key = name if i == 0 else f"{name} ({c.plugin})"
        out.append((key, dataclasses.replace(c, usable=False, reason=reason, conflict=True, checked=True)))
    return out


def _no_hook_reason(plugin: object) -> str:
    """Why a plugin that registered no hook is unusable: usually `uopkit_backends` without ``@hookimpl``."""
    where = getattr(plugin, "__name__", None) or type(plugin).__name__
    if callable(getattr(plugin, "uopkit_backends", None)):
        return (
            f"{where}.uopkit_backends is not marked @hookimpl, so it was never called; decorate it with "
            "`@hookimpl` (from uopkit.plugin import hookimpl)"
        )
    return f"{where} has no @hookimpl function; it must define `@hookimpl def uopkit_backends()`"


def _failure_text(e: PluginFailed, target: str) -> str:
    """'failed to import X: <error>' (or the hang message) for an import step."""
    text = str(e)
    prefix = f"importing {target} raised "
    return f"failed to import {target}: {text[len(prefix) :]}" if text.startswith(prefix) else f"{text}"


def _status_of(info: BackendInfo, dist: str, spec_version: int) -> BackendStatus:
    if info.spec_version != spec_version:
        reason = (
            f"targets UOp spec version {info.spec_version}, but this uopkit implements spec version "
            f"{spec_version}; install versions of uopkit and {dist} that match"
        )
        return BackendStatus(info.name, info.version, info.spec_version, False, reason, info, dist)
    # usable or not is known once the manager checks availability (`BackendManager._checked`)
    return BackendStatus(
        info.name, info.version, info.spec_version, False, "not checked yet", info, dist, checked=False
    )


def _availability_of(info: BackendInfo) -> str | None:
    """None when the backend can run here, else why not (its `availability()`, run isolated)."""
    try:
        why_not = call_isolated(info.availability, "availability check")
    except PluginFailed as e:
        why_not = str(e)
    if why_not is not None and not isinstance(why_not, str):
        why_not = f"availability() returned {type(why_not).__name__}, expected str or None"
    elif why_not is not None and not why_not.strip():
        # a reason, but an empty one: still unusable (only None means usable), said so rather than shown blank
        why_not = f"(no reason given: availability() returned {why_not!r}; it returns None when the backend can run)"
    return why_not


def priority(status: BackendStatus) -> int:
    """A backend's priority (0 for a broken plugin): the usable one with the highest is the default device."""
    return status.info.priority if status.info is not None else 0


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
    names = [item.name for item in result]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        counts = ", ".join(f"{n} {names.count(n)} times" for n in repeated)
        return f"{counts}; return one BackendInfo per device name"
    return None


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


_manager: BackendManager | None = None
_manager_lock = threading.Lock()


def get_manager() -> BackendManager:
    """The process-wide manager (created, not loaded, on first use)."""
    global _manager
    with _manager_lock:
        if _manager is None:
            _manager = BackendManager()
        return _manager


def _fresh_locks_in_child() -> None:
    # a thread of the parent may have held these when it forked; in the child that thread doesn't exist, so the lock
    # would never be released (a DataLoader worker's first Tensor waited forever on it). What they guard is replaced
    # whole (the caches), never left half-changed
    global _manager_lock
    _manager_lock = threading.Lock()
    if _manager is not None:
        _manager._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_locks_in_child)


def set_manager(manager: BackendManager | None) -> BackendManager | None:
    """Swap the process-wide manager (for tests); returns the previous one."""
    global _manager
    old, _manager = _manager, manager
    return old


def backends() -> dict[str, BackendStatus]:
    """Every installed backend by name; see `BackendManager.backends`."""
    return get_manager().backends()
