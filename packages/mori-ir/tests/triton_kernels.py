# SPDX-License-Identifier: MIT
"""The @triton.jit kernels of mori-ir's tests and examples: mori-shmem's device API from Triton.

Between them the kernels call every function of mori.ir.functions.DEVICE_FUNCTIONS at least once
(test_triton_compile.py checks that from the compiled IR), arranged so that each result can be
checked on the host against a reference computed independently (triton_programs.py does that on
a GPU; without one, test_triton_compile.py compiles them all to cubins).

How a Triton kernel uses the device API (see mori.ir.triton's docstring):

* A scalar statement runs on every thread of the program. ``*_block`` functions are collectives
  of the whole program and are called that way; ``*_warp`` functions are called by the first warp
  only (``thread_id() < 32``) and ``*_thread`` ones by thread 0 only (``thread_id() == 0``), so
  that each operation (a SIGNAL_ADD, an atomic, a device barrier) happens exactly once.
* Waits may be called by every thread: each thread then acquires the signal itself before it
  reads the data, so no block barrier is needed after the wait.
* Data that peers wrote is read with volatile loads: the acquire of the wait orders them, and
  volatile keeps the compiler from using the non-coherent read-only path for it.
* Runtime scalars are listed in ``do_not_specialize`` so that one compiled kernel serves every
  case (Triton would otherwise specialise on values equal to 1 and on divisibility by 16).
"""

import triton
import triton.language as tl

import mori.ir.triton as mori_ir

# mori.shmem.AmoType and CmpOp codes, as constexpr so that kernels can read them as globals.
AMO_SET = tl.constexpr(3)
AMO_ADD = tl.constexpr(4)
AMO_OR = tl.constexpr(6)
AMO_XOR = tl.constexpr(7)
AMO_FETCH_ADD = tl.constexpr(14)
AMO_SWAP = tl.constexpr(18)
AMO_COMPARE_SWAP = tl.constexpr(19)
CMP_EQ = tl.constexpr(0)
CMP_NE = tl.constexpr(1)
CMP_GT = tl.constexpr(2)
CMP_LE = tl.constexpr(3)
CMP_LT = tl.constexpr(4)
CMP_GE = tl.constexpr(5)
SIGNAL_SET = mori_ir.SIGNAL_SET
SIGNAL_ADD = mori_ir.SIGNAL_ADD

#: Slots of the kernels that write one value per 8-byte word.
IMM_SLOTS = 8
AMO_SLOTS = 14
WAIT_SLOTS = 16


thread_id = mori_ir.thread_id


