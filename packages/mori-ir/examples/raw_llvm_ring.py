# SPDX-License-Identifier: MIT
"""mori-ir without any framework: a kernel written in LLVM IR, linked with the device bitcode.

What an MLIR- or LLVM-based compiler does with mori-ir, spelled out by hand:
  1. write (or generate) the kernel in LLVM IR, declaring the mori_shmem_* functions it calls
     (mori.ir.llvm_declarations() prints all of them);
  2. link libmori_shmem_device.bc (mori.ir.find_bitcode()) into it, internalise the library
     functions and optimise, here with llvmlite (pip install llvmlite);
  3. generate PTX for the GPU, load it (mori.shmem.jit.load_image), call
     mori.shmem.shmem_module_init(module) so the library's state global points at the heap, launch.

The kernel: each PE puts a block of bytes into the next PE's buffer with a put-with-signal and
waits for the signal its previous PE sets. Run it on a GPU machine with several PEs (one GPU is
enough under CUDA MPS):

    python raw_llvm_ring.py --pes 4 --bytes 65536

Without a GPU it stops after step 2 and prints the PTX's entry and globals.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import sys

import numpy as np

KERNEL = "ring_put"
SIGNAL_SET = 9  # mori.ir.SIGNAL_SET

_CALLED = ("my_pe", "n_pes", "putmem_nbi_signal_block", "uint64_wait_until_equals")

_KERNEL_BODY = """
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

; ring_put(dest, src, nbytes, signal): every thread of the block takes part in the block-scope put;
; thread 0 then waits until the previous PE's put has landed here.
define ptx_kernel void @ring_put(i64 %dest, i64 %src, i64 %nbytes, i64 %signal) {
entry:
  %me = call i32 @mori_shmem_my_pe()
  %npes = call i32 @mori_shmem_n_pes()
  %me_plus_one = add i32 %me, 1
  %next = srem i32 %me_plus_one, %npes
  %unused = call i32 @mori_shmem_putmem_nbi_signal_block(i64 %dest, i64 %src, i64 %nbytes, i64 %signal,
                                                         i64 1, i32 SIGNAL_SET, i32 %next, i32 0)
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %wait, label %done
wait:
  %seen = call i64 @mori_shmem_uint64_wait_until_equals(i64 %signal, i64 1)
  br label %done
done:
  ret void
}
"""


def kernel_ir() -> str:
    """The kernel module's LLVM IR, with declarations taken from mori-ir's ABI table."""
    from mori.ir import DEVICE_FUNCTIONS
    from mori.ir.functions import LLVM_TYPES

    lines = ['target triple = "nvptx64-nvidia-cuda"']
    for name in _CALLED:
        f = DEVICE_FUNCTIONS[name]
        lines.append(f"declare {LLVM_TYPES[f.ret]} @{f.symbol}({', '.join(LLVM_TYPES[t] for _, t in f.args)})")
    return "\n".join(lines) + _KERNEL_BODY.replace("SIGNAL_SET", str(SIGNAL_SET))


def link_to_ptx(ir_text: str, arch: str = "sm_90", kernels: tuple[str, ...] = (KERNEL,)) -> str:
    """Links the device bitcode into ``ir_text``, optimises, and returns PTX for ``arch``."""
    import llvmlite.binding as llvm

    from mori.ir import find_bitcode

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    module = llvm.parse_assembly(ir_text)
    with open(find_bitcode(), "rb") as handle:
        module.link_in(llvm.parse_bitcode(handle.read()))
    # Library functions become internal, so the optimiser inlines what the kernel calls and drops
    # the rest; the state global stays external for shmem_module_init to find.
    for function in module.functions:
        if not function.is_declaration and function.name not in kernels:
            function.linkage = llvm.Linkage.internal
    machine = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(cpu=arch, opt=3)
    module.data_layout = str(machine.target_data)
    module.verify()
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)
    return str(machine.emit_assembly(module))


def pattern(seed: int, nbytes: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def pe_program(rank: int, nranks: int, uid: bytes, nbytes: int, ptx: str) -> int:
    """One PE: load the PTX, run the ring once, check the bytes from the previous PE."""
    import mori.shmem as shmem
    from mori.shmem import jit
    from mori.shmem.jit import driver

    with shmem.session(rank, nranks, uid):
        module = jit.load_image(ptx.encode(), name="raw_llvm_ring")
        if shmem.shmem_module_init(module) != 0:
            raise RuntimeError("the linked module has no mori_shmem_device_state global")
        src = shmem.shmem_zeros(nbytes, np.uint8)
        dest = shmem.shmem_zeros(nbytes, np.uint8)
        signal = shmem.shmem_zeros(1, np.uint64)
        shmem.shmem_put(src, pattern(rank, nbytes), pe=rank)
        shmem.shmem_quiet()
        shmem.shmem_barrier_all()
        u64 = ctypes.c_uint64
        module.function(KERNEL).launch(
            1, 256, [u64(dest.symmetric_ptr), u64(src.symmetric_ptr), u64(nbytes), u64(signal.symmetric_ptr)]
        )
        driver.context_synchronize()
        shmem.shmem_check_device_error()
        got = np.empty(nbytes, np.uint8)
        shmem.shmem_get(got, dest, pe=rank)
        shmem.shmem_quiet()
        want = pattern((rank - 1) % nranks, nbytes)
        if not np.array_equal(got, want):
            bad = int(np.flatnonzero(got != want)[0])
            raise AssertionError(f"PE {rank}: byte {bad} is {got[bad]}, the previous PE sent {want[bad]}")
        shmem.shmem_barrier_all()
    return nbytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pes", type=int, default=2)
    parser.add_argument("--bytes", type=int, default=1 << 16)
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    log = logging.getLogger("raw_llvm_ring")

    ptx = link_to_ptx(kernel_ir(), args.arch)
    summary = [line for line in ptx.splitlines() if line.startswith((".version", ".target", ".visible"))]
    log.info("linked PTX (%d bytes):\n  %s", len(ptx), "\n  ".join(summary))

    from mori.shmem import jit
    from mori.shmem.testing import run_pes

    if not jit.is_available():
        log.info("no GPU here: stopping before the launch")
        return 0
    run_pes(pe_program, args.pes, args.bytes, ptx, env={"MORI_SHMEM_BACKEND": "cuda"}, timeout=120)
    log.info("%d PEs: every PE received the previous PE's %d bytes", args.pes, args.bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
