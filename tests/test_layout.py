"""The core's layout, read from the source (nothing imported): no import cycles, layers import downward only, and
backends use only the public contract.

Imports are read with `ast`, function-level ones included. Imports under ``if TYPE_CHECKING:`` are left out of the
cycle and layer checks: they never run, and they are how an annotation names a type from a higher layer. The
plugin-facing contract (plugin, device, renderer) doesn't do even that: its type-only imports go downward too (the
hook's `BackendInfo.open` returns a `hookspecs.OpenedDevice` protocol, not the device layer's `Compiled`). A module's
implicit import of its parent package is not an edge either.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core"

# The core's layers, lowest first: a module may import modules of its own layer or of a lower one, never a higher one.
# The longest prefix that matches a module names its layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("uopkit.helpers", "uopkit.dtype", "uopkit.diskcache", "uopkit.mappings")),
    ("ir", ("uopkit.uop",)),
    ("renderer", ("uopkit.renderer",)),
    ("plugin", ("uopkit.plugin",)),
    ("device", ("uopkit.device",)),
    # the reference emulator is a backend: it uses the device contract, nothing above it
    ("emulator", ("uopkit.emulator",)),
    ("codegen", ("uopkit.codegen",)),
    ("schedule", ("uopkit.schedule",)),
    ("engine", ("uopkit.engine",)),
    # TinyJit takes and returns Tensors: front end (uopkit/jit.py), above the engine whose launches it records
    (
        "frontend",
        ("uopkit.gradient", "uopkit.tensor", "uopkit.nn", "uopkit.jit", "uopkit.data", "uopkit.distributions"),
    ),
    ("tools", ("uopkit.cli", "uopkit.__main__", "uopkit.testing", "uopkit.templates", "uopkit")),
]
PREFIXES_LONGEST_FIRST = sorted(
    ((prefix, rank) for rank, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes), key=lambda pr: -len(pr[0])
)


def layer_of(module: str) -> int:
    for prefix, rank in PREFIXES_LONGEST_FIRST:
        if module == prefix or module.startswith(prefix + "."):
            return rank
    raise AssertionError(f"{module} is in no layer of tests/test_layout.py: add it to LAYERS")


def core_modules() -> dict[str, Path]:
    found = {}
    for path in sorted((CORE / "uopkit").rglob("*.py")):
        parts = list(path.relative_to(CORE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(tree: ast.AST, type_only: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at module level, in functions and classes, not under TYPE_CHECKING
    (with `type_only`, those too)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_only:
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported_names(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[tuple[str, str | None]]:
    """(module, name) pairs an import statement reads; name is None for `import x.y`."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([node.module] if node.module else []))
    return [(base, a.name) for a in node.names]


def import_graph(type_only: bool = False) -> dict[str, dict[str, int]]:
    """module -> {core module it imports: line of the first such import} (with `type_only`, TYPE_CHECKING imports
    count too)."""
    modules = core_modules()
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in runtime_imports(tree, type_only):
            for base, name in imported_names(module, path.name == "__init__.py", node):
                # `from pkg import sub` imports the submodule sub; `from pkg.mod import name` the module pkg.mod
                target = f"{base}.{name}" if name is not None and f"{base}.{name}" in modules else base
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].setdefault(target, node.lineno)
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}
    for start in sorted(graph):
        if start in state:
            continue
        path, iters = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while path:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(sorted(graph[nxt])))
    return None


def test_graph_is_read():
    # the reader sees module-level, function-level and submodule imports (so the checks below can fail)
    graph = import_graph()
    assert "uopkit.uop.ops" in graph["uopkit.codegen.lowerer"]
    assert "uopkit.codegen.opt.search" in graph["uopkit.codegen"]
    assert "uopkit.codegen.opt.tc" in graph["uopkit.codegen.opt"]
    assert "uopkit.device" not in graph["uopkit.plugin.hookspecs"]


def test_find_cycle_finds_one():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1}, "b": {}}) is None


def test_no_import_cycles():
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle is not None:
        steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:], strict=False)]
        pytest.fail("import cycle in the core:\n  " + "\n  ".join(steps))


def test_layers_import_downward():
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) line {line} imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in import_graph().items()
        for target, line in targets.items()
        if layer_of(target) > layer_of(module)
    ]
    assert not upward, "upward imports:\n  " + "\n  ".join(upward)


