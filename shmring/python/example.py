#!/usr/bin/env python3
"""A sensor that hands frames to vig over the shared-memory ring.

    python3 example.py ADDR STREAM MODEL FRAME_BYTES N [--rate HZ]
                       [--backend memfd|shm|shm-key] [--outputs] [--slot-kib K] [--bench]
                       [--spin adaptive|never|forever]

Submits N frames of FRAME_BYTES bytes (byte j of frame k is k + 7j, mod 256),
each after the previous one's answer, or at HZ frames per second with --rate
(open loop; results are read as they come). Prints one line per result:

    frame=K status=CODE bytes=N

and, with --outputs, one line per output tensor after it:

    output name=NAME datatype=TYPE shape=[D0,D1] hex=BYTES

With --bench (closed loop only) it prints no result lines but, at the end, the
mean time from submit to result over the N frames (filling is not counted):

    round_trip_us=MEAN p50_us=MEDIAN frames=N

Exits 0 when every frame was answered, 1 on a ring error, 2 on bad usage.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigring  # noqa: E402


def fill(buf, n, k):
    """Frame k's pattern, written in place into the loaned slot."""
    period = bytes((k + 7 * j) & 0xFF for j in range(256))  # repeats every 256 bytes
    whole, rest = divmod(n, 256)
    if whole:
        buf[:whole * 256] = period * whole
    buf[whole * 256:n] = period[:rest]


def show(res, outputs):
    print("frame=%d status=%s bytes=%d" % (res.frame, res.status_name, res.nbytes))
    if outputs:
        for t in res.outputs:
            print("output name=%s datatype=%s shape=[%s] hex=%s" % (
                t.name, t.datatype, ",".join(str(d) for d in t.shape), t.data.hex()))
    if res.status != vigring.OK and res.message:
        print("frame %d: %s: %s" % (res.frame, res.status_name, res.message), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description="hand N frames to vig over the shared-memory ring")
    ap.add_argument("addr", help="vig's listen.ring, e.g. @vig-ring")
    ap.add_argument("stream")
    ap.add_argument("model")
    ap.add_argument("frame_bytes", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--rate", type=float, default=0, help="open loop: frames per second")
    ap.add_argument("--backend", choices=["memfd", "shm", "shm-key"], default="memfd")
    ap.add_argument("--outputs", action="store_true", help="print every output tensor")
    ap.add_argument("--bench", action="store_true", help="print only the mean round trip")
    ap.add_argument("--spin", choices=["adaptive", "never", "forever"], default="adaptive",
                    help="how waits spin before sleeping on the futex")
    ap.add_argument("--slot-kib", type=int, default=64, help="response slot size")
    a = ap.parse_args()
    backend = {"memfd": vigring.MEMFD, "shm": vigring.SHM, "shm-key": vigring.SHM_KEY}[a.backend]
    try:
        ring = vigring.connect(a.addr, requests=(16, 4, max(8 << 20, a.frame_bytes)),
                               responses=(16, 8, a.slot_kib << 10), backend=backend,
                               spin={"adaptive": 0, "never": -1, "forever": -2}[a.spin])
    except vigring.Error as e:
        print(e, file=sys.stderr)
        return 1
    sent = answered = 0
    next_at = time.monotonic()
    period = 1 / a.rate if a.rate > 0 else 0
    submitted_at, rtts = 0, []
    try:
        while answered < a.n:
            due = sent < a.n and (time.monotonic() >= next_at if a.rate > 0 else sent == answered)
            if due and ring.outstanding < ring.max_outstanding:
                slot = ring.loan(timeout=10)
                fill(slot.buf, a.frame_bytes, sent)
                submitted_at = time.monotonic_ns()
                ring.submit(slot, model=a.model, stream=a.stream, frame=sent,
                            capture_ns=time.monotonic_ns(), length=a.frame_bytes)
                sent += 1
                next_at += period
                continue
            wait = 30.0
            if a.rate > 0 and sent < a.n and ring.outstanding < ring.max_outstanding:
                wait = max(0.0, next_at - time.monotonic())
            try:
                res = ring.next(timeout=wait)
            except vigring.Timeout:
                if a.rate > 0 and sent < a.n:
                    continue
                raise
            if a.bench:
                rtts.append(time.monotonic_ns() - submitted_at)
            else:
                show(res, a.outputs)
            ring.release(res)
            answered += 1
    except vigring.Error as e:
        sys.stdout.flush()
        print("example: %d of %d frames answered: %s" % (answered, a.n, e), file=sys.stderr)
        return 1
    finally:
        if a.bench and answered == a.n and a.n:
            print("round_trip_us=%.2f p50_us=%.2f frames=%d" % (sum(rtts) / 1e3 / a.n, sorted(rtts)[a.n // 2] / 1e3, a.n))
        if ring.skipped:
            print("example: %d malformed results skipped" % ring.skipped, file=sys.stderr)
        ring.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
