/*
 * vigring.h: the sensor side of vig's shared-memory ring (ring ABI version 3),
 * in one header. C99 with GCC/Clang __atomic builtins; libc and Linux headers only.
 *
 * The byte layout, the handshake and the wait protocol are specified in
 * shmring/doc.go; this file follows it field for field. vig is the peer and is
 * trusted no more than vig trusts us: every index, offset and length read from
 * the shared mapping is bounds-checked, and descriptors are copied out before
 * they are decoded.
 *
 * In exactly one translation unit, before any other #include:
 *
 *     #define _GNU_SOURCE
 *     #define VIGRING_IMPLEMENTATION
 *     #include "vigring.h"
 *
 * Use (error handling elided; every call returns 0 or a negative VIGRING_E*
 * code, with the reason and the fix in vigring_error(r)):
 *
 *     vigring r;
 *     vigring_connect(&r, "@vig-ring", NULL);        // memfd region, sealed
 *     uint8_t *buf; uint32_t slot;
 *     vigring_loan(&r, &slot, &buf, -1);             // a frame buffer in shared memory
 *     size_t n = capture(buf, vigring_slot_size(&r)); // write the frame once, in place
 *     vigring_request q = {.stream = "cam", .model = "det", .frame = seq,
 *                          .capture_ns = vigring_now_ns(), .len = n};
 *     vigring_submit(&r, slot, &q, NULL);
 *     vigring_result res;
 *     vigring_next(&r, &res, -1);                    // spins briefly, then sleeps in poll
 *     for (int i = 0; i < res.ntensors; i++) {
 *         uint64_t len; const uint8_t *p = vigring_output(&r, &res, i, &len);
 *         // res.tensors[i].name, .datatype, .rank, .shape[]
 *     }
 *     vigring_release(&r, &res);                     // the result's slot goes back
 *     vigring_close(&r);
 *
 * Loan/submit must be called from one thread at a time, and next from one thread
 * at a time; the two groups may run on different threads (what they share is
 * atomic). release may be called from the thread that calls next. close must not
 * race any other call. vigring_error is the text of the last failure in either
 * group; a call that succeeds clears its group's text (so it is empty after a
 * success when the other group has not failed since).
 *
 * Timeouts are milliseconds in every signature (timeout_ms; -1: no limit); a
 * timeout's message says what was waited for. Calls that could never succeed
 * fail at once instead of waiting: vigring_loan while this process holds every
 * request slot on loan (VIGRING_EBUSY), vigring_next(-1) while no request
 * awaits a result (VIGRING_EINVAL; a result thread started before the first
 * submit passes a finite timeout). A failed submit keeps the loan (submit or
 * unloan the slot). A non-OK result has no payload; releasing it is harmless.
 * The default address (addr NULL or "") is VIGRING_DEFAULT_ADDRESS, "@vig-ring".
 */
#ifndef VIGRING_H
#define VIGRING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI constants (shmring/doc.go). */
#define VIGRING_VERSION 3u
#define VIGRING_DEFAULT_ADDRESS "@vig-ring" /* vigring_connect's address when NULL or "" (vig's too) */
#define VIGRING_MAX_SLOTS 1024u
#define VIGRING_MAX_DESCRIPTORS 4096u
#define VIGRING_MAX_STREAM 56
#define VIGRING_MAX_MODEL 64
#define VIGRING_MAX_MESSAGE 80
#define VIGRING_MAX_TENSORS 16
#define VIGRING_MAX_NAME 96
#define VIGRING_MAX_DATATYPE 8
#define VIGRING_MAX_RANK 8
#define VIGRING_MAX_KEY 96
#define VIGRING_NO_SLOT 0xffffffffu

/* Result codes (negative; 0 is success). */
#define VIGRING_ECLOSED (-1)   /* the session ended: vig went away, or close */
#define VIGRING_ECORRUPT (-2)  /* vig's side wrote impossible counters */
#define VIGRING_ETIMEOUT (-3)  /* the wait's timeout passed */
#define VIGRING_EINVAL (-4)    /* a bad argument (the message says which) */
#define VIGRING_EBUSY (-5)     /* too many requests awaiting results: call next first */
#define VIGRING_ESYS (-6)      /* a system call failed (errno in the message) */
#define VIGRING_EREFUSED (-7)  /* vig refused the handshake (its reason in the message) */

/* Status codes of results (the gRPC codes of the same number). */
#define VIGRING_OK 0u
#define VIGRING_INVALID_ARGUMENT 3u
#define VIGRING_DEADLINE_EXCEEDED 4u
#define VIGRING_NOT_FOUND 5u
#define VIGRING_RESOURCE_EXHAUSTED 8u
#define VIGRING_ABORTED 10u
#define VIGRING_UNIMPLEMENTED 12u
#define VIGRING_INTERNAL 13u
#define VIGRING_UNAVAILABLE 14u

/* What backs the region (the hello's kind). */
enum vigring_backend {
	VIGRING_MEMFD = 1,   /* sealed memfd: works everywhere, Android included */
	VIGRING_SHM = 2,     /* unlinked /dev/shm file (vig must allow unsealed regions) */
	VIGRING_SHM_KEY = 3  /* /dev/shm file linked under a key: vig may hand frames to
	                        a Triton backend by reference */
};

typedef struct vigring_ring_config {
	uint32_t descriptors; /* a power of two in [2, 4096] */
	uint32_t slots;       /* [1, 1024] */
	uint64_t slot_size;   /* bytes; rounded up to a multiple of 4096, at most 1 GiB */
} vigring_ring_config;

typedef struct vigring_config {
	vigring_ring_config requests, responses;
	enum vigring_backend backend; /* 0: VIGRING_MEMFD */
	int spin;                     /* 0 adaptive (2-64 us, as vig's Go side), -1 never, -2 forever */
	int handshake_timeout_ms;     /* 0: 2000 */
} vigring_config;

/* shmring.DefaultConfig: frames up to 8 MiB, four in flight; results up to 64 KiB. */
#define VIGRING_DEFAULT_CONFIG {{16, 4, 8u << 20}, {16, 8, 64u << 10}, VIGRING_MEMFD, 0, 0}

typedef struct vigring_ring_layout {
	uint32_t descriptors, slots;
	uint64_t slot_size, ring_off, desc_off, arena_off;
} vigring_ring_layout;

typedef struct vigring_layout {
	uint64_t region_size;
	vigring_ring_layout rings[2]; /* 0: requests, 1: responses */
} vigring_layout;

