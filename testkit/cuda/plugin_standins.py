"""Stand-ins for the frameworks the pytest plugin meets, written into pytester's directories.

Installing torch, CuPy or JAX does not fit the suite's time, so each is played by a module
built from its documented names and messages (cited beside each). The torch stand-in's
caching allocator keeps its memory in the fake NVML's ledger (FAKE_NVML_LEDGER): what it
reserves is what NVML lists for this process, on the GPU CUDA_VISIBLE_DEVICES names first.
"""

from __future__ import annotations

# torch >= 2.5 defines torch.OutOfMemoryError (a RuntimeError; torch.cuda.OutOfMemoryError is
# the same class) with "CUDA out of memory. Tried to allocate 150.00 MiB (GPU 0; ...)"
# (torch/csrc/Exceptions.cpp; the message of c10/cuda/CUDACachingAllocator.cpp, as quoted in
# e.g. github.com/rinongal/textual_inversion/issues/155). torch.cuda.empty_cache releases the
# cached, unused blocks; max_memory_allocated / reset_peak_memory_stats are the peak counter;
# memory_reserved - memory_allocated is what the cache holds unused.
TORCH_INIT = """\
class OutOfMemoryError(RuntimeError):
    pass


OutOfMemoryError.__module__ = "torch"
from torch import cuda  # noqa: E402
"""

TORCH_CUDA = """\
import atexit
import os

from torch import OutOfMemoryError

MIB = 1024 * 1024
CONTEXT_MIB = 300  # what creating a CUDA context costs, as NVML counts it per process
_state = {"init": False, "allocated": 0, "reserved": 0, "peak": 0}


def _gpu():
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    return int(first[4:12]) if first.startswith("GPU-") else int(first or 0)


def _ledger():
    return os.path.join(os.environ["FAKE_NVML_LEDGER"], f"{_gpu()}.{os.getpid()}")


def _others():
    total, mine = 0, os.path.basename(_ledger())
    directory = os.environ["FAKE_NVML_LEDGER"]
    for name in os.listdir(directory):
        if name.split(".")[0] == str(_gpu()) and name != mine:
            with open(os.path.join(directory, name)) as f:
                total += int(f.read().split()[0])
    return total


@atexit.register
def _exit():  # the driver frees a process's memory when it ends
    if _state["init"] and os.path.exists(_ledger()):
        os.unlink(_ledger())


def _sync():
    with open(_ledger(), "w") as f:
        f.write(f"{CONTEXT_MIB + _state['reserved']} python\\n")


OutOfMemoryError = OutOfMemoryError
cudaOutOfMemory = OutOfMemoryError


def is_initialized():
    return _state["init"]


class Block:
    # device memory the caching allocator handed out; freed (kept cached) when collected

    def __init__(self, mib):
        self.mib = mib

    def __del__(self):
        free(self.mib)


def _fits(mib):
    capacity = int(os.environ.get("FAKE_TORCH_CAPACITY_MIB", "81920"))
    return CONTEXT_MIB + _state["reserved"] + mib + _others() <= capacity


def alloc(mib):
    # from the cache when it holds enough, else a new segment; on failure the allocator
    # frees its cache and tries once more, as torch's does
    _state["init"] = True
    need = _state["allocated"] + mib
    if need > _state["reserved"]:
        grow = need - _state["reserved"]
        if not _fits(grow):
            _state["reserved"] = _state["allocated"]  # torch releases its cache and retries
            grow = mib
        if not _fits(grow):
            _sync()
            raise OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {mib:.2f} MiB (GPU {_gpu()}; "
                f"{_state['allocated']:.2f} MiB already allocated; "
                f"{_state['reserved']:.2f} MiB reserved in total by PyTorch)"
            )
        _state["reserved"] += grow
    _state["allocated"] = need
    _state["peak"] = max(_state["peak"], need)
    _sync()
    return Block(mib)


def free(mib):
    _state["allocated"] -= mib  # the block stays cached (reserved)


def empty_cache():
    _state["reserved"] = _state["allocated"]
    if _state["init"]:
        _sync()


def memory_allocated(device=None):
    return _state["allocated"] * MIB


def memory_reserved(device=None):
    return _state["reserved"] * MIB


def max_memory_allocated(device=None):
    return _state["peak"] * MIB


def reset_peak_memory_stats(device=None):
    _state["peak"] = _state["allocated"]
"""


def torch_files() -> dict[str, str]:
    """The torch stand-in as pytester's ``makepyfile`` takes it."""
    return {"torch/__init__": TORCH_INIT, "torch/cuda": TORCH_CUDA}


# Exceptions of the other frameworks, by their documented module, name and message.
def leak_suite(middle: str, middle_mib: int, leak_mib: int) -> str:
    """A suite on the torch stand-in that warms up, allocates, then leaks.

    ``middle`` allocates ``middle_mib`` and keeps nothing; ``test_leaky`` (line 10) keeps
    ``leak_mib``."""
    return f"""
        import torch
        KEEP = []

        def test_warm_up():
            torch.cuda.alloc(100)

        def {middle}():
            torch.cuda.alloc({middle_mib})

        def test_leaky():
            KEEP.append(torch.cuda.alloc({leak_mib}))
        """


FRAMEWORK_ERRORS = """\
def _standin(module, name, base):
    cls = type(name, (base,), {})
    cls.__module__ = module
    return cls


# cupy/cuda/memory.pyx: class OutOfMemoryError(MemoryError), 'Out of memory allocating {:,}
# bytes (allocated so far: {:,} bytes).'
CupyOOM = _standin("cupy.cuda.memory", "OutOfMemoryError", MemoryError)
CUPY = CupyOOM("Out of memory allocating 1,073,741,824 bytes (allocated so far: 0 bytes).")
# JAX: jaxlib.xla_extension.XlaRuntimeError, "RESOURCE_EXHAUSTED: Out of memory while trying
# to allocate 7406166528 bytes." (github.com/google-deepmind/alphafold/issues/1023)
XlaRuntimeError = _standin("jaxlib.xla_extension", "XlaRuntimeError", RuntimeError)
JAX = XlaRuntimeError(
    "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 bytes."
)
# RMM: rmm::out_of_memory (a std::bad_alloc, rapidsai/rmm#894) reaches Python as MemoryError
RMM = MemoryError(
    "std::bad_alloc: out_of_memory: CUDA error at: rmm/mr/device/cuda_memory_resource.hpp:60: "
    "cudaErrorMemoryAllocation out of memory"
)
# numba: CudaAPIError "[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY"
CudaAPIError = _standin("numba.cuda.cudadrv.driver", "CudaAPIError", Exception)
NUMBA = CudaAPIError("[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY")
# cuda-python's runtime: cudaError_t.cudaErrorMemoryAllocation
CUDART = RuntimeError("cudaMalloc failed: <cudaError_t.cudaErrorMemoryAllocation: 2>")
# TensorFlow: tf.errors.ResourceExhaustedError ("OOM when allocating tensor")
TfOOM = _standin(
    "tensorflow.python.framework.errors_impl", "ResourceExhaustedError", Exception
)
TF = TfOOM("OOM when allocating tensor with shape[4096] and type float")
"""
