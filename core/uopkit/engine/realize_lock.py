"""The lock that keeps a process's realizes one at a time, and what a fork does about it."""

from __future__ import annotations

import os
import threading

# one realize at a time in the process: a realize reads and rewrites every live tensor's graph (its undo journal, the
# pending reads it protects with copies on write, the graphs it rewires to them), so two threads' realizes must not
# interleave (one thread's realize rewired another's copies back onto the STOREs they copy). Re-entrant, so that a
# realize started from inside one (a finalizer, a hook) runs in its own thread instead of waiting on it forever
realize_lock = threading.RLock()
# a fork waits for the realize another thread is in, so the child starts between realizes: its graphs whole and the
# lock free (held by a thread that doesn't exist in the child, it would wait forever at the child's first realize)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=realize_lock.acquire, after_in_parent=realize_lock.release, after_in_child=realize_lock.release
    )