typedef struct vigring_tensor {
	uint64_t offset; /* inside the payload */
	uint64_t length;
	char name[VIGRING_MAX_NAME + 1];         /* NUL-terminated copies */
	char datatype[VIGRING_MAX_DATATYPE + 1]; /* Triton datatype: "UINT8", "FP32", ... */
	uint32_t rank;
	int64_t shape[VIGRING_MAX_RANK];
} vigring_tensor;

typedef struct vigring_request {
	const char *stream; /* NULL or "": the model's name */
	const char *model;
	uint64_t frame;
	int64_t capture_ns; /* CLOCK_MONOTONIC (vigring_now_ns); 0: none */
	uint64_t len;       /* bytes written at the start of the loaned slot */
	int ntensors;       /* 0: one UINT8 input "INPUT0" over the whole payload */
	vigring_tensor tensors[VIGRING_MAX_TENSORS];
} vigring_request;

typedef struct vigring_result {
	uint64_t tag, frame;
	int64_t capture_ns;
	uint32_t status; /* VIGRING_OK, VIGRING_ABORTED, ... */
	uint32_t slot;   /* VIGRING_NO_SLOT without a payload */
	uint64_t payload_off, payload_len;
	const uint8_t *payload; /* in place in shared memory, valid until release */
	char stream[VIGRING_MAX_STREAM + 1];
	char model[VIGRING_MAX_MODEL + 1];
	char message[VIGRING_MAX_MESSAGE + 1]; /* why, for a non-OK status */
	int ntensors;
	vigring_tensor tensors[VIGRING_MAX_TENSORS];
} vigring_result;

typedef struct vigring {
	int sock, fd;
	/* The doorbells vig handed over (eventfds): request ready (we ring it),
	 * request space and response ready (vig rings them, we wait). */
	int bell[3];
	uint8_t *mem;
	vigring_layout lay;
	enum vigring_backend backend;
	char key[VIGRING_MAX_KEY + 1]; /* VIGRING_SHM_KEY: unlinked at close */
	/* Private state: the authoritative counters and slot ownership. vig cannot
	 * change them by scribbling the shared copies. */
	uint64_t req_head, resp_tail, next_tag;
	uint32_t next_slot;
	int outstanding, closed; /* shared by both thread groups: __atomic only */
	int max_outstanding, spin;
	int64_t window_ns[2]; /* adaptive spin windows: loan, next */
	uint64_t skipped;     /* malformed results skipped */
	uint8_t loaned[VIGRING_MAX_SLOTS];
	uint8_t held[VIGRING_MAX_SLOTS];
	uint8_t desc_out[4096]; /* the request being encoded (loan/submit's) */
	uint8_t desc_in[4096];  /* private copy of the response being decoded (next's) */
	char err[320];      /* the last failure of connect/loan/submit/unloan/close */
	char err_next[320]; /* the last failure of next (the other thread group) */
	int err_last;       /* which of the two vigring_error shows: __atomic only */
} vigring;

int vigring_compute_layout(const vigring_config *cfg, vigring_layout *out, char *err, size_t errlen);
int vigring_connect(vigring *r, const char *addr, const vigring_config *cfg);
int vigring_loan(vigring *r, uint32_t *slot, uint8_t **buf, int timeout_ms);
void vigring_unloan(vigring *r, uint32_t slot);
int vigring_submit(vigring *r, uint32_t slot, const vigring_request *q, uint64_t *tag);
int vigring_next(vigring *r, vigring_result *res, int timeout_ms);
const uint8_t *vigring_output(const vigring *r, const vigring_result *res, int i, uint64_t *len);
void vigring_release(vigring *r, vigring_result *res);
void vigring_close(vigring *r);
uint64_t vigring_slot_size(const vigring *r);
/* Requests submitted and not yet answered; submit refuses more than
 * max_outstanding (min of the response ring's descriptors and slots). */
int vigring_outstanding(const vigring *r);
const char *vigring_error(const vigring *r);
const char *vigring_status_name(uint32_t status);
int64_t vigring_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* VIGRING_H */

#ifdef VIGRING_IMPLEMENTATION
#ifndef VIGRING_IMPLEMENTATION_DONE
#define VIGRING_IMPLEMENTATION_DONE

#if !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE)
#error "vigring.h: #define _GNU_SOURCE before the first #include of the file that defines VIGRING_IMPLEMENTATION (-std=c99 hides syscall, ftruncate, SOCK_CLOEXEC)"
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001u
#define MFD_ALLOW_SEALING 0x0002u
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "vig's ring is little endian (amd64, arm64)"
#endif

/* Offsets of shmring/doc.go. */
enum {
	VR_HEADER = 4096, VR_DESC = 4096, VR_LINE = 128, VR_PAGE = 4096,
	VR_HEAD = 0, VR_TAIL = 128, VR_READY_WAITERS = 260, VR_SPACE_WAITERS = 388, VR_STATES = 512,
	VR_BELL_REQ_READY = 0, VR_BELL_REQ_SPACE = 1, VR_BELL_RESP_READY = 2,
	D_TAG = 0, D_FRAME = 8, D_CAPTURE = 16, D_SLOT = 24, D_STATUS = 28, D_POFF = 32,
	D_PLEN = 40, D_STREAMLEN = 48, D_MODELLEN = 49, D_NTENSORS = 50, D_MSGLEN = 51,
	D_FLAGS = 52, D_STREAM = 56, D_MODEL = 112, D_MESSAGE = 176, D_TENSORS = 256,
	D_RESERVED = 3328, T_SIZE = 192,
	T_OFF = 0, T_LEN = 8, T_NAMELEN = 16, T_TYPELEN = 17, T_RANK = 18, T_RESERVED = 19,
	T_TYPE = 24, T_NAME = 32, T_SHAPE = 128
};
#define VR_MAGIC 0x31474e4952474956ull       /* "VIGRING1" */
#define VR_HELLO_MAGIC 0x4f4c4c4548474956ull /* "VIGHELLO" */
#define VR_REPLY_MAGIC 0x5945524748474956ull /* "VIGHGREY" */
#define VR_MAX_SLOT_SIZE (1ull << 30)

/* Each thread group writes only its own error text (vr_group says which the
 * calling thread is in: set by the public calls), so that the two groups never
 * write the same bytes; vigring_error shows the last one written, and a call's
 * success clears its group's text. */
static __thread int vr_group;

static int vr_fail(vigring *r, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(vr_group ? r->err_next : r->err, sizeof r->err, fmt, ap);
	va_end(ap);
	__atomic_store_n(&r->err_last, vr_group, __ATOMIC_SEQ_CST);
	return code;
}

