"""vigring: the sensor side of vig's shared-memory ring (ring ABI version 3).

Pure standard library (Python 3.9+, Linux): socket.send_fds/recv_fds, mmap,
struct, os.memfd_create and fcntl seals, select.poll on the eventfd doorbells
vig hands over, ctypes for the atomics. The byte
layout, the handshake and the wait protocol are specified in shmring/doc.go;
this module follows it field for field. vig is the peer and is trusted no more
than vig trusts us: every index, offset and length read from the shared mapping
is bounds-checked, and descriptors are copied out before they are decoded.

    import vigring
    with vigring.connect("@vig-ring") as ring:
        slot = ring.loan()                   # a frame buffer in shared memory
        slot.buf[:n] = frame_bytes           # or: capture straight into slot.buf
        ring.submit(slot, model="det", stream="cam", frame=seq,
                    capture_ns=time.monotonic_ns(), length=n)
        res = ring.next()                    # spins briefly, then sleeps in poll
        for out in res.outputs:              # name, datatype, shape, data
            use(out.name, out.shape, out.data)   # data: a memoryview, in place
        ring.release(res)                    # the result's slot goes back

slot.buf is a memoryview of the mapping: writing into it writes the frame where
vig reads it (no copy). With NumPy, slot.array(dtype, shape) is a view over
the same bytes (np.frombuffer), e.g. cv2.cvtColor(src, code, dst=slot.array(
np.uint8, (h, w, 3))). NumPy is optional.

Atomics: Python has no atomic instructions. The read-modify-writes of shared
words (the waiters counts) and the full barriers the protocol
needs between a store and a later load ("publish head, then look at the waiters
word") come from libatomic (GCC's runtime: atomic_thread_fence and
__atomic_fetch_add_4, seq_cst) when it is installed, and from the kernel
otherwise (FUTEX_WAKE_OP with FUTEX_OP_ADD is a fully ordered atomic add, used
here for the add alone: nobody sleeps on a futex since ABI version 3). Plain
8-byte loads and stores of
aligned words are single accesses (ctypes reads and writes them whole).
"""

import ctypes
import errno
import fcntl
import mmap
import os
import platform
import select
import socket
import struct
import threading
import time

VERSION = 3
NO_SLOT = 0xFFFFFFFF
MAX_SLOTS = 1024
MAX_DESCRIPTORS = 4096
MAX_STREAM, MAX_MODEL, MAX_MESSAGE, MAX_TENSORS = 56, 64, 80, 16
MAX_NAME, MAX_DATATYPE, MAX_RANK, MAX_KEY = 96, 8, 8, 96

MEMFD, SHM, SHM_KEY = 1, 2, 3  # the hello's region kinds

_HEADER, _DESC, _LINE, _PAGE = 4096, 4096, 128, 4096
_MAGIC = 0x31474E4952474956  # "VIGRING1"
_HELLO_MAGIC = 0x4F4C4C4548474956  # "VIGHELLO"
_REPLY_MAGIC = 0x5945524748474956  # "VIGHGREY"
_HEAD, _TAIL, _READY_WAITERS, _SPACE_WAITERS, _STATES = 0, 128, 260, 388, 512
# The doorbells of the accepted reply, in order: request ready (we ring it),
# request space and response ready (vig rings them; we wait).
_BELL_REQ_READY, _BELL_REQ_SPACE, _BELL_RESP_READY = 0, 1, 2
_ONE = struct.pack("<Q", 1)
_D_RESERVED, _T_SIZE, _D_TENSORS = 3328, 192, 256
# Descriptor fields up to the names: tag, frame, capture, slot, status,
# payload off, payload len, stream len, model len, tensor count, message len, flags.
_DHEAD = struct.Struct("<QQqIIQQBBBBI")
# Tensor record up to the shape: data off, data len, name len, datatype len, rank.
_THEAD = struct.Struct("<QQBBB")
_SHAPE = struct.Struct("<8q")
_ZERO_RESERVED = bytes(_DESC - _D_RESERVED)

OK, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 3, 4, 5
RESOURCE_EXHAUSTED, ABORTED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 8, 10, 12, 13, 14
_STATUS = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
           "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
           "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
           "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]


def status_name(code):
    """The gRPC name of a result status ("OK", "ABORTED", ...)."""
    return _STATUS[code] if 0 <= code < len(_STATUS) else "STATUS_UNKNOWN_CODE"


class Error(Exception):
    """A ring error; the message says what happened and what to do."""


class Closed(Error):
    """The session ended: vig went away, or the ring was closed."""


class Corrupt(Error):
    """vig's side wrote counters no correct peer can produce; the session ended."""


