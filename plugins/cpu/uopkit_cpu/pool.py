"""The CPU backend's thread pool: a kernel's parallel loop split into chunks that the calling thread and the pool's
workers claim one at a time.

Why not OpenMP's `parallel for`: an OpenMP team ends at a barrier that every thread of the team must reach, so a
kernel of 100 us waits a whole scheduler time slice (4-8 ms) for a worker that another process kept off its core. Here
the caller claims chunks too and waits only for chunks another thread has started: a worker that comes late finds no
work left, and on a busy machine a kernel runs at worst at one thread's speed. The pool is also persistent (a kernel
doesn't start threads) and sized by the caller (`uopkit.helpers.cpu_threads`: affinity mask, cgroup quota,
UOPKIT_THREADS).

A threaded kernel (see `ClangRenderer`) exports ``void <name>_chunk(void **bufs, const int *vals, int chunk, int
chunks)``, which runs its share of the parallel loop, and ``const int <name>_chunks``, how many chunks it is split
into; `run(entry, bufs, vals, chunks)` runs chunks 0..chunks-1 and returns when all are done.
"""

from __future__ import annotations

import ctypes
import threading

from uopkit.hostlib import load_library

# Workers spin this long for the next job before they sleep (kernels of one realize come back to back; a wake-up from
# sleep costs tens of microseconds); the caller spins this long on chunks other threads run before it yields its core
# (on a busy machine the thread it waits for may need that core).
SPIN_NS = 200_000
# workers the pool may start at most (more chunks than workers + 1 still run, some on the caller)
MAX_WORKERS = 255

POOL_SOURCE = r"""
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

typedef void (*chunk_fn)(void **bufs, const int *vals, int chunk, int chunks);

#define SPIN_NS %(spin_ns)dLL
#define MAX_WORKERS %(max_workers)d

static struct {
  pthread_mutex_t lock;     /* guards sleepers and worker start; sleeping workers wait on `wake` */
  pthread_cond_t wake;
  pthread_mutex_t busy;     /* one job at a time: a caller that finds it taken runs its chunks alone */
  _Atomic uint32_t gen;     /* the current job's number; workers wait for it to change */
  /* (job number << 32) | (chunks << 16) | next chunk: a claim succeeds only for the job it was meant for */
  _Atomic uint64_t claim;
  _Atomic int done;         /* chunks of the current job finished */
  int sleepers, workers;
  chunk_fn fn;
  void **bufs;
  const int *vals;
  int chunks;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* a chunk of job `gen` nobody took yet, or -1 */
static int claim(uint32_t gen) {
  uint64_t c = atomic_load_explicit(&pool.claim, memory_order_acquire);
  for (;;) {
    uint32_t chunks = (uint32_t)(c >> 16) & 0xffff, next = (uint32_t)c & 0xffff;
    if ((uint32_t)(c >> 32) != gen || next >= chunks) return -1;
    if (atomic_compare_exchange_weak_explicit(&pool.claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire))
      return (int)next;
  }
}

static void work(uint32_t gen) {
  int chunk;
  while ((chunk = claim(gen)) >= 0) {
    /* the job's fields are gen's: the job can't end (and the next be set up) before this chunk is done */
    pool.fn(pool.bufs, pool.vals, chunk, pool.chunks);
    atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
  }
}

static uint32_t wait_job(uint32_t seen) {
  uint32_t g;
  long long until = now_ns() + SPIN_NS;
  for (int i = 1;; i++) {
    g = atomic_load_explicit(&pool.gen, memory_order_acquire);
    if (g != seen) return g;
    relax();
    if (i %% 256 == 0 && now_ns() > until) break;
  }
  pthread_mutex_lock(&pool.lock);
  pool.sleepers++;
  while ((g = atomic_load_explicit(&pool.gen, memory_order_acquire)) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
  pool.sleepers--;
  pthread_mutex_unlock(&pool.lock);
  return g;
}

static void *worker(void *start) {
  uint32_t seen = (uint32_t)(uintptr_t)start;
  for (;;) {
    seen = wait_job(seen);
    work(seen);
  }
  return 0;
}

/* after fork() the child has none of the parent's workers (and a lock a worker held stays held): start afresh */
static void reset_after_fork(void) {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER, busy = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
  pool.lock = lock;
  pool.busy = busy;
  pool.wake = wake;
  pool.sleepers = 0;
  pool.workers = 0;
}

static void start_workers(int want) {
  static int registered;
  pthread_mutex_lock(&pool.lock);
  if (!registered) registered = pthread_atfork(0, 0, reset_after_fork) == 0;
  while (pool.workers < want && pool.workers < MAX_WORKERS) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    uint32_t seen = atomic_load_explicit(&pool.gen, memory_order_acquire);
    int failed = pthread_create(&t, &attr, worker, (void *)(uintptr_t)seen);
    pthread_attr_destroy(&attr);
    if (failed) break; /* no more threads: the caller runs what the missing workers would have */
    pool.workers++;
  }
  pthread_mutex_unlock(&pool.lock);
}

void uopkit_pool_run(chunk_fn fn, void **bufs, const int *vals, int chunks) {
  if (chunks <= 1 || chunks > 0xffff || pthread_mutex_trylock(&pool.busy) != 0) {
    for (int c = 0; c < chunks; c++) fn(bufs, vals, c, chunks);
    return;
  }
  if (pool.workers < chunks - 1) start_workers(chunks - 1);
  pool.fn = fn;
  pool.bufs = bufs;
  pool.vals = vals;
  pool.chunks = chunks;
  atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
  uint32_t gen = atomic_load_explicit(&pool.gen, memory_order_relaxed) + 1;
  atomic_store_explicit(&pool.claim, ((uint64_t)gen << 32) | ((uint64_t)chunks << 16), memory_order_release);
  atomic_store_explicit(&pool.gen, gen, memory_order_release);
  pthread_mutex_lock(&pool.lock);
  if (pool.sleepers) pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  work(gen);
  /* only chunks another thread started are left: wait for them, giving up the core once the wait gets long */
  long long until = 0;
  for (int i = 1; atomic_load_explicit(&pool.done, memory_order_acquire) < chunks; i++) {
    if (until == 0 || now_ns() < until) {
      relax();
      if (i == 1) until = now_ns() + SPIN_NS;
    } else {
      sched_yield();
    }
  }
  pthread_mutex_unlock(&pool.busy);
}

int uopkit_pool_workers(void) { return pool.workers; }
"""


class ThreadPool:
    """The pool's library, built once per process with the backend's C compiler (through its compile cache)."""

    def __init__(self, compiler: object) -> None:
        from uopkit_cpu.compiler import ClangCompiler

        assert isinstance(compiler, ClangCompiler)
        src = POOL_SOURCE % {"spin_ns": SPIN_NS, "max_workers": MAX_WORKERS}
        lib = load_library(compiler.compile_cached(src), "CPU thread pool")
        self.run = lib.uopkit_pool_run
        self.run.restype = None
        self.run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        self.workers = lib.uopkit_pool_workers
        self.workers.restype = ctypes.c_int
        self.workers.argtypes = []


_pool: ThreadPool | None = None
_pool_lock = threading.Lock()


def thread_pool() -> ThreadPool:
    """The process's pool (built on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            from uopkit_cpu.compiler import CFLAGS, ClangCompiler

            _pool = ThreadPool(ClangCompiler(flags=(*CFLAGS, "-pthread")))
        return _pool