/* vr_ok clears the calling group's error text after a success. */
static void vr_ok(vigring *r)
{
	(vr_group ? r->err_next : r->err)[0] = 0;
}

/* Little-endian accessors on private bytes. */
static uint64_t vr_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t vr_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static void vr_put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void vr_put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* Shared words. Every access is sequentially consistent, as the doc requires:
 * that is what makes "skip the wake when waiters is zero" free of lost wake-ups. */
static uint64_t *vr_w64(const vigring *r, uint64_t off) { return (uint64_t *)(void *)(r->mem + off); }
static uint32_t *vr_w32(const vigring *r, uint64_t off) { return (uint32_t *)(void *)(r->mem + off); }
#define VR_LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define VR_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define VR_ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)

int64_t vigring_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t vigring_slot_size(const vigring *r) { return r->lay.rings[0].slot_size; }
int vigring_outstanding(const vigring *r) { return __atomic_load_n(&r->outstanding, __ATOMIC_SEQ_CST); }
const char *vigring_error(const vigring *r) { return __atomic_load_n(&r->err_last, __ATOMIC_SEQ_CST) ? r->err_next : r->err; }

const char *vigring_status_name(uint32_t s)
{
	switch (s) {
	case 0: return "OK";
	case 1: return "CANCELLED";
	case 2: return "UNKNOWN";
	case 3: return "INVALID_ARGUMENT";
	case 4: return "DEADLINE_EXCEEDED";
	case 5: return "NOT_FOUND";
	case 6: return "ALREADY_EXISTS";
	case 7: return "PERMISSION_DENIED";
	case 8: return "RESOURCE_EXHAUSTED";
	case 9: return "FAILED_PRECONDITION";
	case 10: return "ABORTED";
	case 11: return "OUT_OF_RANGE";
	case 12: return "UNIMPLEMENTED";
	case 13: return "INTERNAL";
	case 14: return "UNAVAILABLE";
	case 15: return "DATA_LOSS";
	case 16: return "UNAUTHENTICATED";
	}
	return "STATUS_UNKNOWN_CODE";
}

static uint64_t vr_align(uint64_t n, uint64_t a) { return (n + a - 1) & ~(a - 1); }

int vigring_compute_layout(const vigring_config *cfg, vigring_layout *out, char *err, size_t errlen)
{
	const vigring_ring_config *rc[2] = {&cfg->requests, &cfg->responses};
	uint64_t off = VR_HEADER;
	int i;
	memset(out, 0, sizeof *out);
	for (i = 0; i < 2; i++) {
		uint32_t d = rc[i]->descriptors, s = rc[i]->slots;
		uint64_t ss = rc[i]->slot_size;
		if (d < 2 || d > VIGRING_MAX_DESCRIPTORS || (d & (d - 1)) != 0) {
			snprintf(err, errlen, "ring %d: descriptor count %u: want a power of two in [2, %u]", i, d, VIGRING_MAX_DESCRIPTORS);
			return VIGRING_EINVAL;
		}
		if (s < 1 || s > VIGRING_MAX_SLOTS) {
			snprintf(err, errlen, "ring %d: slot count %u: want [1, %u]", i, s, VIGRING_MAX_SLOTS);
			return VIGRING_EINVAL;
		}
		if (ss == 0 || ss > VR_MAX_SLOT_SIZE) {
			snprintf(err, errlen, "ring %d: slot size %llu: want 1 byte to 1 GiB", i, (unsigned long long)ss);
			return VIGRING_EINVAL;
		}
		out->rings[i].descriptors = d;
		out->rings[i].slots = s;
		out->rings[i].slot_size = vr_align(ss, VR_PAGE);
		out->rings[i].ring_off = off;
		out->rings[i].desc_off = off + VR_STATES + vr_align(4ull * s, VR_LINE);
		off = vr_align(out->rings[i].desc_off + (uint64_t)d * VR_DESC, VR_PAGE);
	}
	for (i = 0; i < 2; i++) {
		out->rings[i].arena_off = off;
		off += (uint64_t)out->rings[i].slots * out->rings[i].slot_size;
	}
	out->region_size = off;
	return 0;
}

static void vr_encode_header(uint8_t *b, const vigring_layout *l, uint32_t flags)
{
	int i;
	memset(b, 0, VR_HEADER);
	vr_put64(b + 0, VR_MAGIC);
	vr_put32(b + 8, VIGRING_VERSION);
	vr_put32(b + 12, flags);
	vr_put64(b + 16, l->region_size);
	vr_put32(b + 24, VR_HEADER);
	vr_put32(b + 28, VR_DESC);
	for (i = 0; i < 2; i++) {
		uint8_t *e = b + 32 + 32 * i;
		vr_put32(e + 0, l->rings[i].descriptors);
		vr_put32(e + 4, l->rings[i].slots);
		vr_put64(e + 8, l->rings[i].slot_size);
		vr_put64(e + 16, l->rings[i].ring_off);
		vr_put64(e + 24, l->rings[i].arena_off);
	}
}

/* vr_check_header re-reads the mapped header (a private copy) and checks it
 * against the layout we computed, as vig will. */
static int vr_check_header(vigring *r)
{
	uint8_t h[VR_HEADER];
	int i;
	memcpy(h, r->mem, VR_HEADER);
	if (vr_u64(h) != VR_MAGIC || vr_u32(h + 8) != VIGRING_VERSION || vr_u64(h + 16) != r->lay.region_size ||
	    vr_u32(h + 24) != VR_HEADER || vr_u32(h + 28) != VR_DESC)
		return vr_fail(r, VIGRING_EINVAL, "vigring: the region header does not read back as written");
	for (i = 0; i < 2; i++) {
		const uint8_t *e = h + 32 + 32 * i;
		const vigring_ring_layout *l = &r->lay.rings[i];
		if (vr_u32(e) != l->descriptors || vr_u32(e + 4) != l->slots || vr_u64(e + 8) != l->slot_size ||
		    vr_u64(e + 16) != l->ring_off || vr_u64(e + 24) != l->arena_off)
			return vr_fail(r, VIGRING_EINVAL, "vigring: ring %d of the region header does not read back as written", i);
	}
	return 0;
}

