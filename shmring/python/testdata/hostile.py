"""A misbehaving ring client, for vig's tests (cmd/vig/clients_test.go).

    hostile.py ADDR scribble   one good round trip ("ok"), then garbage in the
                               ring control blocks; "disconnected" once vig ended it
    hostile.py ADDR bells      rings vig's doorbell in a tight loop without
                               posting, prints "ok" after a good round trip in
                               between, and rings on until killed
    hostile.py ADDR die        posts a frame to the 200 ms model "slow", leaves
                               half a descriptor in the next entry, prints
                               "ready" and waits to be killed
    hostile.py - layout        the layouts of two configurations
"""

import ctypes
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import vigring  # noqa: E402


def layout(req, resp):
    l = vigring.Layout(req, resp)
    print("region=%d" % l.region_size + "".join(
        " ring%d=%d/%d/%d/%d/%d/%d" % (i, r.descriptors, r.slots, r.slot_size, r.ring_off, r.desc_off, r.arena_off)
        for i, r in enumerate(l.rings)))


def main():
    addr, mode = sys.argv[1], sys.argv[2]
    if mode == "layout":
        layout((16, 4, 8 << 20), (16, 8, 64 << 10))
        layout((16, 4, 4096), (8, 40, 8192))
        return 0
    ring = vigring.connect(addr)
    q, p = ring.layout.rings
    base = ring._base
    if mode == "scribble":
        slot = ring.loan(timeout=5)
        slot.buf[:100] = b"\x01" * 100
        ring.submit(slot, model="det", stream="cam", frame=1, length=100)
        res = ring.next(timeout=10)
        ring.release(res)
        print("ok", flush=True)
        ctypes.c_uint64.from_address(base + q.ring_off).value = 1 << 62                 # request head
        ctypes.c_uint64.from_address(base + p.ring_off + 128).value = 0xDEADBEEFCAFE   # response tail
        ctypes.c_uint32.from_address(base + q.ring_off + 260).value = 0xFFFFFFFF       # ready waiters
        ctypes.c_uint32.from_address(base + p.ring_off + 388).value = 0xFFFFFFFF       # space waiters
        for i in range(q.slots):
            ctypes.c_uint32.from_address(base + q.ring_off + 512 + 4 * i).value = 0x55555555
        for i in range(p.slots):
            ctypes.c_uint32.from_address(base + p.ring_off + 512 + 4 * i).value = 0xAAAAAAAA
        os.write(ring._bells[vigring._BELL_REQ_READY], vigring._ONE)  # whatever the waiters word says
        for _ in range(200):  # up to 10 s
            if not ring._alive():
                print("disconnected", flush=True)
                return 0
            time.sleep(0.05)
        print("still connected", flush=True)
        return 1
    if mode == "bells":
        # vig's doorbell rung with nothing posted, in a tight loop, before and
        # after a good round trip, until killed.
        bell = ring._bells[vigring._BELL_REQ_READY]
        for _ in range(20000):
            os.write(bell, vigring._ONE)
        slot = ring.loan(timeout=5)
        ring.submit(slot, model="det", stream="cam", frame=1, length=100)
        res = ring.next(timeout=10)
        ring.release(res)
        print("ok", flush=True)
        while True:
            os.write(bell, vigring._ONE)
    if mode == "die":
        slot = ring.loan(timeout=5)
        ring.submit(slot, model="slow", frame=0, length=4096)  # 200 ms: vig still holds it when we die
        off = q.desc_off + (ring._head & (q.descriptors - 1)) * 4096
        ring._mv[off:off + 2048] = b"\x7f" * 2048  # half a descriptor, never published
        print("ready", flush=True)
        while True:
            signal.pause()
    return 2


if __name__ == "__main__":
    sys.exit(main())
