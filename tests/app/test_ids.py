from __future__ import annotations

import os
import uuid

from signoff.common.ids import _RandomPool, new_id, parse_id


def test_ids_are_version_7_and_strictly_increasing() -> None:
    ids = [new_id() for _ in range(10_000)]
    assert all(i.version == 7 and i.variant == "specified in RFC 4122" for i in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_parse_id() -> None:
    value = new_id()
    assert parse_id(str(value)) == value
    assert parse_id("not-a-uuid") is None


def test_random_pool_hands_out_each_byte_once_across_blocks() -> None:
    pool = _RandomPool()
    taken = [pool.take(7) for _ in range(2 * _RandomPool.BLOCK // 7 + 3)]
    assert all(len(chunk) == 7 for chunk in taken)
    # Random 56-bit chunks: a repeat would mean bytes were handed out twice.
    assert len(set(taken)) == len(taken)


def test_a_forked_child_does_not_reuse_its_parents_random_bytes() -> None:
    new_id()  # the pool now holds unread bytes the child must not hand out
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.write(write_end, new_id().bytes)
        os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    child_id = uuid.UUID(bytes=os.read(read_end, 16))
    os.close(read_end)
    parent_id = new_id()
    # rand_b: the low 62 bits; equal only if both took the same bytes from the pool.
    low_bits = (1 << 62) - 1
    assert child_id.int & low_bits != parent_id.int & low_bits