static int vr_create_region(vigring *r)
{
	unsigned int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	if (r->backend == VIGRING_MEMFD) {
		int got;
		r->fd = (int)syscall(SYS_memfd_create, "vig-shmring", MFD_ALLOW_SEALING | MFD_CLOEXEC);
		if (r->fd < 0)
			return vr_fail(r, VIGRING_ESYS, "vigring: memfd_create: %s (needs Linux 3.17; or use VIGRING_SHM_KEY)", strerror(errno));
		if (ftruncate(r->fd, (off_t)r->lay.region_size) != 0)
			return vr_fail(r, VIGRING_ESYS, "vigring: sizing the region to %llu bytes: %s", (unsigned long long)r->lay.region_size, strerror(errno));
		if (fcntl(r->fd, F_ADD_SEALS, seals) != 0)
			return vr_fail(r, VIGRING_ESYS, "vigring: sealing the memfd: %s", strerror(errno));
		got = fcntl(r->fd, F_GET_SEALS);
		if (got < 0 || ((unsigned int)got & seals) != seals)
			return vr_fail(r, VIGRING_ESYS, "vigring: memfd seals %#x, want %#x (vig refuses unsealed memfds)", got, seals);
	} else {
		uint8_t rnd[8];
		char path[128];
		int i;
		FILE *f = fopen("/dev/urandom", "rb");
		if (f == NULL || fread(rnd, 1, sizeof rnd, f) != sizeof rnd) {
			if (f)
				fclose(f);
			return vr_fail(r, VIGRING_ESYS, "vigring: reading /dev/urandom for a /dev/shm key: %s", strerror(errno));
		}
		fclose(f);
		strcpy(r->key, "/vig-ring-");
		for (i = 0; i < 8; i++)
			sprintf(r->key + 10 + 2 * i, "%02x", rnd[i]);
		snprintf(path, sizeof path, "/dev/shm%s", r->key);
		r->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (r->fd < 0) {
			r->key[0] = 0;
			return vr_fail(r, VIGRING_ESYS, "vigring: creating %s: %s (no /dev/shm? use VIGRING_MEMFD)", path, strerror(errno));
		}
		if (r->backend == VIGRING_SHM) { /* unlinked at once: nothing to clean up */
			unlink(path);
			r->key[0] = 0;
		}
		if (ftruncate(r->fd, (off_t)r->lay.region_size) != 0)
			return vr_fail(r, VIGRING_ESYS, "vigring: sizing the region to %llu bytes: %s", (unsigned long long)r->lay.region_size, strerror(errno));
	}
	r->mem = (uint8_t *)mmap(NULL, (size_t)r->lay.region_size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	if (r->mem == MAP_FAILED) {
		r->mem = NULL;
		return vr_fail(r, VIGRING_ESYS, "vigring: mapping %llu bytes: %s", (unsigned long long)r->lay.region_size, strerror(errno));
	}
	vr_encode_header(r->mem, &r->lay, r->backend == VIGRING_MEMFD ? 1u : 0u);
	return vr_check_header(r);
}

static int vr_handshake(vigring *r, const char *addr, int timeout_ms)
{
	struct sockaddr_un sa;
	socklen_t salen;
	size_t n = strlen(addr);
	uint8_t hello[128], reply[257];
	struct iovec iov;
	struct msghdr mh;
	union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } cm;
	union { struct cmsghdr h; char buf[CMSG_SPACE(4 * sizeof(int))]; } cm_in;
	struct cmsghdr *c;
	int fds[4], nfds = 0, i;
	struct timeval tv;
	ssize_t got;
	uint32_t version, status;
	size_t keylen = strlen(r->key);

	if (n == 0 || n >= sizeof sa.sun_path)
		return vr_fail(r, VIGRING_EINVAL, "vigring: address %s: want \"@name\" (abstract) or a socket path shorter than %zu bytes", addr, sizeof sa.sun_path);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, addr, n);
	if (addr[0] == '@')
		sa.sun_path[0] = 0; /* abstract namespace; the name is not NUL-terminated */
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (addr[0] == '@' ? 0 : 1));
	r->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (r->sock < 0)
		return vr_fail(r, VIGRING_ESYS, "vigring: socket: %s", strerror(errno));
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	setsockopt(r->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(r->sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (connect(r->sock, (struct sockaddr *)&sa, salen) != 0)
		return vr_fail(r, VIGRING_ESYS, "vigring: connecting to %s: %s (is vig serving with listen.ring: \"%s\"?)", addr, strerror(errno), addr);

	memset(hello, 0, sizeof hello);
	vr_put64(hello + 0, VR_HELLO_MAGIC);
	vr_put32(hello + 8, VIGRING_VERSION);
	vr_put32(hello + 12, (uint32_t)r->backend);
	vr_put64(hello + 16, r->lay.region_size);
	hello[24] = (uint8_t)keylen;
	memcpy(hello + 32, r->key, keylen);
	iov.iov_base = hello;
	iov.iov_len = sizeof hello;
	memset(&mh, 0, sizeof mh);
	memset(&cm, 0, sizeof cm);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cm.buf;
	mh.msg_controllen = sizeof cm.buf;
	CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
	CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
	CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), &r->fd, sizeof(int));
	if (sendmsg(r->sock, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof hello)
		return vr_fail(r, VIGRING_ESYS, "vigring: hello to %s: %s", addr, strerror(errno));

	iov.iov_base = reply;
	iov.iov_len = sizeof reply;
	memset(&mh, 0, sizeof mh);
	memset(&cm_in, 0, sizeof cm_in);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cm_in.buf;
	mh.msg_controllen = sizeof cm_in.buf;
	got = recvmsg(r->sock, &mh, MSG_CMSG_CLOEXEC);
	if (got < 0)
		return vr_fail(r, VIGRING_ESYS, "vigring: handshake reply from %s: %s", addr, strerror(errno));
	for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
		size_t k, nk;
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		nk = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < nk && nfds < 4; k++)
			memcpy(&fds[nfds++], CMSG_DATA(c) + k * sizeof(int), sizeof(int));
	}
	/* The doorbells are ours to close whatever the answer; kept only when it
	 * is an acceptance carrying exactly three. */
	if (nfds == 3 && got >= 16 && vr_u32(reply + 12) == 0 && vr_u32(reply + 8) == VIGRING_VERSION && !(mh.msg_flags & MSG_CTRUNC)) {
		for (i = 0; i < 3; i++)
			r->bell[i] = fds[i];
		nfds = 0;
	}
	for (i = 0; i < nfds; i++)
		close(fds[i]);
	if (got < 16 || got > 256 || vr_u64(reply) != VR_REPLY_MAGIC)
		return vr_fail(r, VIGRING_EREFUSED, "vigring: %s answered the hello with %zd bytes that are not a ring handshake reply", addr, got);
	version = vr_u32(reply + 8);
	status = vr_u32(reply + 12);
	if (status != 0 || version != VIGRING_VERSION) {
		static const char *const names[] = {"ok", "bad hello", "version mismatch", "unsealed region", "bad region", "not allowed"};
		return vr_fail(r, VIGRING_EREFUSED, "vigring: vig (ring ABI version %u, this client %u) refused the session (%s): %.*s",
		               version, VIGRING_VERSION, status < 6 ? names[status] : "unknown status", (int)(got - 16), (const char *)reply + 16);
	}
	if (r->bell[2] < 0)
		return vr_fail(r, VIGRING_EREFUSED, "vigring: %s accepted the session without its three doorbells (eventfds): not a ring ABI version 3 vig", addr);
	/* The socket stays open as the liveness signal; nothing more is read. */
	tv.tv_sec = 0;
	tv.tv_usec = 0;
	setsockopt(r->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return 0;
}

