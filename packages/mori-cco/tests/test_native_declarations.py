# SPDX-License-Identifier: MIT
"""The C/Python layout mirrors, and the env command. (The CUDA driver declarations are the root
package's shared <mori/cuda_driver.hpp>, checked against cuda.h by packages/mori/tests.)"""

from __future__ import annotations

import ctypes
import subprocess
import sys

from mori.cco import _C
from mori.cco.layout import CollectiveArgs, DevComm


def test_ctypes_mirrors_match_the_c_layouts() -> None:
    constants = _C.constants()
    assert ctypes.sizeof(DevComm) == constants["DEV_COMM_SIZE"]
    assert ctypes.sizeof(CollectiveArgs) == constants["COLLECTIVE_ARGS_SIZE"]


def test_env_lists_every_setting() -> None:
    out = subprocess.run([sys.executable, "-m", "mori.cco", "env"], capture_output=True, text=True, check=True).stdout
    for name in ("MORI_CCO_BACKEND", "MORI_CCO_PER_RANK_VMM", "MORI_CCO_TIMEOUT", "MORI_CCO_CE_QUEUES"):
        assert name in out
