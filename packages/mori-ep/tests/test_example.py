# SPDX-License-Identifier: MIT
"""The example of the user guide runs and agrees with its own single-process reference."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "dispatch_combine.py"


def test_dispatch_combine_example_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--pes", "2"], capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "all 2 PEs match" in result.stderr