int vigring_connect(vigring *r, const char *addr, const vigring_config *cfg)
{
	static const vigring_config def = VIGRING_DEFAULT_CONFIG;
	vigring_config c;
	int rc;
	const vigring_ring_layout *rl;
	vr_group = 0;

	memset(r, 0, sizeof *r);
	r->sock = r->fd = -1;
	r->bell[0] = r->bell[1] = r->bell[2] = -1;
	VR_STORE(&r->closed, 1);
	c = cfg ? *cfg : def;
	if (c.backend == 0)
		c.backend = VIGRING_MEMFD;
	if (c.backend != VIGRING_MEMFD && c.backend != VIGRING_SHM && c.backend != VIGRING_SHM_KEY)
		return vr_fail(r, VIGRING_EINVAL, "vigring: backend %d: want VIGRING_MEMFD, VIGRING_SHM or VIGRING_SHM_KEY", (int)c.backend);
	if (addr == NULL || addr[0] == 0)
		addr = VIGRING_DEFAULT_ADDRESS;
	r->backend = c.backend;
	r->spin = c.spin;
	if ((rc = vigring_compute_layout(&c, &r->lay, r->err, sizeof r->err)) != 0)
		return rc;
	rc = vr_create_region(r);
	if (rc == 0)
		rc = vr_handshake(r, addr, c.handshake_timeout_ms > 0 ? c.handshake_timeout_ms : 2000);
	if (rc != 0) {
		char keep[sizeof r->err];
		memcpy(keep, r->err, sizeof keep);
		VR_STORE(&r->closed, 0);
		vigring_close(r);
		memcpy(r->err, keep, sizeof keep);
		return rc;
	}
	rl = &r->lay.rings[1];
	/* vig answers without waiting, so a request may be in flight only while its
	 * answer is sure to find a response descriptor and a payload slot. */
	r->max_outstanding = (int)(rl->descriptors < rl->slots ? rl->descriptors : rl->slots);
	VR_STORE(&r->closed, 0);
	vr_ok(r);
	return 0;
}

void vigring_close(vigring *r)
{
	int i;
	if (r->mem) {
		munmap(r->mem, (size_t)r->lay.region_size);
		r->mem = NULL;
	}
	if (r->key[0]) {
		char path[128];
		snprintf(path, sizeof path, "/dev/shm%s", r->key);
		unlink(path);
		r->key[0] = 0;
	}
	if (r->sock >= 0)
		close(r->sock);
	if (r->fd >= 0)
		close(r->fd);
	for (i = 0; i < 3; i++) {
		if (r->bell[i] >= 0)
			close(r->bell[i]);
		r->bell[i] = -1;
	}
	r->sock = r->fd = -1;
	VR_STORE(&r->closed, 1);
}

/* vr_alive polls the socket: vig closing it (or dying) ends the session. */
static int vr_alive(vigring *r)
{
	struct pollfd p;
	if (VR_LOAD(&r->closed))
		return 0;
	p.fd = r->sock;
	p.events = POLLIN;
	p.revents = 0;
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
		char b[64];
		ssize_t n = recv(r->sock, b, sizeof b, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			VR_STORE(&r->closed, 1);
			return 0;
		}
		/* vig sends nothing after the handshake; extra bytes are ignored. */
	}
	return 1;
}

/* vr_wake rings a doorbell of vig's, only when vig has announced a sleeper.
 * The counter was published first; both are seq_cst, so either vig's re-check
 * sees the counter or we see its waiters word. */
static void vr_wake(vigring *r, int bell, uint32_t *waiters)
{
	uint64_t one = 1;
	ssize_t n;
	if (VR_LOAD(waiters) == 0)
		return; /* nobody sleeps: a busy ring costs no syscall */
	n = write(r->bell[bell], &one, sizeof one); /* EAGAIN: counter full, readable already */
	(void)n;
}

/* Conditions for vr_await: 1 met, 0 not yet, <0 an error code. */
typedef int (*vr_cond)(vigring *r, void *arg);

/* vr_await spins for an adaptive window (2-64 us, following the waits it has
 * seen, as vig's Go side), then announces itself in waiters and sleeps in
 * poll on its doorbell (an eventfd vig rings) and the session socket (vig
 * closing it ends the session) together, until the timeout (milliseconds; -1
 * none). what names the wait in the timeout's message. */
static int vr_await(vigring *r, int which, int bell, uint32_t *waiters, vr_cond cond, void *arg, int timeout_ms, const char *what)
{
	int64_t start = vigring_now_ns(), deadline = timeout_ms < 0 ? INT64_MAX : start + (int64_t)timeout_ms * 1000000;
	int64_t *window = &r->window_ns[which];
	long i;
	int rc = cond(r, arg);
	if (rc != 0)
		return rc < 0 ? rc : 0;
	if (*window == 0)
		*window = 16000;
	if (r->spin != -1) {
		for (i = 1; r->spin < 0 || r->spin == 0 || i < r->spin; i++) {
			if ((rc = cond(r, arg)) != 0)
				return rc < 0 ? rc : 0;
#if defined(__x86_64__) || defined(__i386__)
			__builtin_ia32_pause();
#elif defined(__aarch64__)
			__asm__ __volatile__("yield");
#endif
			if (r->spin == -2 && i % 1024 == 0)
				sched_yield(); /* never sleeping: let a peer on this CPU run */
			if (i % 32 == 0) {
				int64_t now = vigring_now_ns();
				if (r->spin == 0 && now - start > *window)
					break;
				if (now > deadline)
					return vr_fail(r, VIGRING_ETIMEOUT, "vigring: no %s within %d ms", what, timeout_ms);
				if (i % 4096 == 0 && !vr_alive(r))
					return vr_fail(r, VIGRING_ECLOSED, "vigring: vig closed the session");
			}
		}
	}
	VR_ADD(waiters, 1u);
	for (;;) {
		struct pollfd p[2];
		int64_t now;
		int ms;
		if ((rc = cond(r, arg)) != 0)
			break;
		if (VR_LOAD(&r->closed)) {
			rc = vr_fail(r, VIGRING_ECLOSED, "vigring: vig closed the session");
			break;
		}
		now = vigring_now_ns();
		if (now > deadline) {
			rc = vr_fail(r, VIGRING_ETIMEOUT, "vigring: no %s within %d ms", what, timeout_ms);
			break;
		}
		ms = deadline == INT64_MAX ? -1 : (int)((deadline - now + 999999) / 1000000);
		p[0].fd = r->bell[bell];
		p[0].events = POLLIN;
		p[0].revents = 0;
		p[1].fd = r->sock;
		p[1].events = POLLIN;
		p[1].revents = 0;
		if (poll(p, 2, ms) > 0 && (p[0].revents & POLLIN)) {
			uint64_t v;
			ssize_t n = read(r->bell[bell], &v, sizeof v); /* resets it; EAGAIN: nothing */
			(void)n;
		}
		if (p[1].revents)
			vr_alive(r); /* vig hung up (or wrote, which it never does): closed is set */
		/* EINTR, a ring, the socket, the timeout: re-check all of them. */
	}
	VR_ADD(waiters, (uint32_t)-1);
	if (rc > 0 && r->spin == 0) {
		int64_t waited = vigring_now_ns() - start;
		if (waited <= 64000)
			*window = waited * 2 < 2000 ? 2000 : (waited * 2 > 64000 ? 64000 : waited * 2);
		else
			*window = *window / 2 < 2000 ? 2000 : *window / 2;
	}
	return rc < 0 ? rc : 0;
}