def test_contract_names_nothing_above_it_even_for_types():
    contract = ("uopkit.plugin", "uopkit.device", "uopkit.renderer")
    upward = [
        f"{module} line {line} imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in import_graph(type_only=True).items()
        if module.startswith(contract)
        for target, line in targets.items()
        if layer_of(target) > layer_of(module)
    ]
    assert not upward, "the plugin-facing contract imports a higher layer for its types:\n  " + "\n  ".join(upward)
    # the check reads TYPE_CHECKING imports (device.py names the renderer only for types)
    assert "uopkit.renderer" in import_graph(type_only=True)["uopkit.device"]


def test_every_module_has_a_layer():
    for module in core_modules():
        layer_of(module)


# ------------------------------------------------------------------------------------------ the public contract


def public_modules() -> set[str]:
    """The modules docs/writing-a-backend.md lists under "What a backend may import" (the one place they're named)."""
    text = (ROOT / "docs" / "writing-a-backend.md").read_text()
    match = re.search(r"^## \d+\. What a backend may import\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "docs/writing-a-backend.md has no section 'What a backend may import'"
    found: set[str] = set()
    for line in match.group(1).splitlines():
        if line.startswith("- "):
            head = line[2:].split(":")[0]
            found.update(re.findall(r"`(uopkit(?:\.\w+)*)`", head))
    return found


def backend_sources() -> list[tuple[str, str]]:
    """(where, source) of every in-tree backend file, the reference emulator and the scaffold's templates."""
    # a backend's package (its tests may drive the core through the front end and the pipeline, as users and the
    # core's own tests do)
    files = [p for p in sorted((ROOT / "plugins").glob("*/uopkit_*/**/*.py")) if ".venv" not in p.parts]
    files.append(CORE / "uopkit" / "emulator.py")
    sources = [(str(p.relative_to(ROOT)), p.read_text()) for p in files]
    for tmpl in sorted((CORE / "uopkit" / "templates").rglob("*.py.tmpl")):
        # placeholders are {{NAME}}-style: any identifier makes the template parse
        sources.append((str(tmpl.relative_to(ROOT)), re.sub(r"\{\{\s*\w+\s*\}\}", "x", tmpl.read_text())))
    return sources


def contract_violations(where: str, source: str, public: set[str]) -> list[str]:
    problems = []
    for node in runtime_or_typing_imports(ast.parse(source, where)):
        for base, name in imported_names("", False, node):
            if base != "uopkit" and not base.startswith("uopkit."):
                continue
            full = f"{base}.{name}" if name is not None and f"{base}.{name}" in public else base
            if full not in public:
                problems.append(f"{where}:{node.lineno} imports from {base}, which is not a public module")
            elif any(part.startswith("_") for part in full.split(".")) or (name or "").startswith("_"):
                problems.append(f"{where}:{node.lineno} imports the private name {name} from {base}")
    return problems


def runtime_or_typing_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    # a backend's annotations are contract too: TYPE_CHECKING imports count here
    return (n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom))


def test_public_modules_exist():
    public = public_modules()
    assert {"uopkit.device", "uopkit.renderer", "uopkit.plugin"} <= public
    missing = sorted(m for m in public if m not in core_modules())
    assert not missing, f"docs/writing-a-backend.md lists modules that don't exist: {missing}"


def test_backends_use_only_the_public_contract():
    public = public_modules()
    sources = backend_sources()
    assert any("plugins/cpu" in w for w, _ in sources) and any(w.endswith(".tmpl") for w, _ in sources)
    problems = [p for where, src in sources for p in contract_violations(where, src, public)]
    assert not problems, "\n".join(problems)


def test_contract_check_catches_private_and_internal_imports():
    public = {"uopkit.device"}
    src = "from uopkit.device import _cache_path\nfrom uopkit.codegen import get_program\nimport uopkit.device\n"
    problems = contract_violations("x.py", src, public)
    assert len(problems) == 2
    assert "private name _cache_path" in problems[0] and "uopkit.codegen" in problems[1]


def test_no_core_module_is_too_long():
    # one concern per module: a file past this has grown several (tensor.py once held every Tensor method)
    long = {
        str(p.relative_to(ROOT)): n
        for p in (CORE / "uopkit").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 1200
    }
    assert not long, f"split these by concern: {long}"
