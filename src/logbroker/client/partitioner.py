"""The Java client's partitioner for keyed records, so tools written on this client put a key where
applications do (and per-key order holds across both).

Java's ``BuiltInPartitioner.partitionForKey``: murmur2 of the serialized key, made positive
(``& 0x7fffffff``), modulo the topic's partition count. librdkafka's ``murmur2``/``murmur2_random``
partitioners and kafka-python's ``DefaultPartitioner`` compute the same; the hash is kafka-python's.
"""

from __future__ import annotations

from kafka.partitioner import murmur2

__all__ = ["partition_for_key"]


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition the Java client chooses for a record with this (non-null) key."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
