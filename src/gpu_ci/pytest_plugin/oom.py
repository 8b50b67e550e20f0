"""GPU out-of-memory errors told apart from other failures, and caches released.

An error is an out-of-memory error when it, or any exception in its chain
(``__cause__``, ``__context__``, an exception group's members), is of a
framework's out-of-memory type or carries a framework's documented message.
An assertion or ``pytest.fail`` never counts, even while it handles an OOM: it is the
test's own verdict; a group counts when each of its members is an OOM.
"""

from __future__ import annotations

import gc
import re
import sys
from collections.abc import Callable
from typing import Any

#: Out-of-memory classes by module and qualified name (any class in the MRO).
#: torch: ``torch.OutOfMemoryError`` (torch.cuda.OutOfMemoryError is that class since
#: 2.5; before, it was defined in torch.cuda), a RuntimeError, "CUDA out of memory. Tried
#: to allocate ...". CuPy: ``cupy.cuda.memory.OutOfMemoryError(MemoryError)``, "Out of
#: memory allocating N bytes (allocated so far: M bytes)." (cupy/cuda/memory.pyx).
#: TensorFlow: ``tf.errors.ResourceExhaustedError`` ("OOM when allocating tensor").
TYPES = frozenset(
    {
        "torch.OutOfMemoryError",
        "torch.cuda.OutOfMemoryError",
        "cupy.cuda.memory.OutOfMemoryError",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError",
    }
)

#: The frameworks' documented out-of-memory messages.
MESSAGES = re.compile(
    "|".join(
        (
            r"CUDA out of memory",  # torch's caching allocator
            r"CUDA error: out of memory",  # torch, cudaMalloc outside the cache
            r"\bCUDA_ERROR_OUT_OF_MEMORY\b",  # driver API: numba's CudaAPIError, cuda-python
            r"\bcudaErrorMemoryAllocation\b",  # runtime API: cuda-python, CuPy's CUDARuntimeError
            # XLA's status (JAX's XlaRuntimeError / JaxRuntimeError): "RESOURCE_EXHAUSTED: Out of
            # memory while trying to allocate N bytes."
            r"\bRESOURCE_EXHAUSTED\b.{0,40}?(?:[Oo]ut of memory|allocat)",
            # RMM: rmm::out_of_memory (a std::bad_alloc) reaches Python as MemoryError
            r"std::bad_alloc: out_of_memory",
            r"\bCUBLAS_STATUS_ALLOC_FAILED\b",  # cuBLAS could not allocate its workspace
        )
    ),
    re.DOTALL,
)


def _members(e: BaseException) -> list[BaseException]:
    members = getattr(e, "exceptions", None)  # ExceptionGroup (3.11+, or the backport)
    if not isinstance(members, (list, tuple)):
        return []
    return [m for m in members if isinstance(m, BaseException)]


def reason(exc: BaseException) -> str | None:
    """Why ``exc`` is a GPU out-of-memory error, or None.

    The reason is the matching type's name or the message's matching words. An
    assertion (or ``pytest.fail``) is the test's own verdict, even while it handles an
    OOM; an exception group is an OOM only when each of its members is one."""
    try:
        return _reason(exc)
    except RecursionError:  # groups nested past Python's limit: no answer, not an error
        return None


def _reason(exc: BaseException) -> str | None:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        for cls in type(e).__mro__:
            name = f"{cls.__module__}.{cls.__qualname__}"
            if name in TYPES:
                return name
        if isinstance(e, AssertionError) or _is_outcome(e):
            continue
        members = _members(e)
        if members:
            whys = [_reason(m) for m in members]
            if all(whys):
                return whys[0]
            continue
        found = MESSAGES.search(_text(e))
        if found:
            return f"{type(e).__name__}: {found.group(0)}"
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    return None


def _text(e: BaseException) -> str:
    try:
        return str(e)
    except Exception:  # a broken __str__ is not ours to fix
        return ""


def _is_outcome(e: BaseException) -> bool:
    # pytest.fail / skip / xfail carry the test's own words; their classes name their
    # module "builtins" (pytest >= 7 shows them so), hence the base class, not the module
    base = getattr(sys.modules.get("_pytest.outcomes"), "OutcomeException", None)
    return isinstance(base, type) and isinstance(e, base)


def release_caches() -> list[str]:
    """Free the caching allocators of the frameworks already imported; never imports one.

    The failed attempt's frames (kept in ``sys.last_*`` for debuggers) hold its arrays:
    they go first, and a collection frees what they held, so the caches can give it back."""
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()
    freed = []
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and _safe(lambda: cuda.is_initialized()):
        freed += ["torch.cuda.empty_cache"] if _safe(lambda: cuda.empty_cache() or True) else []
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        pool = _safe(lambda: cupy.get_default_memory_pool())
        if pool is not None and _safe(lambda: pool.free_all_blocks() or True):
            freed.append("cupy default memory pool")
        pinned = _safe(lambda: cupy.get_default_pinned_memory_pool())
        if pinned is not None:
            _safe(lambda: pinned.free_all_blocks())
    jax = sys.modules.get("jax")
    if jax is not None and _safe(lambda: jax.clear_caches() or True):
        freed.append("jax.clear_caches")
    return freed


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # a framework's own failure to free is no reason to stop the tests
        return None
