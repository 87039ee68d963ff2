"""Release smoke check of mori-ir: the wheel ships both bitcode builds, and they are LLVM bitcode
(a release must not fall back to building them with the user's clang at run time)."""

from __future__ import annotations

from mori.ir.bitcode import shipped_bitcode

#: The wrapper magic of LLVM bitcode files ('BC' 0xC0DE).
BITCODE_MAGIC = b"BC\xc0\xde"

if __name__ == "__main__":
    for variant in ("full", "p2p"):
        path = shipped_bitcode(variant)
        if path is None:
            raise SystemExit(f"the mori-ir wheel ships no {variant} bitcode")
        if path.read_bytes()[:4] != BITCODE_MAGIC:
            raise SystemExit(f"{path} is not LLVM bitcode")
    print("OK")
