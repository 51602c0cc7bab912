"""64-bit cluster-encoded ids: ``id = cluster_id << 48 | local``.

Regional databases each take their own cluster id, so their rows merge without key collisions and
any id tells where it was made. The database makes the ids (``gapless_next_id`` in ``schema/``);
this module is the same arithmetic for Python callers and ``gapless id decode``.
"""

from __future__ import annotations

from typing import NamedTuple

CLUSTER_BITS = 15
LOCAL_BITS = 48
MAX_CLUSTER_ID = (1 << CLUSTER_BITS) - 1  # 32767: the sign bit of a bigint stays clear
MAX_LOCAL = (1 << LOCAL_BITS) - 1


class DecodedId(NamedTuple):
    cluster_id: int
    local: int


def encode_id(cluster_id: int, local: int) -> int:
    """Compose an id; raises ValueError when either part is out of its range."""
    if not 0 <= cluster_id <= MAX_CLUSTER_ID:
        raise ValueError(f"cluster id must be between 0 and {MAX_CLUSTER_ID}, got {cluster_id}")
    if not 0 <= local <= MAX_LOCAL:
        raise ValueError(f"local part must be between 0 and {MAX_LOCAL}, got {local}")
    return (cluster_id << LOCAL_BITS) | local


def decode_id(value: int) -> DecodedId:
    """Split an id into (cluster_id, local); raises ValueError for a negative or oversized id."""
    if not 0 <= value <= (MAX_CLUSTER_ID << LOCAL_BITS | MAX_LOCAL):
        raise ValueError(f"not a gapless id (must be a non-negative 63-bit integer): {value}")
    return DecodedId(value >> LOCAL_BITS, value & MAX_LOCAL)