class Refused(Error):
    """vig refused the handshake; its reason is in the message."""


class Timeout(Error):
    """A wait's timeout passed; the message says what was waited for."""


class InvalidArgument(Error, ValueError):
    """A call's argument is wrong (the message says which): nothing was done.
    Also a ValueError, as the arguments' checks raised before."""


class Busy(Error):
    """As many requests await results as the response ring holds: call next() first."""


# --- atomics (in the kernel via futex, or libatomic) --------------------------

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine())
_FUTEX_WAIT, _FUTEX_WAKE, _FUTEX_WAKE_OP, _FUTEX_PRIVATE = 0, 1, 5, 128
_FUTEX_OP_ADD = 1
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                     ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
_FENCE_WORD = ctypes.c_uint32(0)
_FENCE_ADDR = ctypes.addressof(_FENCE_WORD)
_TSO = platform.machine() in ("x86_64", "i686", "AMD64")


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _op_add(n):
    # FUTEX_OP(FUTEX_OP_ADD, n, FUTEX_OP_CMP_EQ, 0); oparg is 12-bit signed.
    return (_FUTEX_OP_ADD << 28) | ((n & 0xFFF) << 12)


def _atomic_add(addr, n, wake=0):
    """Atomically add n (-2048..2047) to the shared 32-bit word at addr, in the
    kernel (a fully ordered operation), waking up to `wake` sleepers on it.
    Shared futex: no FUTEX_PRIVATE_FLAG, the word is in another process's mapping too."""
    if _syscall(_SYS_FUTEX, addr, _FUTEX_WAKE_OP, wake, None, addr, _op_add(n)) < 0:
        e = ctypes.get_errno()
        raise OSError(e, "futex(FUTEX_WAKE_OP): " + os.strerror(e))


def _kernel_fence():
    """A full memory barrier: an atomic operation in the kernel on a private word."""
    _syscall(_SYS_FUTEX, _FENCE_ADDR, _FUTEX_WAKE_OP | _FUTEX_PRIVATE, 0, None, _FENCE_ADDR, _op_add(0))


# libatomic (GCC's runtime, present wherever GCC is) has C11's atomic_thread_fence
# and atomic adds out of line: a ctypes call instead of a syscall. Without it the
# kernel does both.
# VIGRING_NO_LIBATOMIC=1 forces the kernel's (the tests run both).
_SEQ_CST = 5
try:
    if os.environ.get("VIGRING_NO_LIBATOMIC"):
        raise OSError("VIGRING_NO_LIBATOMIC is set")
    _libatomic = ctypes.CDLL("libatomic.so.1")
    _thread_fence = _libatomic.atomic_thread_fence
    _thread_fence.argtypes, _thread_fence.restype = [ctypes.c_int], None
    _fetch_add4 = _libatomic.__atomic_fetch_add_4
    _fetch_add4.argtypes, _fetch_add4.restype = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int], ctypes.c_uint32
except (OSError, AttributeError):
    _libatomic = None


def _full_fence():
    """A full memory barrier (seq_cst fence)."""
    if _libatomic is not None:
        _thread_fence(_SEQ_CST)
    else:
        _kernel_fence()


def _add(addr, n):
    """Atomically add n to the shared 32-bit word at addr, fully ordered."""
    if _libatomic is not None:
        _fetch_add4(addr, n & 0xFFFFFFFF, _SEQ_CST)
    else:
        _atomic_add(addr, n)


def _order_fence():
    """Load-load/store-store ordering: free on x86 (TSO), a full barrier elsewhere."""
    if not _TSO:
        _full_fence()


# --- layout ------------------------------------------------------------------

def _align(n, a):
    return (n + a - 1) & ~(a - 1)


class RingLayout:
    __slots__ = ("descriptors", "slots", "slot_size", "ring_off", "desc_off", "arena_off")


