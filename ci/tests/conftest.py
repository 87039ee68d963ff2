"""The ci/ helpers are flat modules: make them importable as the noxfile does."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