static int vr_try_loan(vigring *r, void *arg)
{
	const vigring_ring_layout *l = &r->lay.rings[0];
	uint32_t k, *slot = (uint32_t *)arg;
	if (VR_LOAD(&r->closed))
		return vr_fail(r, VIGRING_ECLOSED, "vigring: the session is closed");
	for (k = 0; k < l->slots; k++) {
		uint32_t i = (r->next_slot + k) % l->slots;
		uint32_t *st = vr_w32(r, l->ring_off + VR_STATES + 4ull * i);
		/* Free only if vig returned it (shared) and we do not hold it
		 * (private): vig marking a loaned slot free cannot make us loan it twice. */
		if (r->loaned[i] || VR_LOAD(st) != 0)
			continue;
		VR_STORE(st, 1u);
		r->loaned[i] = 1;
		r->next_slot = (i + 1) % l->slots;
		*slot = i;
		return 1;
	}
	return 0;
}

int vigring_loan(vigring *r, uint32_t *slot, uint8_t **buf, int timeout_ms)
{
	const vigring_ring_layout *l = &r->lay.rings[0];
	uint32_t s = VIGRING_NO_SLOT, i, mine = 0;
	int rc;
	vr_group = 0;
	if (VR_LOAD(&r->closed) || r->mem == NULL)
		return vr_fail(r, VIGRING_ECLOSED, "vigring: the session is closed");
	for (i = 0; i < l->slots; i++)
		mine += r->loaned[i];
	if (mine == l->slots) /* only our own submit or unloan could free one: waiting would never end */
		return vr_fail(r, VIGRING_EBUSY, "vigring: this process holds all %u request slots on loan: submit or unloan one before loaning another", l->slots);
	rc = vr_await(r, 0, VR_BELL_REQ_SPACE, vr_w32(r, l->ring_off + VR_SPACE_WAITERS), vr_try_loan, &s, timeout_ms, "free request slot");
	if (rc != 0)
		return rc;
	*slot = s;
	*buf = r->mem + l->arena_off + (uint64_t)s * l->slot_size;
	vr_ok(r);
	return 0;
}

void vigring_unloan(vigring *r, uint32_t slot)
{
	const vigring_ring_layout *l = &r->lay.rings[0];
	if (r->mem == NULL || slot >= l->slots || !r->loaned[slot])
		return;
	r->loaned[slot] = 0;
	VR_STORE(vr_w32(r, l->ring_off + VR_STATES + 4ull * slot), 0u);
}

/* vr_space: room to post one request descriptor; vig's counter is checked. */
static int vr_space(vigring *r, void *arg)
{
	const vigring_ring_layout *l = &r->lay.rings[0];
	uint64_t t = VR_LOAD(vr_w64(r, l->ring_off + VR_TAIL));
	(void)arg;
	if (VR_LOAD(&r->closed))
		return vr_fail(r, VIGRING_ECLOSED, "vigring: the session is closed");
	if (t > r->req_head || r->req_head - t > l->descriptors) {
		VR_STORE(&r->closed, 1);
		return vr_fail(r, VIGRING_ECORRUPT, "vigring: vig's consumer counter %llu with ours at %llu (ring of %u): corrupt ring, session ended",
		               (unsigned long long)t, (unsigned long long)r->req_head, l->descriptors);
	}
	return r->req_head - t < l->descriptors;
}

static int vr_put_str(vigring *r, uint8_t *dst, size_t max, const char *s, const char *what)
{
	size_t n = s ? strlen(s) : 0;
	if (n > max)
		return vr_fail(r, VIGRING_EINVAL, "vigring: %s \"%s\" is %zu bytes, at most %zu", what, s, n, max);
	if (n)
		memcpy(dst, s, n);
	return (int)n;
}