class Layout:
    """The geometry of a region, computed as shmring.ComputeLayout does."""

    def __init__(self, requests=(16, 4, 8 << 20), responses=(16, 8, 64 << 10)):
        self.rings = []
        off = _HEADER
        for i, (d, s, ss) in enumerate((requests, responses)):
            if d < 2 or d > MAX_DESCRIPTORS or d & (d - 1):
                raise InvalidArgument("ring %d: descriptor count %d: want a power of two in [2, %d]" % (i, d, MAX_DESCRIPTORS))
            if s < 1 or s > MAX_SLOTS:
                raise InvalidArgument("ring %d: slot count %d: want [1, %d]" % (i, s, MAX_SLOTS))
            if ss <= 0 or ss > 1 << 30:
                raise InvalidArgument("ring %d: slot size %d: want 1 byte to 1 GiB" % (i, ss))
            r = RingLayout()
            r.descriptors, r.slots, r.slot_size = d, s, _align(ss, _PAGE)
            r.ring_off = off
            r.desc_off = off + _STATES + _align(4 * s, _LINE)
            off = _align(r.desc_off + d * _DESC, _PAGE)
            self.rings.append(r)
        for r in self.rings:
            r.arena_off = off
            off += r.slots * r.slot_size
        self.region_size = off

    def header(self, flags):
        b = bytearray(_HEADER)
        struct.pack_into("<QIIQII", b, 0, _MAGIC, VERSION, flags, self.region_size, _HEADER, _DESC)
        for i, r in enumerate(self.rings):
            struct.pack_into("<IIQQQ", b, 32 + 32 * i, r.descriptors, r.slots, r.slot_size, r.ring_off, r.arena_off)
        return bytes(b)


# --- messages ----------------------------------------------------------------

class Tensor:
    """A tensor record: name, datatype, shape, and where its bytes lie in the
    payload. In a result, data is a memoryview in place (valid until release)."""

    __slots__ = ("name", "datatype", "shape", "offset", "length", "data")

    def __init__(self, name="", datatype="UINT8", shape=(), offset=0, length=0, data=None):
        self.name, self.datatype, self.shape = name, datatype, tuple(shape)
        self.offset, self.length, self.data = offset, length, data

    def array(self, dtype=None):
        """The tensor as a NumPy array over the shared bytes (NumPy optional)."""
        np = _numpy()
        dt = np.dtype(dtype or _NUMPY_TYPES.get(self.datatype, "u1"))
        return np.frombuffer(self.data, dtype=dt).reshape(self.shape)

    def __repr__(self):
        return "Tensor(%r, %r, %r, %d bytes)" % (self.name, self.datatype, self.shape, self.length)


_NUMPY_TYPES = {"UINT8": "u1", "INT8": "i1", "UINT16": "<u2", "INT16": "<i2", "UINT32": "<u4",
                "INT32": "<i4", "UINT64": "<u8", "INT64": "<i8", "FP16": "<f2", "FP32": "<f4",
                "FP64": "<f8", "BOOL": "?"}


class Result:
    """vig's answer to one request. outputs are in place until release()."""

    __slots__ = ("tag", "frame", "capture_ns", "status", "slot", "payload_off", "payload_len",
                 "stream", "model", "message", "outputs", "payload")

    @property
    def status_name(self):
        return status_name(self.status)

    @property
    def nbytes(self):
        return sum(t.length for t in self.outputs)


class Slot:
    """A loaned request payload slot. buf is a memoryview of the shared mapping:
    write the frame into it (in place, no copy), then submit with its length."""

    __slots__ = ("index", "buf")

    def __init__(self, index, buf):
        self.index, self.buf = index, buf

    def array(self, dtype, shape, offset=0):
        """A NumPy view of the slot's bytes (NumPy optional): fill it in place."""
        np = _numpy()
        dt = np.dtype(dtype)
        count = 1
        for d in shape:
            count *= d
        return np.frombuffer(self.buf, dtype=dt, count=count, offset=offset).reshape(shape)


def _drop_view(slot):
    """Release a slot's view: vig owns the bytes now, and a write through a
    stale view would race its read. Using slot.buf afterwards fails clearly
    (ValueError: operation forbidden on released memoryview object)."""
    if slot.buf is not None:
        try:
            slot.buf.release()
        except BufferError:
            pass  # a NumPy view (slot.array) still exports it; it stays usable, and stale


def _drop_result_views(res):
    """Release a result's views (its payload and each output's data)."""
    for t in res.outputs:
        if t.data is not None:
            try:
                t.data.release()
            except BufferError:
                pass  # a NumPy view of it is alive
    if res.payload is not None:
        try:
            res.payload.release()
        except BufferError:
            pass


def _numpy():
    try:
        import numpy
    except ImportError:
        raise ImportError("vigring: NumPy is not installed: use the memoryview (slot.buf, tensor.data) "
                          "or install NumPy (apt-get install -y python3-numpy)") from None
    return numpy


def _utf8(b, what):
    try:
        return bytes(b).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(what + " is not UTF-8") from None


# --- the ring ----------------------------------------------------------------

