/*
 * threads: a capture thread (loan, submit) and a result thread (next, release)
 * on one ring, as a camera pipeline runs them, for vig's tests.
 *
 *   threads ADDR N     N frames to model "det"; prints "answered=N" at the end
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define VIGRING_IMPLEMENTATION
#include "../vigring.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vigring r;
static unsigned long n;
static int failed;

static void *capture(void *arg)
{
	unsigned long k;
	(void)arg;
	for (k = 0; k < n; k++) {
		uint32_t slot;
		uint8_t *buf;
		vigring_request q;
		int rc;
		while (vigring_outstanding(&r) >= r.max_outstanding) /* the result thread catches up */
			sched_yield();
		if (vigring_loan(&r, &slot, &buf, 10000) != 0) {
			__atomic_store_n(&failed, 1, __ATOMIC_SEQ_CST);
			return NULL;
		}
		memset(buf, (int)k, 1000);
		memset(&q, 0, sizeof q);
		q.stream = "cam";
		q.model = "det";
		q.frame = k;
		q.capture_ns = vigring_now_ns();
		q.len = 1000;
		if ((rc = vigring_submit(&r, slot, &q, NULL)) != 0) {
			__atomic_store_n(&failed, 1, __ATOMIC_SEQ_CST);
			return NULL;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	unsigned long answered = 0;
	if (argc != 3)
		return 2;
	n = strtoul(argv[2], NULL, 10);
	if (vigring_connect(&r, argv[1], NULL) != 0) {
		fprintf(stderr, "%s\n", vigring_error(&r));
		return 1;
	}
	pthread_create(&t, NULL, capture, NULL);
	while (answered < n && !__atomic_load_n(&failed, __ATOMIC_SEQ_CST)) {
		vigring_result res;
		int rc = vigring_next(&r, &res, 500);
		if (rc == VIGRING_ETIMEOUT)
			continue;
		if (rc != 0)
			break;
		answered++;
		if (res.status != VIGRING_OK && res.status != VIGRING_ABORTED && res.status != VIGRING_DEADLINE_EXCEEDED) {
			fprintf(stderr, "threads: frame %llu answered %s: %s\n", (unsigned long long)res.frame, vigring_status_name(res.status), res.message);
			__atomic_store_n(&failed, 1, __ATOMIC_SEQ_CST);
		}
		vigring_release(&r, &res);
	}
	pthread_join(t, NULL);
	printf("answered=%lu\n", answered);
	if (answered != n || failed)
		fprintf(stderr, "threads: %lu of %lu answered: %s\n", answered, n, vigring_error(&r));
	vigring_close(&r);
	return answered == n && !failed ? 0 : 1;
}