int vigring_submit(vigring *r, uint32_t slot, const vigring_request *q, uint64_t *tag)
{
	const vigring_ring_layout *l = &r->lay.rings[0];
	uint8_t *d = r->desc_out;
	int n, i, j, rc;
	vr_group = 0;
	if (VR_LOAD(&r->closed) || r->mem == NULL)
		return vr_fail(r, VIGRING_ECLOSED, "vigring: the session is closed");
	if (vigring_outstanding(r) >= r->max_outstanding)
		return vr_fail(r, VIGRING_EBUSY, "vigring: %d requests await results (the response ring holds %d): call vigring_next first",
		               vigring_outstanding(r), r->max_outstanding);
	if (slot != VIGRING_NO_SLOT && (slot >= l->slots || !r->loaned[slot]))
		return vr_fail(r, VIGRING_EINVAL, "vigring: payload slot %u is not loaned", slot);
	if (slot != VIGRING_NO_SLOT ? q->len > l->slot_size : q->len != 0)
		return vr_fail(r, VIGRING_EINVAL, "vigring: frame length %llu outside the %llu-byte slot",
		               (unsigned long long)q->len, (unsigned long long)(slot != VIGRING_NO_SLOT ? l->slot_size : 0));
	if (q->ntensors < 0 || q->ntensors > VIGRING_MAX_TENSORS)
		return vr_fail(r, VIGRING_EINVAL, "vigring: %d tensors, at most %d", q->ntensors, VIGRING_MAX_TENSORS);
	memset(d, 0, VR_DESC);
	vr_put64(d + D_TAG, r->next_tag + 1);
	vr_put64(d + D_FRAME, q->frame);
	vr_put64(d + D_CAPTURE, (uint64_t)q->capture_ns);
	vr_put32(d + D_SLOT, slot);
	vr_put64(d + D_PLEN, slot != VIGRING_NO_SLOT ? q->len : 0);
	if ((n = vr_put_str(r, d + D_STREAM, VIGRING_MAX_STREAM, q->stream, "stream name")) < 0)
		return n;
	d[D_STREAMLEN] = (uint8_t)n;
	if ((n = vr_put_str(r, d + D_MODEL, VIGRING_MAX_MODEL, q->model, "model name")) < 0)
		return n;
	d[D_MODELLEN] = (uint8_t)n;
	d[D_NTENSORS] = (uint8_t)q->ntensors;
	for (i = 0; i < q->ntensors; i++) {
		const vigring_tensor *t = &q->tensors[i];
		uint8_t *tb = d + D_TENSORS + T_SIZE * i;
		if (t->rank > VIGRING_MAX_RANK)
			return vr_fail(r, VIGRING_EINVAL, "vigring: tensor %d rank %u, at most %d", i, t->rank, VIGRING_MAX_RANK);
		if (t->offset > q->len || t->length > q->len - t->offset)
			return vr_fail(r, VIGRING_EINVAL, "vigring: tensor %d bytes %llu+%llu outside the %llu-byte frame", i,
			               (unsigned long long)t->offset, (unsigned long long)t->length, (unsigned long long)q->len);
		vr_put64(tb + T_OFF, t->offset);
		vr_put64(tb + T_LEN, t->length);
		if ((n = vr_put_str(r, tb + T_NAME, VIGRING_MAX_NAME, t->name, "tensor name")) < 0)
			return n;
		tb[T_NAMELEN] = (uint8_t)n;
		if ((n = vr_put_str(r, tb + T_TYPE, VIGRING_MAX_DATATYPE, t->datatype, "datatype")) < 0)
			return n;
		tb[T_TYPELEN] = (uint8_t)n;
		tb[T_RANK] = (uint8_t)t->rank;
		for (j = 0; j < (int)t->rank; j++) {
			if (t->shape[j] < 0)
				return vr_fail(r, VIGRING_EINVAL, "vigring: tensor %d dimension %d is %lld", i, j, (long long)t->shape[j]);
			vr_put64(tb + T_SHAPE + 8 * j, (uint64_t)t->shape[j]);
		}
	}
	rc = vr_await(r, 0, VR_BELL_REQ_SPACE, vr_w32(r, l->ring_off + VR_SPACE_WAITERS), vr_space, NULL, -1, "free request descriptor");
	if (rc != 0)
		return rc;
	memcpy(r->mem + l->desc_off + (r->req_head & (l->descriptors - 1)) * VR_DESC, d, VR_DESC);
	if (slot != VIGRING_NO_SLOT)
		r->loaned[slot] = 0; /* vig owns it until it answers */
	r->req_head++;
	r->next_tag++;
	VR_ADD(&r->outstanding, 1);
	VR_STORE(vr_w64(r, l->ring_off + VR_HEAD), r->req_head); /* publishes the descriptor */
	vr_wake(r, VR_BELL_REQ_READY, vr_w32(r, l->ring_off + VR_READY_WAITERS));
	if (tag)
		*tag = r->next_tag;
	vr_ok(r);
	return 0;
}