class Ring:
    """A session with vig: one region, a request ring and a response ring.

    loan/submit must be called from one thread at a time, and next/release
    from one thread at a time; the two groups may run on different threads (a
    capture loop and a result loop). close must not race any other call."""

    def __init__(self, addr="@vig-ring", requests=(16, 4, 8 << 20), responses=(16, 8, 64 << 10),
                 backend=MEMFD, spin=0, timeout=2.0):
        if _SYS_FUTEX is None:
            raise Error("vigring: no futex syscall number (for the atomics) for %s (amd64 and arm64 are supported)" % platform.machine())
        self.layout = Layout(requests, responses)
        self.backend, self.spin = backend, spin
        self.key, self.sock, self.fd, self.mm, self._mv = "", None, -1, None, None
        self._bells, self._polls = [], [None, None]
        # Views handed out and not yet given back: close releases them, so a
        # stale one fails instead of reading a mapping that is going away.
        self._live_slots, self._live_results = {}, {}
        self.closed = True
        self._head = self._tail = self._tag = self._next_slot = 0
        self.outstanding, self.skipped = 0, 0
        self._count = threading.Lock()  # outstanding: changed by both thread groups
        self._loaned = bytearray(self.layout.rings[0].slots)
        self._held = bytearray(self.layout.rings[1].slots)
        self._window = [16e-6, 16e-6]
        rl = self.layout.rings[1]
        # vig answers without waiting, so a request may be in flight only while
        # its answer is sure to find a response descriptor and a payload slot.
        self.max_outstanding = min(rl.descriptors, rl.slots)
        try:
            self._create()
            self._handshake(addr or "@vig-ring", timeout)
        except BaseException:
            self.close()
            raise
        self.closed = False

    # -- setup

    def _create(self):
        lay = self.layout
        if self.backend == MEMFD:
            try:
                self.fd = os.memfd_create("vig-shmring", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
            except (AttributeError, OSError) as e:
                raise Error("vigring: memfd_create: %s (needs Linux 3.17; or use backend=SHM_KEY)" % e) from None
            os.ftruncate(self.fd, lay.region_size)
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, seals)
            got = fcntl.fcntl(self.fd, fcntl.F_GET_SEALS)
            if got & seals != seals:
                raise Error("vigring: memfd seals %#x, want %#x (vig refuses unsealed memfds)" % (got, seals))
        elif self.backend in (SHM, SHM_KEY):
            key = "/vig-ring-" + os.urandom(8).hex()
            path = "/dev/shm" + key
            try:
                self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except OSError as e:
                raise Error("vigring: creating %s: %s (no /dev/shm? use backend=MEMFD)" % (path, e)) from None
            if self.backend == SHM:
                os.unlink(path)  # unlinked at once: nothing to clean up
            else:
                self.key = key
            os.ftruncate(self.fd, lay.region_size)
        else:
            raise InvalidArgument("vigring: backend %r: want MEMFD, SHM or SHM_KEY" % (self.backend,))
        self.mm = mmap.mmap(self.fd, lay.region_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._mv = memoryview(self.mm)
        hdr = lay.header(1 if self.backend == MEMFD else 0)
        self._mv[:_HEADER] = hdr
        if bytes(self._mv[:_HEADER]) != hdr:
            raise Error("vigring: the region header does not read back as written")
        # Addresses of the shared words, for ctypes and the futex.
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        req, resp = lay.rings
        a = self._base
        u64 = lambda off: ctypes.c_uint64.from_address(a + off)
        u32 = lambda off: ctypes.c_uint32.from_address(a + off)
        self._req_head, self._req_tail = u64(req.ring_off + _HEAD), u64(req.ring_off + _TAIL)
        self._resp_head, self._resp_tail = u64(resp.ring_off + _HEAD), u64(resp.ring_off + _TAIL)
        self._req_states = (ctypes.c_uint32 * req.slots).from_address(a + req.ring_off + _STATES)
        self._resp_states = (ctypes.c_uint32 * resp.slots).from_address(a + resp.ring_off + _STATES)
        self._req_ready_waiters = u32(req.ring_off + _READY_WAITERS)
        self._req_space_waiters = u32(req.ring_off + _SPACE_WAITERS)
        self._resp_ready_waiters = u32(resp.ring_off + _READY_WAITERS)

    def _handshake(self, addr, timeout):
        name = "\0" + addr[1:] if addr.startswith("@") else addr
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(name)
        except OSError as e:
            raise Error('vigring: connecting to %s: %s (is vig serving with listen.ring: "%s"?)' % (addr, e, addr)) from None
        key = self.key.encode()
        hello = bytearray(128)
        struct.pack_into("<QIIQB", hello, 0, _HELLO_MAGIC, VERSION, self.backend, self.layout.region_size, len(key))
        hello[32:32 + len(key)] = key
        socket.send_fds(self.sock, [bytes(hello)], [self.fd])
        reply, fds, flags, _ = socket.recv_fds(self.sock, 257, 4)
        if len(reply) >= 16 and struct.unpack_from("<II", reply, 8) == (VERSION, 0) and len(fds) == 3 \
                and not flags & socket.MSG_CTRUNC:
            self._bells, fds = fds, []
        for fd in fds:
            os.close(fd)  # not an acceptance carrying three doorbells
        if len(reply) < 16 or len(reply) > 256 or struct.unpack_from("<Q", reply)[0] != _REPLY_MAGIC:
            raise Refused("vigring: %s answered the hello with %d bytes that are not a ring handshake reply" % (addr, len(reply)))
        version, status = struct.unpack_from("<II", reply, 8)
        if status != 0 or version != VERSION:
            names = ["ok", "bad hello", "version mismatch", "unsealed region", "bad region", "not allowed"]
            raise Refused("vigring: vig (ring ABI version %d, this client %d) refused the session (%s): %s" % (
                version, VERSION, names[status] if status < len(names) else "unknown status",
                reply[16:].decode("utf-8", "replace")))
        if len(self._bells) != 3:
            raise Refused("vigring: %s accepted the session without its three doorbells (eventfds): not a ring ABI version 3 vig" % addr)
        for fd in self._bells:
            os.set_blocking(fd, False)
        # One poll set per waiting thread group: its doorbell and the socket.
        for which, bell in ((0, _BELL_REQ_SPACE), (1, _BELL_RESP_READY)):
            p = select.poll()
            p.register(self._bells[bell], select.POLLIN)
            p.register(self.sock.fileno(), select.POLLIN)
            self._polls[which] = p
        # The socket stays open as the liveness signal; nothing more is read.
        self.sock.setblocking(False)

    # -- waiting

    def _alive(self):
        if self.closed:
            return False
        r, _, _ = select.select([self.sock], [], [], 0)
        if r:
            try:
                if self.sock.recv(64) == b"":
                    self.closed = True
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self.closed = True
        return not self.closed

    def _await(self, which, bell, waiters, cond, timeout, what):
        """Spin for an adaptive window (2-64 us, as vig's Go side), then
        announce the sleep in waiters and sleep in poll on the doorbell (an
        eventfd vig rings) and the session socket together. timeout: seconds
        (None: no limit); what names the wait in Timeout's message."""
        v = cond()
        if v is not None:
            return v
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        if self.spin != -1:
            i = 0
            while True:
                i += 1
                v = cond()
                if v is not None:
                    return v
                if self.spin > 0 and i >= self.spin:
                    break
                if self.spin == -2 and i % 64 == 0:
                    os.sched_yield()  # never sleeping: let a peer on this CPU run
                if i % 16 == 0:
                    now = time.monotonic()
                    if self.spin == 0 and now - start > self._window[which]:
                        break
                    if deadline is not None and now > deadline:
                        raise Timeout("vigring: no %s within %.3f s" % (what, timeout))
                    if i % 4096 == 0 and not self._alive():
                        raise Closed("vigring: vig closed the session")
        _add(ctypes.addressof(waiters), 1)
        fd, poller = self._bells[bell], self._polls[which]
        try:
            while True:
                v = cond()
                if v is not None:
                    break
                if self.closed:
                    raise Closed("vigring: vig closed the session")
                ms = None
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise Timeout("vigring: no %s within %.3f s" % (what, timeout))
                    ms = max(1, int(left * 1000 + 0.999))
                for f, ev in poller.poll(ms):
                    if f == fd:
                        try:
                            os.read(fd, 8)  # resets the doorbell
                        except BlockingIOError:
                            pass
                    else:
                        self._alive()  # vig hung up: closed is set
        finally:
            if not self.closed or self.mm is not None:
                _add(ctypes.addressof(waiters), -1)
        if self.spin == 0:
            waited = time.monotonic() - start
            w = self._window[which]
            self._window[which] = min(max(2 * waited, 2e-6), 64e-6) if waited <= 64e-6 else max(w / 2, 2e-6)
        return v

    def _wake(self, bell, waiters):
        """Ring vig's doorbell, only when vig has announced a sleeper."""
        _full_fence()  # the store just made must be visible before waiters is read
        if waiters.value:
            try:
                os.write(self._bells[bell], _ONE)
            except BlockingIOError:
                pass  # the counter is full: the bell is readable already

    # -- requests

    def _check_open(self):
        if self.closed or self.mm is None:
            raise Closed("vigring: the session is closed")

    def _try_loan(self):
        self._check_open()
        n = self.layout.rings[0].slots
        for k in range(n):
            i = (self._next_slot + k) % n
            # Free only if vig returned it (shared) and we do not hold it
            # (private): vig marking a loaned slot free cannot make us loan it twice.
            if self._loaned[i] or self._req_states[i]:
                continue
            self._req_states[i] = 1
            self._loaned[i] = 1
            self._next_slot = (i + 1) % n
            return i
        return None

    def loan(self, timeout=None):
        """Wait for a free request payload slot and return it (a Slot).
        timeout: seconds (None: no limit). Raises Busy at once when this process
        holds every request slot on loan (waiting would never end)."""
        self._check_open()
        if all(self._loaned):
            raise Busy("vigring: this process holds all %d request slots on loan: submit or unloan one before loaning another" % len(self._loaned))
        i = self._await(0, _BELL_REQ_SPACE, self._req_space_waiters, self._try_loan, timeout, "free request slot")
        r = self.layout.rings[0]
        off = r.arena_off + i * r.slot_size
        s = Slot(i, self._mv[off:off + r.slot_size])
        self._live_slots[i] = s
        return s

    def unloan(self, slot):
        """Give back a loaned slot that will not be submitted."""
        i = slot.index
        if self.mm is not None and 0 <= i < len(self._loaned) and self._loaned[i]:
            self._loaned[i] = 0
            self._req_states[i] = 0
            _drop_view(slot)
            self._live_slots.pop(i, None)

    def _space(self):
        self._check_open()
        r = self.layout.rings[0]
        t = self._req_tail.value
        if t > self._head or self._head - t > r.descriptors:
            self.closed = True
            raise Corrupt("vigring: vig's consumer counter %d with ours at %d (ring of %d): corrupt ring, session ended" % (
                t, self._head, r.descriptors))
        return True if self._head - t < r.descriptors else None

    def submit(self, slot, model, stream="", frame=0, capture_ns=0, length=None, tensors=()):
        """Post a request. slot: a loaned Slot, or None for no payload; length:
        the frame's bytes at the start of the slot (default: the whole slot);
        tensors: Tensor records over the payload (none: one UINT8 input).
        Returns the tag the result will carry."""
        self._check_open()
        if self.outstanding >= self.max_outstanding:
            raise Busy("vigring: %d requests await results (the response ring holds %d): call next() first" % (
                self.outstanding, self.max_outstanding))
        r = self.layout.rings[0]
        if slot is None:
            if length:
                raise InvalidArgument("vigring: submit(None, length=%r): a request without a slot has no payload; loan a slot for a frame" % (length,))
            idx, length = NO_SLOT, 0
        elif not isinstance(slot, Slot):
            raise InvalidArgument("vigring: submit's slot is a %s: want a Slot from loan() or None" % type(slot).__name__)
        else:
            idx = slot.index
            if not (0 <= idx < r.slots and self._loaned[idx]):
                raise InvalidArgument("vigring: payload slot %d is not loaned (already submitted or unloaned?): loan another" % idx)
            if length is None:
                length = r.slot_size
            if not isinstance(length, int) or not 0 <= length <= r.slot_size:
                raise InvalidArgument("vigring: frame length %d outside the %d-byte slot" % (length, r.slot_size))
        for v, what in ((model, "model"), (stream, "stream")):
            if not isinstance(v, str):
                raise InvalidArgument("vigring: %s is a %s: want a str" % (what, type(v).__name__))
        if not model:
            raise InvalidArgument("vigring: model is empty: name the model to run")
        for v, what in ((frame, "frame"), (capture_ns, "capture_ns")):
            if not isinstance(v, int) or not 0 <= v < 1 << 63:
                raise InvalidArgument("vigring: %s %r: want an int in [0, 2**63)" % (what, v))
        sb, mb = stream.encode(), model.encode()
        if len(sb) > MAX_STREAM:
            raise InvalidArgument("vigring: stream name %r is %d bytes, at most %d" % (stream, len(sb), MAX_STREAM))
        if len(mb) > MAX_MODEL:
            raise InvalidArgument("vigring: model name %r is %d bytes, at most %d" % (model, len(mb), MAX_MODEL))
        if len(tensors) > MAX_TENSORS:
            raise InvalidArgument("vigring: %d tensors, at most %d" % (len(tensors), MAX_TENSORS))
        d = bytearray(_DESC)
        _DHEAD.pack_into(d, 0, self._tag + 1, frame, capture_ns, idx, 0, 0, length, len(sb), len(mb), len(tensors), 0, 0)
        d[56:56 + len(sb)] = sb
        d[112:112 + len(mb)] = mb
        for k, t in enumerate(tensors):
            if not isinstance(t, Tensor) or not isinstance(t.name, str) or not isinstance(t.datatype, str):
                raise InvalidArgument("vigring: tensor %d is not a Tensor with str name and datatype" % k)
            nb, tb = t.name.encode(), t.datatype.encode()
            if len(nb) > MAX_NAME or len(tb) > MAX_DATATYPE or len(t.shape) > MAX_RANK:
                raise InvalidArgument("vigring: tensor %d: name ≤ %d bytes, datatype ≤ %d, rank ≤ %d" % (k, MAX_NAME, MAX_DATATYPE, MAX_RANK))
            if t.offset < 0 or t.length < 0 or t.offset + t.length > length:
                raise InvalidArgument("vigring: tensor %d bytes %d+%d outside the %d-byte frame" % (k, t.offset, t.length, length))
            if any(x < 0 for x in t.shape):
                raise InvalidArgument("vigring: tensor %d has a negative dimension %r" % (k, t.shape))
            o = _D_TENSORS + _T_SIZE * k
            _THEAD.pack_into(d, o, t.offset, t.length, len(nb), len(tb), len(t.shape))
            d[o + 24:o + 24 + len(tb)] = tb
            d[o + 32:o + 32 + len(nb)] = nb
            _SHAPE.pack_into(d, o + 128, *(tuple(t.shape) + (0,) * (MAX_RANK - len(t.shape))))
        self._await(0, _BELL_REQ_SPACE, self._req_space_waiters, self._space, None, "free request descriptor")
        off = r.desc_off + (self._head & (r.descriptors - 1)) * _DESC
        self._mv[off:off + _DESC] = d
        if idx != NO_SLOT:
            self._loaned[idx] = 0  # vig owns it until it answers
            _drop_view(slot)
            self._live_slots.pop(idx, None)
        self._head += 1
        self._tag += 1
        with self._count:
            self.outstanding += 1
        _order_fence()  # the descriptor before the head that publishes it
        self._req_head.value = self._head
        self._wake(_BELL_REQ_READY, self._req_ready_waiters)
        return self._tag

    # -- results

    def _decode(self, d):
        """Validate a private copy of a response descriptor (the checks of
        shmring's DecodeDescriptor and CheckPayload); ValueError if malformed."""
        r = self.layout.rings[1]
        (tag, frame, capture, slot, status, poff, plen, sl, ml, nt, gl, flags) = _DHEAD.unpack_from(d, 0)
        res = Result()
        res.tag, res.frame, res.capture_ns, res.status = tag, frame, capture, status
        res.slot, res.payload_off, res.payload_len = slot, poff, plen
        res.payload, res.outputs = None, []
        if sl > MAX_STREAM or ml > MAX_MODEL or nt > MAX_TENSORS or gl > MAX_MESSAGE:
            raise ValueError("field lengths %d/%d/%d/%d exceed their fields" % (sl, ml, nt, gl))
        if flags:
            raise ValueError("reserved flags %#x" % flags)
        if d[_D_RESERVED:] != _ZERO_RESERVED:
            raise ValueError("reserved bytes not zero")
        if slot == NO_SLOT:
            if poff or plen:
                raise ValueError("payload without a slot")
        elif slot >= r.slots:
            raise ValueError("payload slot %d of %d" % (slot, r.slots))
        elif poff > r.slot_size or plen > r.slot_size - poff:
            raise ValueError("payload %d+%d outside the %d-byte slot" % (poff, plen, r.slot_size))
        res.stream = _utf8(d[56:56 + sl], "stream")
        res.model = _utf8(d[112:112 + ml], "model")
        res.message = _utf8(d[176:176 + gl], "message")
        base = r.arena_off + slot * r.slot_size + poff if slot != NO_SLOT else 0
        tensors = []
        for k in range(nt):
            o = _D_TENSORS + _T_SIZE * k
            toff, tlen, nl, tl, rank = _THEAD.unpack_from(d, o)
            if nl > MAX_NAME or tl > MAX_DATATYPE or rank > MAX_RANK:
                raise ValueError("tensor %d field lengths exceed their fields" % k)
            if toff > plen or tlen > plen - toff:
                raise ValueError("tensor %d bytes %d+%d outside the %d-byte payload" % (k, toff, tlen, plen))
            if any(d[o + 19:o + 24]):
                raise ValueError("tensor %d reserved bytes not zero" % k)
            shape = _SHAPE.unpack_from(d, o + 128)[:rank]
            if any(x < 0 for x in shape):
                raise ValueError("tensor %d has a negative dimension" % k)
            tensors.append(Tensor(_utf8(d[o + 32:o + 32 + nl], "tensor name"), _utf8(d[o + 24:o + 24 + tl], "datatype"),
                                  shape, toff, tlen))
        if slot != NO_SLOT:
            if self._held[slot]:
                raise ValueError("payload slot %d is already held" % slot)
            self._held[slot] = 1
            res.payload = self._mv[base:base + plen]
            for t in tensors:
                t.data = res.payload[t.offset:t.offset + t.length]
            self._live_results[slot] = res
        else:
            for t in tensors:
                t.data = memoryview(b"")
        res.outputs = tensors
        return res

    def _try_next(self):
        self._check_open()
        r = self.layout.rings[1]
        while True:
            h = self._resp_head.value
            if h == self._tail:
                return None
            if h - self._tail > r.descriptors or h < self._tail:
                self.closed = True
                raise Corrupt("vigring: vig's producer counter %d with ours at %d (ring of %d): corrupt ring, session ended" % (
                    h, self._tail, r.descriptors))
            _order_fence()  # the head before the descriptor it published
            off = r.desc_off + (self._tail & (r.descriptors - 1)) * _DESC
            d = bytes(self._mv[off:off + _DESC])  # copy out: the shared bytes may change
            self._tail += 1
            self._resp_tail.value = self._tail  # vig never waits for room here: no doorbell
            with self._count:
                if self.outstanding:
                    self.outstanding -= 1
            try:
                return self._decode(d)
            except ValueError:
                # A malformed answer still answered something: skip it (returning
                # a slot it named that we do not hold) rather than wedge the loop.
                self.skipped += 1
                slot = struct.unpack_from("<I", d, 24)[0]
                if slot < r.slots and not self._held[slot]:
                    self._resp_states[slot] = 0

    def next(self, timeout=None):
        """Wait for the next result (any tag; vig answers superseded frames
        early, so results may come out of order). timeout: seconds (None: no
        limit). Without a timeout and with no request awaiting a result it
        raises InvalidArgument at once (it would wait forever)."""
        self._check_open()
        if timeout is None and self.outstanding == 0:
            raise InvalidArgument("vigring: next() without a timeout while no request awaits a result would wait forever: submit first (or pass a timeout)")
        return self._await(1, _BELL_RESP_READY, self._resp_ready_waiters, self._try_next, timeout, "result")

    def release(self, res):
        """Hand a result's payload slot back to vig; its outputs' data views
        must not be used afterwards. Releasing twice is a no-op."""
        s, res.slot = res.slot, NO_SLOT
        if self._live_results.get(s) is res:
            del self._live_results[s]
        if res.payload is not None:
            res.payload.release()
            res.payload = None
        for t in res.outputs:
            if t.data is not None:
                t.data.release()
                t.data = None
        if self.mm is None or not (0 <= s < len(self._held)) or not self._held[s]:
            return
        self._held[s] = 0
        _order_fence()  # our reads of the payload before the slot is vig's again
        self._resp_states[s] = 0  # vig never waits for it: no doorbell

    # -- end

    def close(self):
        """End the session: close the socket, unmap the region, unlink a key."""
        self.closed = True
        self._polls = [None, None]
        for fd in self._bells:
            os.close(fd)
        self._bells = []
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.key:
            try:
                os.unlink("/dev/shm" + self.key)
            except OSError:
                pass  # already gone
            self.key = ""
        for slot in list(self._live_slots.values()):
            _drop_view(slot)
        for res in list(self._live_results.values()):
            _drop_result_views(res)
        self._live_slots, self._live_results = {}, {}
        if self.mm is not None:
            # ctypes views keep exports of the mapping alive; drop them first.
            for k in ("_req_head", "_req_tail", "_resp_head", "_resp_tail", "_req_states", "_resp_states",
                      "_req_ready_waiters", "_req_space_waiters", "_resp_ready_waiters"):
                setattr(self, k, None)
            try:
                self._mv.release()
            except BufferError:
                pass  # a Slot or Result view is still alive
            self._mv = None
            try:
                self.mm.close()
            except BufferError:
                pass  # a Slot or Result view is still alive; the mapping goes with it
            self.mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def connect(addr="@vig-ring", **kw):
    """Create a region, hand it to vig at addr ("@name" or a socket path) and
    return the Ring. Keywords: requests/responses = (descriptors, slots,
    slot_size), backend = MEMFD | SHM | SHM_KEY, spin (0 adaptive, -1 never,
    -2 forever), timeout (handshake, seconds)."""
    return Ring(addr, **kw)
