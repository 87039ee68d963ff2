# SPDX-License-Identifier: MIT
"""ctypes mirrors of the C layouts kernels and the cpu backend read (dev_comm.h and
collective_args.h); ``mori.cco._C.constants()`` gives the C sizes, checked at import."""

from __future__ import annotations

import ctypes

DEV_COMM_MAGIC = 0x0CC0AAAA
DEV_COMM_VERSION = 2

GDA_CONNECTION_NONE = 0
GDA_CONNECTION_FULL = 1
GDA_CONNECTION_CROSSNODE = 2
GDA_CONNECTION_RAIL = 3

ERR_NONE = 0
ERR_BARRIER_TIMEOUT = 1
ERR_SIGNAL_TIMEOUT = 2
ERR_BAD_PEER = 3
ERR_GDA = 4
ERR_BAD_ARGUMENT = 5
ERROR_NAMES = {
    ERR_BARRIER_TIMEOUT: "an LSA barrier wait expired",
    ERR_SIGNAL_TIMEOUT: "a signal wait expired",
    ERR_BAD_PEER: "a device call named a rank outside its team",
    ERR_GDA: "a GDA request to another node failed (the log names the peer)",
    ERR_BAD_ARGUMENT: "a device call got an argument outside its contract (e.g. gda_put_value bytes)",
}

#: MORI_CCO_DTYPE_* by torch dtype name.
DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2, "int32": 3, "int64": 4, "uint8": 5}
OP_CODES = {"sum": 0, "max": 1, "min": 2}
ALL_REDUCE_ONE_SHOT = 0
ALL_REDUCE_TWO_SHOT = 1
ALL_GATHER = 2
ALL_TO_ALL = 3
WIRE_NATIVE = 0
WIRE_FP8 = 1
FP8_BLOCK = 128
FP8_MAX = 448.0


class Window(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_uint64), ("size", ctypes.c_uint64)]


class DevComm(ctypes.Structure):
    """mori_cco_dev_comm_t: pass it by value to a kernel."""

    _fields_ = [
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("rank", ctypes.c_int32),
        ("world_size", ctypes.c_int32),
        ("lsa_rank", ctypes.c_int32),
        ("lsa_size", ctypes.c_int32),
        ("node", ctypes.c_int32),
        ("num_nodes", ctypes.c_int32),
        ("node_start", ctypes.c_int32),
        ("gda_connection_type", ctypes.c_int32),
        ("flat_base", ctypes.c_uint64),
        ("per_rank_size", ctypes.c_uint64),
        ("resource", Window),
        ("lsa_barrier_count", ctypes.c_uint32),
        ("signal_count", ctypes.c_uint32),
        ("counter_count", ctypes.c_uint32),
        ("ce_queue_count", ctypes.c_uint32),
        ("barrier_epoch_offset", ctypes.c_uint64),
        ("barrier_inbox_offset", ctypes.c_uint64),
        ("signal_offset", ctypes.c_uint64),
        ("counter_offset", ctypes.c_uint64),
        ("ce_signal_offset", ctypes.c_uint64),
        ("error_offset", ctypes.c_uint64),
        ("spin_timeout_ns", ctypes.c_uint64),
        ("gda_ring", ctypes.c_uint64),
        ("gda_words_offset", ctypes.c_uint64),
    ]


class CollectiveArgs(ctypes.Structure):
    """mori_cco_collective_args_t."""

    _fields_ = [
        ("comm", DevComm),
        ("input", ctypes.c_uint64),
        ("output", ctypes.c_uint64),
        ("count", ctypes.c_uint64),
        ("scratch_offset", ctypes.c_uint64),
        ("scratch_half", ctypes.c_uint64),
        ("kind", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("op", ctypes.c_int32),
        ("wire", ctypes.c_int32),
        ("reserved", ctypes.c_uint32),
        ("barrier_base", ctypes.c_uint32),
    ]
