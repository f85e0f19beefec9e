/*
 * hostile: a misbehaving ring client, for vig's tests (cmd/vig/clients_test.go).
 *
 *   hostile ADDR scribble   one good round trip ("ok"), then garbage in the ring
 *                           control blocks (counters, waiters words, slot states);
 *                           prints "disconnected" once vig has ended the session
 *   hostile ADDR bells      rings vig's doorbell in a tight loop without posting,
 *                           prints "ok" after a good round trip in between, and
 *                           rings on until killed
 *   hostile ADDR die        posts a frame to the 200 ms model "slow", leaves half
 *                           a descriptor in the next entry, prints "ready" and
 *                           waits to be killed (kill -9)
 *   hostile - layout        prints the layouts of two configurations, for the
 *                           byte-exactness check against shmring.ComputeLayout
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* syscall, ftruncate, SOCK_CLOEXEC under -std=c99 */
#endif
#define VIGRING_IMPLEMENTATION
#include "../vigring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_layout(const vigring_config *c)
{
	vigring_layout l;
	char err[200];
	int i;
	if (vigring_compute_layout(c, &l, err, sizeof err) != 0) {
		printf("error %s\n", err);
		return;
	}
	printf("region=%llu", (unsigned long long)l.region_size);
	for (i = 0; i < 2; i++)
		printf(" ring%d=%u/%u/%llu/%llu/%llu/%llu", i, l.rings[i].descriptors, l.rings[i].slots,
		       (unsigned long long)l.rings[i].slot_size, (unsigned long long)l.rings[i].ring_off,
		       (unsigned long long)l.rings[i].desc_off, (unsigned long long)l.rings[i].arena_off);
	printf("\n");
}

/* ring_bell rings vig's request-ready doorbell, posting nothing. */
static void ring_bell(vigring *r)
{
	uint64_t one = 1;
	if (write(r->bell[VR_BELL_REQ_READY], &one, sizeof one) < 0 && errno != EAGAIN)
		exit(3);
}

static int round_trip(vigring *r, uint64_t frame)
{
	uint32_t slot;
	uint8_t *buf;
	vigring_request q;
	vigring_result res;
	if (vigring_loan(r, &slot, &buf, 5000) != 0)
		return -1;
	memset(buf, (int)frame, 100);
	memset(&q, 0, sizeof q);
	q.stream = "cam";
	q.model = "det";
	q.frame = frame;
	q.len = 100;
	if (vigring_submit(r, slot, &q, NULL) != 0 || vigring_next(r, &res, 10000) != 0)
		return -1;
	vigring_release(r, &res);
	return (int)res.status;
}

int main(int argc, char **argv)
{
	vigring r;
	int i;
	if (argc != 3)
		return 2;
	if (strcmp(argv[2], "layout") == 0) {
		vigring_config d = VIGRING_DEFAULT_CONFIG;
		vigring_config doc = {{16, 4, 4096}, {8, 40, 8192}, VIGRING_MEMFD, 0, 0};
		print_layout(&d);
		print_layout(&doc);
		return 0;
	}
	if (vigring_connect(&r, argv[1], NULL) != 0) {
		fprintf(stderr, "%s\n", vigring_error(&r));
		return 1;
	}
	if (strcmp(argv[2], "scribble") == 0) {
		const vigring_ring_layout *q = &r.lay.rings[0], *p = &r.lay.rings[1];
		if (round_trip(&r, 1) != 0) {
			fprintf(stderr, "round trip: %s\n", vigring_error(&r));
			return 1;
		}
		printf("ok\n");
		fflush(stdout);
		/* Counters no correct client can produce, waiters words that say
		 * everybody sleeps, every slot state flipped. */
		*vr_w64(&r, q->ring_off + VR_HEAD) = 1ull << 62;
		*vr_w64(&r, p->ring_off + VR_TAIL) = 0xdeadbeefcafeull;
		*vr_w32(&r, q->ring_off + VR_READY_WAITERS) = 0xffffffffu;
		*vr_w32(&r, p->ring_off + VR_SPACE_WAITERS) = 0xffffffffu;
		for (i = 0; i < (int)q->slots; i++)
			*vr_w32(&r, q->ring_off + VR_STATES + 4ull * i) = 0x55555555u;
		for (i = 0; i < (int)p->slots; i++)
			*vr_w32(&r, p->ring_off + VR_STATES + 4ull * i) = 0xaaaaaaaau;
		ring_bell(&r); /* whatever the waiters word says */
		for (i = 0; i < 200; i++) { /* up to 10 s */
			struct timespec ts = {0, 50 * 1000000};
			if (!vr_alive(&r)) {
				printf("disconnected\n");
				return 0;
			}
			nanosleep(&ts, NULL);
		}
		printf("still connected\n");
		return 1;
	}
	if (strcmp(argv[2], "bells") == 0) {
		for (i = 0; i < 200000; i++)
			ring_bell(&r);
		if (round_trip(&r, 1) != 0) {
			fprintf(stderr, "round trip: %s\n", vigring_error(&r));
			return 1;
		}
		printf("ok\n");
		fflush(stdout);
		for (;;)
			ring_bell(&r);
	}
	if (strcmp(argv[2], "die") == 0) {
		const vigring_ring_layout *q = &r.lay.rings[0];
		uint32_t slot;
		uint8_t *buf;
		vigring_request req;
		memset(&req, 0, sizeof req);
		req.model = "slow"; /* 200 ms: vig still holds it when we die */
		req.len = 4096;
		if (vigring_loan(&r, &slot, &buf, 5000) != 0 || vigring_submit(&r, slot, &req, NULL) != 0) {
			fprintf(stderr, "%s\n", vigring_error(&r));
			return 1;
		}
		/* Half a descriptor in the next entry, never published. */
		memset(r.mem + q->desc_off + (r.req_head & (q->descriptors - 1)) * 4096, 0x7f, 2048);
		printf("ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	return 2;
}
