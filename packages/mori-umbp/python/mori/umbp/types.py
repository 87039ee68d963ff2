# SPDX-License-Identifier: MIT
"""Tiers, key and size checks shared by the master, the peers and the clients."""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable
from typing import Any

from mori.umbp import settings
from mori.umbp.errors import (
    InvalidArgumentError,
    InvalidKeyError,
    InvalidNodeIdError,
    UnknownTierError,
    ValueTooLargeError,
)


class UMBPTierType(enum.IntEnum):
    """MORI's tiers; the values match the wire enum ``umbp.TierType``. Reads prefer HBM > DRAM > SSD."""

    Unknown = 0
    HBM = 1
    DRAM = 2
    SSD = 3


#: Tiers a put may target; SSD is filled only by spill-by-copy after commit, as in MORI.
PUT_TIERS = (UMBPTierType.HBM, UMBPTierType.DRAM)
#: Tiers a node can hold blocks in (external KV reports name one of these).
PEER_TIERS = (UMBPTierType.HBM, UMBPTierType.DRAM, UMBPTierType.SSD)
#: Tiers a peer owns pages in (HBM: a CUDA tensor, DRAM: host memory); both registered with mori-io.
PAGE_TIERS = (UMBPTierType.HBM, UMBPTierType.DRAM)


def check_tier(name: str, tier: object, allowed: tuple[UMBPTierType, ...] = tuple(UMBPTierType)) -> UMBPTierType:
    """``tier`` as a UMBPTierType in ``allowed``, else UnknownTierError naming it and the allowed set."""
    names = ", ".join(t.name for t in allowed)
    if isinstance(tier, bool) or not isinstance(tier, int):
        raise UnknownTierError(f"{name}={tier!r} is not a UMBPTierType (allowed: {names})")
    try:
        value = UMBPTierType(int(tier))
    except ValueError:
        raise UnknownTierError(f"{name}={tier!r} is not a UMBPTierType (allowed: {names})") from None
    if value not in allowed:
        raise UnknownTierError(f"{name}={value.name} is not accepted here (allowed: {names})")
    return value


def tier_name(tier: int) -> str:
    """``HBM``, ``DRAM``, ... for a wire value; the number itself when it is no tier."""
    try:
        return UMBPTierType(tier).name
    except ValueError:
        return str(tier)


def check_key(key: object, name: str = "key", limit: int | None = None) -> str:
    """``key`` if it is a valid block key: non-empty text of at most UMBP_MAX_KEY_BYTES UTF-8 bytes
    with no whitespace or control characters (stores join keys with newlines and '|'). ``limit``:
    that setting's value, read once by a caller checking many keys."""
    return _check_name(key, name, "UMBP_MAX_KEY_BYTES", KEY_SEPARATORS, InvalidKeyError, limit)


def check_keys(keys: Iterable[object], name: str = "keys") -> list[str]:
    """``check_key`` of each of ``keys`` (named ``name[i]``), UMBP_MAX_KEY_BYTES read once."""
    limit = settings.get_int("UMBP_MAX_KEY_BYTES")
    out = list(keys)
    if all_plain_keys(out, limit):
        return out  # type: ignore[return-value]  # each one checked to be a str
    forbidden = _forbidden(KEY_SEPARATORS).search
    for i, k in enumerate(out):
        # An ASCII str passes or fails here at C speed; anything else takes the full check, which
        # names the key (the probe of a prompt sends its whole chain, a key per block).
        if not (type(k) is str and k and k.isascii() and len(k) <= limit and k.isprintable() and not forbidden(k)):
            _check_name(k, f"{name}[{i}]", "UMBP_MAX_KEY_BYTES", KEY_SEPARATORS, InvalidKeyError, limit)
    return out  # type: ignore[return-value]  # each one checked to be a str