/* vr_utf8 reports whether b[0..n) is valid UTF-8 (as Go's utf8.Valid). */
static int vr_utf8(const uint8_t *b, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint8_t c = b[i];
		size_t k, len;
		uint32_t cp;
		if (c < 0x80) { i++; continue; }
		if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
		else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
		else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
		else return 0;
		if (n - i < len)
			return 0;
		for (k = 1; k < len; k++) {
			if ((b[i + k] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (b[i + k] & 0x3f);
		}
		if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
			return 0;
		i += len;
	}
	return 1;
}

static void vr_copy_str(char *dst, const uint8_t *src, size_t n)
{
	memcpy(dst, src, n);
	dst[n] = 0;
}

/* vr_decode validates the private copy r->desc_in as a response of the response
 * ring, the checks of shmring's DecodeDescriptor and CheckPayload. */
static int vr_decode(vigring *r, vigring_result *res)
{
	const vigring_ring_layout *l = &r->lay.rings[1];
	const uint8_t *d = r->desc_in;
	size_t sl = d[D_STREAMLEN], ml = d[D_MODELLEN], nt = d[D_NTENSORS], gl = d[D_MSGLEN];
	size_t i, j;
	memset(res, 0, sizeof *res);
	res->tag = vr_u64(d + D_TAG);
	res->frame = vr_u64(d + D_FRAME);
	res->capture_ns = (int64_t)vr_u64(d + D_CAPTURE);
	res->slot = vr_u32(d + D_SLOT);
	res->status = vr_u32(d + D_STATUS);
	res->payload_off = vr_u64(d + D_POFF);
	res->payload_len = vr_u64(d + D_PLEN);
	if (sl > VIGRING_MAX_STREAM || ml > VIGRING_MAX_MODEL || nt > VIGRING_MAX_TENSORS || gl > VIGRING_MAX_MESSAGE)
		return vr_fail(r, VIGRING_EINVAL, "field lengths %zu/%zu/%zu/%zu exceed their fields", sl, ml, nt, gl);
	if (vr_u32(d + D_FLAGS) != 0)
		return vr_fail(r, VIGRING_EINVAL, "reserved flags %#x", vr_u32(d + D_FLAGS));
	for (i = D_RESERVED; i < VR_DESC; i++)
		if (d[i] != 0)
			return vr_fail(r, VIGRING_EINVAL, "reserved bytes not zero");
	if (res->slot == VIGRING_NO_SLOT) {
		if (res->payload_off != 0 || res->payload_len != 0)
			return vr_fail(r, VIGRING_EINVAL, "payload without a slot");
	} else if (res->slot >= l->slots) {
		return vr_fail(r, VIGRING_EINVAL, "payload slot %u of %u", res->slot, l->slots);
	} else if (res->payload_off > l->slot_size || res->payload_len > l->slot_size - res->payload_off) {
		return vr_fail(r, VIGRING_EINVAL, "payload %llu+%llu outside the %llu-byte slot", (unsigned long long)res->payload_off,
		               (unsigned long long)res->payload_len, (unsigned long long)l->slot_size);
	}
	if (!vr_utf8(d + D_STREAM, sl) || !vr_utf8(d + D_MODEL, ml) || !vr_utf8(d + D_MESSAGE, gl))
		return vr_fail(r, VIGRING_EINVAL, "names must be UTF-8");
	vr_copy_str(res->stream, d + D_STREAM, sl);
	vr_copy_str(res->model, d + D_MODEL, ml);
	vr_copy_str(res->message, d + D_MESSAGE, gl);
	for (i = 0; i < nt; i++) {
		const uint8_t *tb = d + D_TENSORS + T_SIZE * i;
		vigring_tensor *t = &res->tensors[i];
		size_t nl = tb[T_NAMELEN], tl = tb[T_TYPELEN], rk = tb[T_RANK];
		t->offset = vr_u64(tb + T_OFF);
		t->length = vr_u64(tb + T_LEN);
		if (nl > VIGRING_MAX_NAME || tl > VIGRING_MAX_DATATYPE || rk > VIGRING_MAX_RANK)
			return vr_fail(r, VIGRING_EINVAL, "tensor %zu field lengths exceed their fields", i);
		if (t->offset > res->payload_len || t->length > res->payload_len - t->offset)
			return vr_fail(r, VIGRING_EINVAL, "tensor %zu bytes outside the payload", i);
		for (j = T_RESERVED; j < T_TYPE; j++)
			if (tb[j] != 0)
				return vr_fail(r, VIGRING_EINVAL, "tensor %zu reserved bytes not zero", i);
		if (!vr_utf8(tb + T_NAME, nl) || !vr_utf8(tb + T_TYPE, tl))
			return vr_fail(r, VIGRING_EINVAL, "tensor %zu names must be UTF-8", i);
		vr_copy_str(t->name, tb + T_NAME, nl);
		vr_copy_str(t->datatype, tb + T_TYPE, tl);
		t->rank = (uint32_t)rk;
		for (j = 0; j < rk; j++) {
			t->shape[j] = (int64_t)vr_u64(tb + T_SHAPE + 8 * j);
			if (t->shape[j] < 0)
				return vr_fail(r, VIGRING_EINVAL, "tensor %zu dimension %zu is negative", i, j);
		}
	}
	res->ntensors = (int)nt;
	if (res->slot != VIGRING_NO_SLOT) {
		if (r->held[res->slot])
			return vr_fail(r, VIGRING_EINVAL, "payload slot %u is already held", res->slot);
		r->held[res->slot] = 1;
		res->payload = r->mem + l->arena_off + (uint64_t)res->slot * l->slot_size + res->payload_off;
	}
	return 0;
}

/* vr_try_next: 1 with a result in *arg, 0 when the ring is empty. */
static int vr_try_next(vigring *r, void *arg)
{
	const vigring_ring_layout *l = &r->lay.rings[1];
	vigring_result *res = (vigring_result *)arg;
	uint64_t h;
	if (VR_LOAD(&r->closed))
		return vr_fail(r, VIGRING_ECLOSED, "vigring: the session is closed");
	for (;;) {
		h = VR_LOAD(vr_w64(r, l->ring_off + VR_HEAD));
		if (h == r->resp_tail)
			return 0;
		if (h - r->resp_tail > l->descriptors) { /* also catches h < tail */
			VR_STORE(&r->closed, 1);
			return vr_fail(r, VIGRING_ECORRUPT, "vigring: vig's producer counter %llu with ours at %llu (ring of %u): corrupt ring, session ended",
			               (unsigned long long)h, (unsigned long long)r->resp_tail, l->descriptors);
		}
		/* Copy out before decoding: the shared bytes may change at any time. */
		memcpy(r->desc_in, r->mem + l->desc_off + (r->resp_tail & (l->descriptors - 1)) * VR_DESC, VR_DESC);
		r->resp_tail++;
		VR_STORE(vr_w64(r, l->ring_off + VR_TAIL), r->resp_tail); /* vig never waits for room here: no bell */
		if (vigring_outstanding(r) > 0)
			VR_ADD(&r->outstanding, -1);
		if (vr_decode(r, res) == 0)
			return 1;
		/* A malformed answer still answered something: skip it (returning a
		 * slot it named that we do not hold) rather than wedge the loop. */
		r->skipped++;
		if (res->slot < l->slots && !r->held[res->slot]) {
			VR_STORE(vr_w32(r, l->ring_off + VR_STATES + 4ull * res->slot), 0u);
		}
	}
}

int vigring_next(vigring *r, vigring_result *res, int timeout_ms)
{
	const vigring_ring_layout *l = &r->lay.rings[1];
	int rc;
	vr_group = 1;
	if (VR_LOAD(&r->closed) || r->mem == NULL)
		return vr_fail(r, VIGRING_ECLOSED, "vigring: the session is closed");
	if (timeout_ms < 0 && vigring_outstanding(r) == 0)
		return vr_fail(r, VIGRING_EINVAL, "vigring: vigring_next without a timeout while no request awaits a result would wait forever: submit first (or pass a timeout)");
	rc = vr_await(r, 1, VR_BELL_RESP_READY, vr_w32(r, l->ring_off + VR_READY_WAITERS), vr_try_next, res, timeout_ms, "result");
	if (rc == 0)
		vr_ok(r);
	return rc;
}

const uint8_t *vigring_output(const vigring *r, const vigring_result *res, int i, uint64_t *len)
{
	const vigring_tensor *t;
	(void)r;
	*len = 0;
	if (i < 0 || i >= res->ntensors || res->payload == NULL)
		return NULL;
	t = &res->tensors[i];
	if (t->offset > res->payload_len || t->length > res->payload_len - t->offset)
		return NULL; /* decoding checked this; kept for results built by hand */
	*len = t->length;
	return res->payload + t->offset;
}

void vigring_release(vigring *r, vigring_result *res)
{
	const vigring_ring_layout *l = &r->lay.rings[1];
	uint32_t s = res->slot;
	res->payload = NULL;
	res->slot = VIGRING_NO_SLOT;
	if (r->mem == NULL || s >= l->slots || !r->held[s])
		return; /* a double release cannot free a slot vig has loaned again */
	r->held[s] = 0;
	VR_STORE(vr_w32(r, l->ring_off + VR_STATES + 4ull * s), 0u); /* vig never waits for it: no bell */
}

#endif /* VIGRING_IMPLEMENTATION_DONE */
#endif /* VIGRING_IMPLEMENTATION */
