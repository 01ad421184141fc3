"""Which grouping value each shard gets, so that Spark spreads the shards evenly.

The operator groups by one integer column, and Spark sends a group to the state partition
``pmod(murmur3(value, 42), partitions)`` (``HashPartitioning``). Grouped by the bare shard
number, 8 shards land 5 / 3 on 2 partitions and on 4 partitions fill only 3 of them
(1 / 0 / 3 / 4 shards), and on 8 partitions 5: the busiest stateful task does up to
half the work and some executors get none. :func:`shard_keys` gives shard ``i`` the smallest
value ``i + shards * k`` that Spark places on partition ``i mod partitions``, so every
partition holds ``shards / partitions`` shards (±1), and the operator reads the shard back as
``value mod shards`` (:func:`shard_of`).

Trace: 2 shards, 2 partitions: bare values 0 and 1 both hash to partition 1; the keys are
``[2, 1]`` (2 → partition 0, 1 → partition 1), and ``shard_of(2, 2) == 0``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["SEED", "shard_keys", "shard_of", "spark_partition"]

SEED: Final = 42
"""The seed of Spark's ``HashPartitioning`` (and of ``F.hash``)."""

_MASK: Final = 0xFFFF_FFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _murmur3_int(value: int, seed: int = SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashInt(value, seed)``, as a signed 32-bit integer."""
    k = (value & _MASK) * 0xCC9E2D51 & _MASK
    k = _rotl(k, 15) * 0x1B873593 & _MASK
    h = seed ^ k
    h = (_rotl(h, 13) * 5 + 0xE6546B64) & _MASK
    h ^= 4  # the input's length in bytes
    h ^= h >> 16
    h = h * 0x85EBCA6B & _MASK
    h ^= h >> 13
    h = h * 0xC2B2AE35 & _MASK
    h ^= h >> 16
    return h - (1 << 32) if h & 0x8000_0000 else h


def spark_partition(value: int, partitions: int) -> int:
    """The partition Spark's hash partitioning gives an ``int`` grouping value."""
    return _murmur3_int(value) % partitions  # Python's % is Spark's pmod for a positive divisor


def shard_keys(shards: int, partitions: int) -> list[int]:
    """The grouping value of each shard: shard ``i`` on partition ``i mod partitions``.

    Each value is ``i + shards * k`` for the smallest ``k >= 0`` that places it, so the values
    are distinct and :func:`shard_of` recovers ``i``. A few tries per shard (one in
    ``partitions`` values lands on a given partition).
    """
    keys = []
    for i in range(shards):
        value = i
        while spark_partition(value, partitions) != i % partitions:
            value += shards
        keys.append(value)
    return keys


def shard_of(value: int, shards: int) -> int:
    """The shard a grouping value of :func:`shard_keys` stands for."""
    return value % shards