def all_plain_keys(keys: list[Any], limit: int) -> bool:
    """Whether every one of ``keys`` is a valid ASCII key, checked over them all at once at C speed
    (a chain of 300 keys is checked on every hop; one by one that was 7 % of a client's and of the
    master's interpreter time on the bench's trace). False: check them one by one (``check_keys``
    names the bad one)."""
    if not keys or set(map(type, keys)) != {str}:
        return not keys
    sep = KEY_SEPARATORS[0]
    joined = sep.join(keys)
    # Printable ASCII holds no whitespace but the space, so a key is plain when its bytes are all
    # in _plain_key_bytes(): one pass of bytes.translate, where str.isprintable and a regex search
    # took 110 of 140 us for a 300-key chain of 64-character keys.
    return (
        joined.isascii()
        and not joined.encode("ascii").translate(None, _plain_key_bytes(KEY_SEPARATORS[1:]))
        and joined.count(sep) == len(keys) - 1  # no key holds the separator
        and min(map(len, keys)) > 0
        and max(map(len, keys)) <= limit
    )


@functools.lru_cache(maxsize=8)
def _plain_key_bytes(separators: str) -> bytes:
    """The bytes a plain key may hold (the first separator too: the caller counts it): printable
    ASCII but the space and ``separators``."""
    return bytes(c for c in range(0x21, 0x7F) if chr(c) not in separators)


#: Characters the master's stores use to build their own keys and fields (Redis: ``block:<key>``,
#: ``l|<node>|<tier>``, "\n"-joined lists): a key may not hold '|'. Node ids may hold ':' and '|'
#: (SGLang's default ids are ``<address>:dp0:pp0:tp0``): the Redis store percent-encodes them.
KEY_SEPARATORS = "|"
NODE_ID_SEPARATORS = ""


@functools.lru_cache(maxsize=8)
def _forbidden(separators: str) -> re.Pattern[str]:
    """Whitespace or one of ``separators``, in one regex (a key is checked on every hop)."""
    return re.compile(rf"[\s{re.escape(separators)}]")


def check_node_id(node_id: object, name: str = "node_id") -> str:
    """``node_id`` if it is a valid node id: non-empty text of at most UMBP_MAX_NODE_ID_BYTES UTF-8
    bytes with no whitespace or control characters."""
    return _check_name(node_id, name, "UMBP_MAX_NODE_ID_BYTES", NODE_ID_SEPARATORS, InvalidNodeIdError)


def _shown(text: str) -> str:
    """``text`` for an error message: whole when short, else its head and its length."""
    return repr(text) if len(text) <= 80 else f"{text[:40]!r}... ({len(text)} chars)"


def _check_name(
    value: object,
    name: str,
    limit_name: str,
    separators: str,
    error: type[InvalidArgumentError],
    limit: int | None = None,
) -> str:
    if limit is None:
        limit = settings.get_int(limit_name)
    if not isinstance(value, str):
        raise error(f"{name}={value!r} must be a str, not {type(value).__name__}")
    if not value:
        raise error(f"{name}='' must not be empty")
    size = len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise error(f"{name}={_shown(value)} is {size} bytes long; the limit is {limit_name}={limit}")
    if value.isprintable() and _forbidden(separators).search(value) is None:
        return value  # the common case, checked in C: keys are checked on every hop of a put and a get
    for ch in value:
        if not ch.isprintable() or ch.isspace() or ch in separators:
            also = f" or any of {separators!r} (the store's separators)" if separators else ""
            raise error(f"{name}={_shown(value)} holds {ch!r}; it may not hold whitespace or control chars{also}")
    return value


def check_size(size: object, name: str = "size", limit: int | None = None) -> int:
    """``size`` as an int in [1, UMBP_MAX_BLOCK_BYTES], else a typed error naming the limit
    (``limit``: that setting's value, read once by a caller checking many sizes)."""
    if limit is None:
        limit = settings.get_int("UMBP_MAX_BLOCK_BYTES")
    if isinstance(size, bool) or not isinstance(size, int):
        raise InvalidArgumentError(f"{name}={size!r} must be an int")
    if size <= 0:
        raise InvalidArgumentError(f"{name}={size} must be positive")
    if size > limit:
        raise ValueTooLargeError(f"{name}={size} exceeds the largest block, UMBP_MAX_BLOCK_BYTES={limit}")
    return size


def check_ptr(ptr: object, name: str = "ptr") -> int:
    if isinstance(ptr, bool) or not isinstance(ptr, int) or not 0 < ptr < 2**64:
        raise InvalidArgumentError(f"{name}={ptr!r} must be a non-null address (an int in (0, 2**64))")
    return ptr
