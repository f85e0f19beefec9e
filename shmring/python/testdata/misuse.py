"""Misuse of the Python client, for vig's tests (cmd/vig/clients_test.go):
every case fails at once with a vigring.Error subclass saying what to do.

    misuse.py ADDR    prints one "ok NAME" line per case, then "done"
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import vigring  # noqa: E402


def expect(name, exc, words, f):
    try:
        f()
    except exc as e:
        if not isinstance(e, vigring.Error):
            print("FAIL %s: %r is not a vigring.Error" % (name, e))
            return
        for w in words:
            if w not in str(e):
                print("FAIL %s: %r does not say %r" % (name, str(e), w))
                return
        print("ok " + name)
        return
    except Exception as e:  # noqa: BLE001 — a leak is the failure reported
        print("FAIL %s: raised %s: %s" % (name, type(e).__name__, e))
        return
    print("FAIL %s: no error" % name)


def main():
    ring = vigring.connect(sys.argv[1], requests=(16, 2, 4096))
    expect("next-nothing-outstanding", vigring.InvalidArgument, ["submit first"], lambda: ring.next())
    expect("next-timeout", vigring.Timeout, ["no result within"], lambda: ring.next(timeout=0.05))
    a, b = ring.loan(), ring.loan()
    expect("loan-all-held", vigring.Busy, ["all 2 request slots", "submit or unloan"], lambda: ring.loan())
    expect("submit-none-length", vigring.InvalidArgument, ["submit(None"], lambda: ring.submit(None, model="det", length=5))
    expect("submit-model-type", vigring.InvalidArgument, ["model is a NoneType"], lambda: ring.submit(a, model=None))
    expect("submit-empty-model", vigring.InvalidArgument, ["model is empty"], lambda: ring.submit(a, model=""))
    expect("submit-frame", vigring.InvalidArgument, ["frame -1"], lambda: ring.submit(a, model="det", frame=-1))
    expect("submit-not-a-slot", vigring.InvalidArgument, ["want a Slot"], lambda: ring.submit(3, model="det"))
    expect("submit-length", vigring.InvalidArgument, ["outside the 4096-byte slot"], lambda: ring.submit(a, model="det", length=5000))
    expect("bad-layout", vigring.InvalidArgument, ["descriptor count 3"], lambda: vigring.Layout((3, 1, 4096)))
    a.buf[:4] = b"abcd"
    ring.submit(a, model="det", stream="cam", frame=1, length=4)  # a failed submit above kept the loan
    try:
        a.buf[0] = 1
        print("FAIL stale-slot-view: writable after submit")
    except ValueError:
        print("ok stale-slot-view")
    expect("resubmit", vigring.InvalidArgument, ["not loaned"], lambda: ring.submit(a, model="det"))
    res = ring.next(timeout=10)
    out = res.outputs[0].data
    ring.release(res)
    try:
        bytes(out)
        print("FAIL stale-result-view: readable after release")
    except ValueError:
        print("ok stale-result-view")
    ring.close()
    try:
        b.buf[0] = 1
        print("FAIL closed-slot-view: writable after close")
    except ValueError:
        print("ok closed-slot-view")
    expect("after-close", vigring.Closed, ["closed"], lambda: ring.loan())
    print("done")


if __name__ == "__main__":
    main()
