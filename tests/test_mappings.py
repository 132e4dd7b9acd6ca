"""uopkit.mappings: the process's memory mappings against Linux's cap (vm.max_map_count). The tests take a process
to the cap in a subprocess (every other page of one anonymous mapping made read-only: each page a mapping)."""

from __future__ import annotations

import pytest

from uopkit import mappings
from uopkit.helpers import run_in_thread
from uopkit.testing.map_pressure import run_near_cap

CAP = mappings.map_cap()
# filling a larger cap takes seconds and hundreds of MB of kernel memory
needs_cap = pytest.mark.skipif(
    CAP is None or CAP > 1 << 17 or mappings.map_count() is None,
    reason="takes the process to vm.max_map_count (Linux, a cap of at most 131072)",
)


def test_counts_and_cap() -> None:
    if CAP is None:
        assert mappings.map_count() is None or mappings.near_cap() is False
        return
    count = mappings.map_count()
    assert count is not None and 0 < count < CAP
    assert not mappings.near_cap()
    assert mappings.near_cap(CAP)
    # far from the cap nothing is reclaimed and nothing raised
    called: list[int] = []
    mappings.add_reclaimer(lambda: called.append(1))
    try:
        mappings.ensure_headroom("a test")
    finally:
        mappings._reclaimers.pop()
    assert called == []


@needs_cap
@pytest.mark.parametrize("left", [0, 2])
def test_a_thread_start_at_the_cap_raises_instead_of_hanging(left: int) -> None:
    # a mapping or two under the cap, a new thread gets its stack but can't map its first Python frame: it reports a
    # MemoryError of its own and never tells Thread.start it began, which then waited forever (seen when a long test
    # session had loaded ~9,000 kernels); at the cap Thread.start raises RuntimeError("can't start new thread")
    out = run_near_cap(
        f"""
        import time
        from uopkit.helpers import run_in_thread
        from uopkit.mappings import MappingLimitError
        m = fill({left})
        start = time.perf_counter()
        try:
            run_in_thread(lambda: 1, 5.0, "probe")
            print("started")
        except MappingLimitError as e:
            print(f"raised after {{time.perf_counter() - start:.2f}} s: {{e}}")
        m.close()
        # the mappings given back, threads start again
        print("after:", run_in_thread(lambda: 42, 5.0, "probe"))
        """
    )
    first, after = out.strip().splitlines()
    assert first.startswith("raised after"), out
    assert float(first.split()[2]) < 2
    assert "starting the thread 'probe'" in first and f"vm.max_map_count={CAP}" in first
    assert "sysctl -w vm.max_map_count" in first and "fewer distinct shapes" in first
    assert after == "after: (True, None, 42)"


@needs_cap
def test_near_the_cap_the_reclaimers_give_mappings_back() -> None:
    # a reclaimer that can release what holds the mappings: the thread starts
    out = run_near_cap(
        """
        from uopkit import mappings
        from uopkit.helpers import run_in_thread
        held = [fill(20)]
        mappings.add_reclaimer(lambda: held and held.pop().close())
        print(run_in_thread(lambda: 7, 5.0, "probe"), len(held))
        """
    )
    assert out.strip() == "(True, None, 7) 0"


def test_run_in_thread_still_runs() -> None:
    assert run_in_thread(lambda: 3, 5.0, "probe") == (True, None, 3)
