"""`run --large`: ops with reported size limits, at sizes past 2^31 elements and 4 GB.

Kernels that index with 32 bits, or split work by a 4 GB buffer limit, fail only
past those sizes: matmul, bmm, cat, fill, index_select / index, sum and max.
Each record here builds its inputs directly on the device (never a copy of a
CPU tensor: the host may not hold it), with values chosen so the answer is
known exactly (integers small enough for float32, one marked maximum, constant
pieces), and checks the output against that answer in chunks: a wrong index
past 2^31 reads a value that differs. Where the host has the memory too, the
same case also runs on the CPU and the two must be equal.

Planning comes first: a case's memory (inputs, output, build temporaries, a
margin) against the target's free memory (cuda: torch.cuda.mem_get_info; mps:
torch.mps.recommended_max_memory less what the driver holds; cpu: the host's
available memory). A case that does not fit is refused up front with one line,
never started, so no run crashes or ends out of memory for want of it.

MPSPROBE_LARGE_ELEMENTS sets the size the cases are built at (default just past
2^31), to rehearse the rung at a small size.
"""
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field

import torch

SOURCE = "large"
PREFIX = "large."
MARGIN = 1.10            # allocator rounding and fragmentation
CHUNK = 1 << 26          # elements compared at a time


def elements():
    """How many elements a case's large tensor holds: just past 2^31 unless rehearsing."""
    return int(os.environ.get("MPSPROBE_LARGE_ELEMENTS", (1 << 31) + (1 << 20)))


def _pattern(n, period, device, dtype=torch.float32):
    """i % period + 1 for i < n, exact in float32, built without an n-long int64 temporary."""
    base = torch.arange(1, period + 1, device=device, dtype=dtype)
    return base.repeat(math.ceil(n / period))[:n]


def _equal_in_chunks(got, want_of):
    """Where `got` (flattened) differs from want_of(start, stop), or None: compared a chunk at
    a time so no comparison allocates as much as the tensor itself."""
    flat = got.reshape(-1)
    for start in range(0, flat.numel(), CHUNK):
        stop = min(start + CHUNK, flat.numel())
        want = torch.broadcast_to(want_of(start, stop), (stop - start,))
        wrong = (flat[start:stop] != want).nonzero()
        if wrong.numel():
            first = start + int(wrong[0, 0])
            return f"element {first} (flat) is {flat[first].item()!r}, expected {want[first - start].item()!r}"
    return None


@dataclass
class LargeCase:
    name: str               # op id, large.<op>
    op: str                 # the aten op it is about
    bytes_per_element: int  # of the large tensor
    tensors: float          # how many large-tensor sizes live at once (inputs, output, temporaries)
    build: object           # build(n, device) -> args
    call: object            # call(*args) -> output
    expected: object        # expected(n, args, start, stop) -> the flat output's values there
    dtypes: tuple = (torch.float32,)
    reaches: tuple = field(default=())

    def bytes_needed(self, n=None):
        return int((n or elements()) * self.bytes_per_element * self.tensors * MARGIN)

    # What the catalogue and the engine read of an op record.
    source: str = SOURCE
    large: bool = True
    variant_test_name: str = ""
    supports_out: bool = False
    inplace_variant: object = None
    supports_autograd: bool = False
    differentiable: bool = False

    @property
    def aten_name(self):
        return self.op

    def supported_dtypes(self, device_type):
        return set(self.dtypes)

    def supported_backward_dtypes(self, device_type):
        return set()


def _fill_build(n, device):
    return (torch.empty(n, device=device),)