@triton.jit
def copy_bytes(dst, src, nbytes, BLOCK: tl.constexpr):
    """dst[:nbytes] = src[:nbytes] by the whole program; src is read with volatile loads."""
    for start in range(0, nbytes, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < nbytes
        tl.store(dst + offs, tl.load(src + offs, mask=mask, volatile=True), mask=mask)


# ----------------------------------------------------------------------------- (a) put + signal + wait


@triton.jit(do_not_specialize=["nbytes", "sig_val", "sig_op", "expect", "scope", "wait_gt"])
def put_signal_wait_kernel(
    recv, send, nbytes, sig, sig_val, sig_op, expect, scope, wait_gt, out, seen, BLOCK: tl.constexpr
):
    """Puts send[:nbytes] into the next PE's recv with a signal, then receives the previous PE's.

    scope 0/1/2 = putmem_nbi_signal_thread/warp/block (thread 0 / warp 0 / every thread), with
    sig_op SIGNAL_SET or SIGNAL_ADD of sig_val on the next PE's sig word. Then every thread waits
    until its own sig word is expect (wait_gt 0: uint64_wait_until_equals(expect); 1:
    uint64_wait_until_greater_than(expect - 1)), and the program copies recv[:nbytes] to out and
    stores the value the wait returned to seen[0].
    """
    me = mori_ir.my_pe()
    nxt = (me + 1) % mori_ir.n_pes()
    tid = thread_id()
    if scope == 0:
        if tid == 0:
            mori_ir.putmem_nbi_signal_thread(recv, send, nbytes, sig, sig_val, sig_op, nxt, 0)
    elif scope == 1:
        if tid < 32:
            mori_ir.putmem_nbi_signal_warp(recv, send, nbytes, sig, sig_val, sig_op, nxt, 0)
    else:
        mori_ir.putmem_nbi_signal_block(recv, send, nbytes, sig, sig_val, sig_op, nxt, 0)
    if wait_gt != 0:
        got = mori_ir.uint64_wait_until_greater_than(sig, expect - 1)
    else:
        got = mori_ir.uint64_wait_until_equals(sig, expect)
    copy_bytes(out, recv, nbytes, BLOCK)
    tl.store(seen, got)


# ----------------------------------------------------------------------------- (b) all-gather


@triton.jit(do_not_specialize=["shard_bytes", "epoch"])
def allgather_kernel(data, shard, shard_bytes, sig, epoch, out, BLOCK: tl.constexpr):
    """All-gather of shard_bytes per PE; launch with grid (n_pes,).

    Program p puts this PE's shard into PE p's data[me * shard_bytes:] with a block-scope put and
    SIGNAL_SET of epoch on PE p's sig[me]; then it waits until its own sig[p] == epoch (PE p's
    shard has landed here) and copies that shard from data to out. data and sig are symmetric;
    shard and out are local. Every round uses a new epoch, so the signals need no reset.
    """
    peer = tl.program_id(0)
    me = mori_ir.my_pe()
    mori_ir.putmem_nbi_signal_block(data + me * shard_bytes, shard, shard_bytes, sig + me, epoch, SIGNAL_SET, peer, 0)
    mori_ir.uint64_wait_until_equals(sig + peer, epoch)
    base = peer * shard_bytes
    copy_bytes(out + base, data + base, shard_bytes, BLOCK)


# ----------------------------------------------------------------------------- (c) every function


@triton.jit
def query_kernel(sym, out):
    """out[0] = my_pe(), out[1] = n_pes(); for pe in 0..n_pes (one past the last PE included):
    out[2 + 2 * pe] = ptr_p2p(sym, me, pe), out[3 + 2 * pe] = ptr(sym, pe)."""
    me = mori_ir.my_pe()
    npes = mori_ir.n_pes()
    tl.store(out, me)
    tl.store(out + 1, npes)
    for pe in range(0, npes + 1):
        tl.store(out + 2 + 2 * pe, mori_ir.ptr_p2p(sym, me, pe))
        tl.store(out + 3 + 2 * pe, mori_ir.ptr(sym.to(tl.uint64, bitcast=True), pe))


@triton.jit(do_not_specialize=["nbytes", "round_no", "mode"])
def fence_kernel(data, flag, src, nbytes, round_no, mode, out, ret, BLOCK: tl.constexpr):
    """Message passing ordered by a quiet or a fence.

    Thread 0 puts src[:nbytes] into the next PE's data (putmem_nbi_thread), then orders it with
    mode 0 quiet_thread(), 1 quiet_thread_pe(nxt), 2 quiet_thread_pe_qp(nxt, 0), 3 fence_thread(),
    4 fence_thread_pe(nxt) or 5 fence_thread_pe_qp(nxt, 0) (its result to ret[0]), then sets the
    next PE's flag to round_no (uint64_p). Every thread waits for its own flag == round_no and
    the program copies data[:nbytes] (the previous PE's src) to out.
    """
    me = mori_ir.my_pe()
    nxt = (me + 1) % mori_ir.n_pes()
    tid = thread_id()
    if tid == 0:
        mori_ir.putmem_nbi_thread(data, src, nbytes, nxt, 0)
        if mode == 0:
            r = mori_ir.quiet_thread()
        elif mode == 1:
            r = mori_ir.quiet_thread_pe(nxt)
        elif mode == 2:
            r = mori_ir.quiet_thread_pe_qp(nxt, 0)
        elif mode == 3:
            r = mori_ir.fence_thread()
        elif mode == 4:
            r = mori_ir.fence_thread_pe(nxt)
        else:
            r = mori_ir.fence_thread_pe_qp(nxt, 0)
        mori_ir.uint64_p(flag, round_no, nxt, 0)
        tl.store(ret, r)
    mori_ir.uint64_wait_until_equals(flag, round_no)
    copy_bytes(out, data, nbytes, BLOCK)


@triton.jit(do_not_specialize=["value", "block_scope"])
def barrier_kernel(sym, value, block_scope, out):
    """Thread 0 puts value into the next PE's sym[0] (int64_p); the PEs meet at the device barrier
    (block_scope 1: barrier_all_block by every thread; 0: barrier_all_thread by thread 0), which
    makes the put visible; then out[0] = this PE's sym[0] (the previous PE's value), out[1] = the
    barrier's result. Launch with grid (1,): one device barrier in flight per PE."""
    me = mori_ir.my_pe()
    nxt = (me + 1) % mori_ir.n_pes()
    tid = thread_id()
    if block_scope != 0:
        if tid == 0:
            mori_ir.int64_p(sym, value, nxt, 0)
        r = mori_ir.barrier_all_block()
        tl.store(out, tl.load(sym, volatile=True))
        tl.store(out + 1, r)
    else:
        if tid == 0:
            mori_ir.int64_p(sym, value, nxt, 0)
            r = mori_ir.barrier_all_thread()
            tl.store(out, tl.load(sym, volatile=True))
            tl.store(out + 1, r)


# Put / get: verb 0 put nbi, 1 get nbi, 2 get (blocking), 3 put (blocking, bytes only); ty 0
# bytes (n = nbytes), 1 uint32, 2 uint64, 3 float, 4 double (n = elements).


@triton.jit
def _rma_thread(dst, src, n, pe, verb, ty):
    if verb == 0:
        if ty == 0:
            mori_ir.putmem_nbi_thread(dst, src, n, pe, 0)
        elif ty == 1:
            mori_ir.put_uint32_nbi_thread(dst, src, n, pe, 0)
        elif ty == 2:
            mori_ir.put_uint64_nbi_thread(dst, src, n, pe, 0)
        elif ty == 3:
            mori_ir.put_float_nbi_thread(dst, src, n, pe, 0)
        else:
            mori_ir.put_double_nbi_thread(dst, src, n, pe, 0)
    elif verb == 1:
        if ty == 0:
            mori_ir.getmem_nbi_thread(dst, src, n, pe, 0)
        elif ty == 1:
            mori_ir.get_uint32_nbi_thread(dst, src, n, pe, 0)
        elif ty == 2:
            mori_ir.get_uint64_nbi_thread(dst, src, n, pe, 0)
        elif ty == 3:
            mori_ir.get_float_nbi_thread(dst, src, n, pe, 0)
        else:
            mori_ir.get_double_nbi_thread(dst, src, n, pe, 0)
    elif verb == 2:
        if ty == 0:
            mori_ir.getmem_thread(dst, src, n, pe, 0)
        elif ty == 1:
            mori_ir.get_uint32_thread(dst, src, n, pe, 0)
        elif ty == 2:
            mori_ir.get_uint64_thread(dst, src, n, pe, 0)
        elif ty == 3:
            mori_ir.get_float_thread(dst, src, n, pe, 0)
        else:
            mori_ir.get_double_thread(dst, src, n, pe, 0)
    else:
        mori_ir.putmem_thread(dst, src, n, pe, 0)


@triton.jit
def _rma_warp(dst, src, n, pe, verb, ty):
    if verb == 0:
        if ty == 0:
            mori_ir.putmem_nbi_warp(dst, src, n, pe, 0)
        elif ty == 1:
            mori_ir.put_uint32_nbi_warp(dst, src, n, pe, 0)
        elif ty == 2:
            mori_ir.put_uint64_nbi_warp(dst, src, n, pe, 0)
        elif ty == 3:
            mori_ir.put_float_nbi_warp(dst, src, n, pe, 0)
        else:
            mori_ir.put_double_nbi_warp(dst, src, n, pe, 0)
    elif verb == 1:
        if ty == 0:
            mori_ir.getmem_nbi_warp(dst, src, n, pe, 0)
        elif ty == 1:
            mori_ir.get_uint32_nbi_warp(dst, src, n, pe, 0)
        elif ty == 2:
            mori_ir.get_uint64_nbi_warp(dst, src, n, pe, 0)
        elif ty == 3:
            mori_ir.get_float_nbi_warp(dst, src, n, pe, 0)
        else:
            mori_ir.get_double_nbi_warp(dst, src, n, pe, 0)
    elif verb == 2:
        if ty == 0:
            mori_ir.getmem_warp(dst, src, n, pe, 0)
        elif ty == 1:
            mori_ir.get_uint32_warp(dst, src, n, pe, 0)
        elif ty == 2:
            mori_ir.get_uint64_warp(dst, src, n, pe, 0)
        elif ty == 3:
            mori_ir.get_float_warp(dst, src, n, pe, 0)
        else:
            mori_ir.get_double_warp(dst, src, n, pe, 0)
    else:
        mori_ir.putmem_warp(dst, src, n, pe, 0)


@triton.jit
def _rma_block(dst, src, n, pe, verb, ty):
    if verb == 0:
        if ty == 0:
            mori_ir.putmem_nbi_block(dst, src, n, pe, 0)
        elif ty == 1:
            mori_ir.put_uint32_nbi_block(dst, src, n, pe, 0)
        elif ty == 2:
            mori_ir.put_uint64_nbi_block(dst, src, n, pe, 0)
        elif ty == 3:
            mori_ir.put_float_nbi_block(dst, src, n, pe, 0)
        else:
            mori_ir.put_double_nbi_block(dst, src, n, pe, 0)
    elif verb == 1:
        if ty == 0:
            mori_ir.getmem_nbi_block(dst, src, n, pe, 0)
        elif ty == 1:
            mori_ir.get_uint32_nbi_block(dst, src, n, pe, 0)
        elif ty == 2:
            mori_ir.get_uint64_nbi_block(dst, src, n, pe, 0)
        elif ty == 3:
            mori_ir.get_float_nbi_block(dst, src, n, pe, 0)
        else:
            mori_ir.get_double_nbi_block(dst, src, n, pe, 0)
    elif verb == 2:
        if ty == 0:
            mori_ir.getmem_block(dst, src, n, pe, 0)
        elif ty == 1:
            mori_ir.get_uint32_block(dst, src, n, pe, 0)
        elif ty == 2:
            mori_ir.get_uint64_block(dst, src, n, pe, 0)
        elif ty == 3:
            mori_ir.get_float_block(dst, src, n, pe, 0)
        else:
            mori_ir.get_double_block(dst, src, n, pe, 0)
    else:
        mori_ir.putmem_block(dst, src, n, pe, 0)


@triton.jit(do_not_specialize=["n", "pe", "verb", "scope", "ty"])
def rma_kernel(dst, src, n, pe, verb, scope, ty):
    """One put or get of the 48 put/get functions: verb (0 put nbi, 1 get nbi, 2 get, 3 put),
    scope (0 thread: thread 0; 1 warp: warp 0; 2 block: every thread), ty (0 bytes, 1 uint32,
    2 uint64, 3 float, 4 double; n counts bytes or elements). Puts: dst symmetric, src local;
    gets: dst local, src symmetric. Ends with quiet_thread() on every thread (completes the nbi
    forms)."""
    tid = thread_id()
    if scope == 0:
        if tid == 0:
            _rma_thread(dst, src, n, pe, verb, ty)
    elif scope == 1:
        if tid < 32:
            _rma_warp(dst, src, n, pe, verb, ty)
    else:
        _rma_block(dst, src, n, pe, verb, ty)
    mori_ir.quiet_thread()


@triton.jit(do_not_specialize=["pe"])
def imm_kernel(dst, val_ptr, ints, floats, doubles, pe, ret):
    """Thread 0 writes one immediate of each kind into PE pe's dst (8-byte slots):
    0 put_size_imm_nbi_thread(8 bytes at val_ptr), 1 int32_p(ints[0]), 2 int64_p(ints[1]),
    3 uint32_p(ints[2]), 4 uint64_p(0xFEDCBA9876543210, a Python int above the int64 range),
    5 int_p(-123456789), 6 float_p(floats[0]), 7 double_p(doubles[0]); then quiet_thread().
    ret[0] = the sum of their results."""
    tid = thread_id()
    if tid == 0:
        r = mori_ir.put_size_imm_nbi_thread(dst, val_ptr, 8, pe, 0)
        r += mori_ir.int32_p(dst + 8, tl.load(ints), pe, 0)
        r += mori_ir.int64_p(dst + 16, tl.load(ints + 1), pe, 0)
        r += mori_ir.uint32_p(dst + 24, tl.load(ints + 2), pe, 0)
        r += mori_ir.uint64_p(dst + 32, 0xFEDCBA9876543210, pe, 0)
        r += mori_ir.int_p(dst + 40, -123456789, pe, 0)
        r += mori_ir.float_p(dst + 48, tl.load(floats), pe, 0)
        r += mori_ir.double_p(dst + 56, tl.load(doubles), pe, 0)
        r += mori_ir.quiet_thread()
        tl.store(ret, r)


@triton.jit(do_not_specialize=["pe"])
def amo_kernel(dst, operands, vals, pe, out):
    """Thread 0 applies one remote atomic per 8-byte word of PE pe's dst (int64 words; the 32-bit
    forms act on the low half) and stores the fetched values to out:

    0 atomic_size_nonfetch_thread(8 bytes at operands[0], ADD)  1 (4 bytes at operands[1], XOR)
    2 atomic_uint32_nonfetch_thread(vals[2], OR)  3 atomic_uint64_nonfetch_thread(vals[3], SET)
    4 atomic_int64_nonfetch_thread(vals[4], ADD)
    5 out[0] = atomic_uint32_fetch_thread(vals[5], compare vals[14], COMPARE_SWAP)
    6 out[1] = atomic_uint64_fetch_thread(vals[6], FETCH_ADD)  7 out[2] = atomic_int64_fetch_thread(vals[7], SWAP)
    8..10 {uint32,uint64,int64}_atomic_add_thread(vals[8..10])
    11..13 out[3..5] = {uint32,uint64,int64}_atomic_fetch_add_thread(vals[11..13])
    out[6] = the sum of the non-fetching calls' results (0).
    """
    tid = thread_id()
    if tid == 0:
        r = mori_ir.atomic_size_nonfetch_thread(dst, operands, 8, AMO_ADD, pe, 0)
        r += mori_ir.atomic_size_nonfetch_thread(dst + 1, operands + 1, 4, AMO_XOR, pe, 0)
        r += mori_ir.atomic_uint32_nonfetch_thread(dst + 2, tl.load(vals + 2), AMO_OR, pe, 0)
        r += mori_ir.atomic_uint64_nonfetch_thread(dst + 3, tl.load(vals + 3), AMO_SET, pe, 0)
        r += mori_ir.atomic_int64_nonfetch_thread(dst + 4, tl.load(vals + 4), AMO_ADD, pe, 0)
        old5 = mori_ir.atomic_uint32_fetch_thread(
            dst + 5, tl.load(vals + 5), tl.load(vals + 14), AMO_COMPARE_SWAP, pe, 0
        )
        old6 = mori_ir.atomic_uint64_fetch_thread(dst + 6, tl.load(vals + 6), 0, AMO_FETCH_ADD, pe, 0)
        old7 = mori_ir.atomic_int64_fetch_thread(dst + 7, tl.load(vals + 7), 0, AMO_SWAP, pe, 0)
        r += mori_ir.uint32_atomic_add_thread(dst + 8, tl.load(vals + 8), pe, 0)
        r += mori_ir.uint64_atomic_add_thread(dst + 9, tl.load(vals + 9), pe, 0)
        r += mori_ir.int64_atomic_add_thread(dst + 10, tl.load(vals + 10), pe, 0)
        old11 = mori_ir.uint32_atomic_fetch_add_thread(dst + 11, tl.load(vals + 11), pe, 0)
        old12 = mori_ir.uint64_atomic_fetch_add_thread(dst + 12, tl.load(vals + 12), pe, 0)
        old13 = mori_ir.int64_atomic_fetch_add_thread(dst + 13, tl.load(vals + 13), pe, 0)
        r += mori_ir.quiet_thread()
        tl.store(out, old5)
        tl.store(out + 1, old6)
        tl.store(out + 2, old7)
        tl.store(out + 3, old11)
        tl.store(out + 4, old12)
        tl.store(out + 5, old13)
        tl.store(out + 6, r)


@triton.jit
def wait_kernel(words, put_vals, wait_vals, out):
    """Waits and tests on this PE's words (int64 slots; 32-bit forms use the low half).

    Thread 0 first writes put_vals[k] into the next PE's word k, k = 0..11, with the immediate put
    of the slot's type (uint32_p for 0-2, uint64_p 3-5, int32_p 6-8, int64_p 9-11). Then every
    thread waits on its own words for the previous PE's values, and out[k] = what the wait
    returned: {uint32,uint64,int32,int64}: _wait_until_greater_than(wait_vals[k]) for k = 0, 3, 6,
    9; _wait_until_equals(wait_vals[k]) for 1, 4, 7, 10; and _wait_until with CMP_GE (2), CMP_NE
    (5), CMP_LT (8), CMP_LE (11). Words 12..15 are set by the host and only tested:
    out[12..15] = uint32_test(EQ), uint64_test(GT), int32_test(LT), int64_test(NE) against
    wait_vals[12..15]. out[16] = the sum of the puts' results.
    """
    nxt = (mori_ir.my_pe() + 1) % mori_ir.n_pes()
    tid = thread_id()
    if tid == 0:
        r = mori_ir.uint32_p(words, tl.load(put_vals), nxt, 0)
        r += mori_ir.uint32_p(words + 1, tl.load(put_vals + 1), nxt, 0)
        r += mori_ir.uint32_p(words + 2, tl.load(put_vals + 2), nxt, 0)
        r += mori_ir.uint64_p(words + 3, tl.load(put_vals + 3), nxt, 0)
        r += mori_ir.uint64_p(words + 4, tl.load(put_vals + 4), nxt, 0)
        r += mori_ir.uint64_p(words + 5, tl.load(put_vals + 5), nxt, 0)
        r += mori_ir.int32_p(words + 6, tl.load(put_vals + 6), nxt, 0)
        r += mori_ir.int32_p(words + 7, tl.load(put_vals + 7), nxt, 0)
        r += mori_ir.int32_p(words + 8, tl.load(put_vals + 8), nxt, 0)
        r += mori_ir.int64_p(words + 9, tl.load(put_vals + 9), nxt, 0)
        r += mori_ir.int64_p(words + 10, tl.load(put_vals + 10), nxt, 0)
        r += mori_ir.int64_p(words + 11, tl.load(put_vals + 11), nxt, 0)
        tl.store(out + 16, r)
    tl.store(out, mori_ir.uint32_wait_until_greater_than(words, tl.load(wait_vals)))
    tl.store(out + 1, mori_ir.uint32_wait_until_equals(words + 1, tl.load(wait_vals + 1)))
    tl.store(out + 2, mori_ir.uint32_wait_until(words + 2, CMP_GE, tl.load(wait_vals + 2)))
    tl.store(out + 3, mori_ir.uint64_wait_until_greater_than(words + 3, tl.load(wait_vals + 3)))
    tl.store(out + 4, mori_ir.uint64_wait_until_equals(words + 4, tl.load(wait_vals + 4)))
    tl.store(out + 5, mori_ir.uint64_wait_until(words + 5, CMP_NE, tl.load(wait_vals + 5)))
    tl.store(out + 6, mori_ir.int32_wait_until_greater_than(words + 6, tl.load(wait_vals + 6)))
    tl.store(out + 7, mori_ir.int32_wait_until_equals(words + 7, tl.load(wait_vals + 7)))
    tl.store(out + 8, mori_ir.int32_wait_until(words + 8, CMP_LT, tl.load(wait_vals + 8)))
    tl.store(out + 9, mori_ir.int64_wait_until_greater_than(words + 9, tl.load(wait_vals + 9)))
    tl.store(out + 10, mori_ir.int64_wait_until_equals(words + 10, tl.load(wait_vals + 10)))
    tl.store(out + 11, mori_ir.int64_wait_until(words + 11, CMP_LE, tl.load(wait_vals + 11)))
    tl.store(out + 12, mori_ir.uint32_test(words + 12, CMP_EQ, tl.load(wait_vals + 12)))
    tl.store(out + 13, mori_ir.uint64_test(words + 13, CMP_GT, tl.load(wait_vals + 13)))
    tl.store(out + 14, mori_ir.int32_test(words + 14, CMP_LT, tl.load(wait_vals + 14)))
    tl.store(out + 15, mori_ir.int64_test(words + 15, CMP_NE, tl.load(wait_vals + 15)))


# ----------------------------------------------------------------------------- compile specs

#: (kernel, signature, constexprs) for triton.compile(ASTSource(...)): every kernel above, with the
#: pointer types the PE programs pass (u8 buffers, i64 words, fp32/fp64 values).
COMPILE_SPECS = [
    (
        put_signal_wait_kernel,
        {"recv": "*u8", "send": "*u8", "nbytes": "i64", "sig": "*i64", "sig_val": "i64", "sig_op": "i32",
         "expect": "i64", "scope": "i32", "wait_gt": "i32", "out": "*u8", "seen": "*i64", "BLOCK": "constexpr"},
        {"BLOCK": 1024},
    ),
    (
        allgather_kernel,
        {"data": "*u8", "shard": "*u8", "shard_bytes": "i64", "sig": "*i64", "epoch": "i64", "out": "*u8",
         "BLOCK": "constexpr"},
        {"BLOCK": 1024},
    ),
    (query_kernel, {"sym": "*u8", "out": "*i64"}, {}),
    (
        fence_kernel,
        {"data": "*u8", "flag": "*i64", "src": "*u8", "nbytes": "i64", "round_no": "i64", "mode": "i32",
         "out": "*u8", "ret": "*i32", "BLOCK": "constexpr"},
        {"BLOCK": 1024},
    ),
    (barrier_kernel, {"sym": "*i64", "value": "i64", "block_scope": "i32", "out": "*i64"}, {}),
    (rma_kernel, {"dst": "*u8", "src": "*u8", "n": "i64", "pe": "i32", "verb": "i32", "scope": "i32", "ty": "i32"}, {}),
    (
        imm_kernel,
        {"dst": "*u8", "val_ptr": "*i64", "ints": "*i64", "floats": "*fp32", "doubles": "*fp64", "pe": "i32",
         "ret": "*i32"},
        {},
    ),
    (amo_kernel, {"dst": "*i64", "operands": "*i64", "vals": "*i64", "pe": "i32", "out": "*i64"}, {}),
    (wait_kernel, {"words": "*i64", "put_vals": "*i64", "wait_vals": "*i64", "out": "*i64"}, {}),
]  # fmt: skip
