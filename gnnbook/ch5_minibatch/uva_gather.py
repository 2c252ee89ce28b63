"""A zero-copy row gather as a Triton kernel: the GPU reads rows of a pinned host table through UVA.

Book: 5.4 feature loading (zero-copy access from the device).

Used in: no notebook directly.

DGL's ``gather_pinned_tensor_rows`` does this when DGL is built with CUDA; the course's DGL
from PyPI is a CPU build, so :mod:`gnnbook.ch5_minibatch.feature_loading` falls back to this kernel on a
GPU.  Triton passes a pinned CPU tensor to a kernel as its device-mapped address (unified
virtual addressing), so every load below crosses PCIe.  Importing this module needs Triton
(it ships with the CUDA builds of torch); running the kernel needs a GPU, or Triton's
interpreter (``TRITON_INTERPRET=1`` before the import) on a CPU.

Example:
    >>> out = torch.empty(2, 3, device="cuda")                               # doctest: +SKIP
    >>> gather_rows[(2,)](table, ids, out, 3, BLOCK=16)                     # doctest: +SKIP
"""
import torch  # noqa: F401  (the kernel's arguments are torch tensors)
import triton
import triton.language as tl


@triton.jit
def gather_rows(src, ids, out, width, BLOCK: tl.constexpr):
    """``out[i] = src[ids[i]]``, one program per gathered row, ``BLOCK`` items at a time."""
    row = tl.program_id(0)
    source = tl.load(ids + row).to(tl.int64)   # 64-bit offsets: big tables pass 2**31 items
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < width
        values = tl.load(src + source * width + cols, mask=mask)
        tl.store(out + row.to(tl.int64) * width + cols, values, mask=mask)