def _cat_build(n, device):
    return (torch.full((n // 2,), 1.0, device=device), torch.full((n - n // 2,), 2.0, device=device))


def _cat_expected(n, args, start, stop):
    i = torch.arange(start, stop, device=args[0].device)
    return torch.where(i < n // 2, 1.0, 2.0)


def _indices(n, device):
    return torch.tensor(sorted({0, n // 2, min(n - 1, (1 << 31) - 1), min(n - 1, 1 << 31), n - 1}), device=device)


def _gathered(n, args, start, stop):
    return (args[1][start:stop] % 4093 + 1).to(torch.float32)


def _max_build(n, device):
    x = torch.zeros(n, device=device)
    x[n - 7] = 1.0    # the one maximum, past 2^31 at full size
    return (x,)


def _max_expected(n, args, start, stop):
    return torch.tensor([1.0, float(n - 7)], dtype=torch.float64, device=args[0].device)[start:stop]


def _matmul_shape(n):
    k = 16392 if n > 1 << 24 else 64
    return max(1, math.ceil(n / k)), k


def _matmul_build(n, device):
    m, k = _matmul_shape(n)
    rows = _pattern(m, 251, device)
    return (rows[:, None].expand(m, k).contiguous(), torch.ones(k, 8, device=device))


def _matmul_expected(n, args, start, stop):
    m, k = args[0].shape
    i = torch.arange(start, stop, device=args[0].device) // 8
    return ((i % 251 + 1) * k).to(torch.float32)


def _bmm_build(n, device):
    m, k = _matmul_shape(n)
    batches = 64 if m >= 64 else 1
    rows = _pattern(batches * (m // batches or 1), 251, device)
    a = rows.view(batches, -1, 1).expand(batches, rows.numel() // batches, k).contiguous()
    return (a, torch.ones(batches, k, 4, device=device))


def _bmm_expected(n, args, start, stop):
    k = args[0].shape[-1]
    i = torch.arange(start, stop, device=args[0].device) // 4
    return ((i % 251 + 1) * k).to(torch.float32)


def _marked(n, device):
    """Zeros with ones at the start, the middle and the end (past 2^31 at full size): a sum
    that skips or wraps any part of the tensor misses one, exactly."""
    x = torch.zeros(n, device=device)
    x[[0, n // 2, n - 1]] = 1.0
    return (x,)


def _max_call(x):
    value, index = x.max(0)
    return torch.stack([value.double(), index.double()])   # float64: the index exactly


CASES = [
    LargeCase(f"{PREFIX}fill", "fill_.Scalar", 4, 1, _fill_build, lambda x: x.fill_(2.5),
              lambda n, args, start, stop: torch.tensor(2.5, device=args[0].device)),
    LargeCase(f"{PREFIX}cat", "cat", 4, 2, _cat_build, lambda a, b: torch.cat([a, b]), _cat_expected),
    LargeCase(f"{PREFIX}index_select", "index_select", 4, 1.1,
              lambda n, device: (_pattern(n, 4093, device), _indices(n, device)),
              lambda x, idx: x.index_select(0, idx), _gathered),
    LargeCase(f"{PREFIX}index", "index.Tensor", 4, 1.1,
              lambda n, device: (_pattern(n, 4093, device), _indices(n, device)),
              lambda x, idx: x[idx], _gathered),
    LargeCase(f"{PREFIX}sum", "sum", 4, 1, _marked, lambda x: x.sum(),
              lambda n, args, start, stop: torch.tensor(3.0, device=args[0].device)),
    LargeCase(f"{PREFIX}max", "max.dim", 4, 1, _max_build, _max_call, _max_expected),
    LargeCase(f"{PREFIX}matmul", "mm", 4, 1.1, _matmul_build, torch.matmul, _matmul_expected),
    LargeCase(f"{PREFIX}bmm", "bmm", 4, 1.1, _bmm_build, torch.bmm, _bmm_expected),
]


def probes():
    return list(CASES)


# --- memory -----------------------------------------------------------------------

def host_free_bytes():
    """The host's available memory (MemAvailable where Linux says it, else free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def free_bytes(device):
    """What the target can still allocate, in bytes."""
    kind = torch.device(device).type
    if kind == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    if kind == "mps":
        return int(torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    return host_free_bytes()


def target_free_bytes(device, python=None):
    """free_bytes of the target `device` names ("auto" too), read in a process of its own
    (`python`: the sweep's interpreter), so the planning process holds no device memory."""
    code = ("from mpsprobe.engine.devices import resolve; from mpsprobe.ops.large import free_bytes; "
            f"print(free_bytes(resolve({device!r}).torch_device))")
    try:
        out = subprocess.run([python or sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        return int(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def by_name(name):
    return next((c for c in CASES if c.name == name), None)


def wanted(ops):
    """--ops for --large: each name as a large case's id (matmul -> large.matmul); none: all."""
    return [o if o.startswith(PREFIX) else PREFIX + o for o in ops] if ops else [PREFIX + "*"]


def refusal(case, device, free):
    """The one line refusing `case` where it does not fit in `free` bytes, else None."""
    need = case.bytes_needed()
    if need <= free:
        return None
    return (f"{case.name}: needs {need / 1e9:.1f} GB on {device}, which has {free / 1e9:.1f} GB free: "
            "not run")


# --- one case -----------------------------------------------------------------------

def run_case(case, target, compare_on_cpu=None):
    """A result dict for `case` on the target (a devices.Target): judged by the exact answer,
    and against the CPU where the host has the memory (`compare_on_cpu`: decide it here when None)."""
    from mpsprobe.engine import classify
    from mpsprobe.vocabulary import MISMATCH, PASS
    n = elements()
    device = target.torch_device
    try:
        with target.context():
            args = case.build(n, device)
            out = case.call(*args)
            target.synchronize()
    except Exception as e:
        status, kind, reason = classify.classify_error(e)[:3]
        return {"status": status, "reason_kind": kind, "reason": reason, "check_kind": "none",
                "error_type": type(e).__name__, "message": classify.first_line(e)}
    wrong = _equal_in_chunks(out, lambda start, stop: case.expected(n, args, start, stop))
    if wrong:
        return {"status": MISMATCH, "reason_kind": "values", "check_kind": "values",
                "reason": f"{case.name} at {n} elements: {wrong}"}
    notes = [f"exact answer at {n} elements ({n * case.bytes_per_element / 1e9:.2f} GB)"]
    if compare_on_cpu is None:
        compare_on_cpu = device.type != "cpu" and case.bytes_needed() * 2 <= host_free_bytes()
    if compare_on_cpu:
        del args
        cpu_out = case.call(*case.build(n, "cpu"))
        differs = _equal_in_chunks(out.cpu(), lambda start, stop: cpu_out.reshape(-1)[start:stop])
        if differs:
            return {"status": MISMATCH, "reason_kind": "values", "check_kind": "values",
                    "reason": f"{case.name}: differs from the CPU: {differs}"}
        notes.append("equal to the CPU's")
    return {"status": PASS, "reason_kind": None, "check_kind": "values",
            "reason": f"matches the exact answer at {n} elements", "notes": {"verdict": notes}}
