/*
 * example: a sensor that hands frames to vig over the shared-memory ring.
 *
 *   example ADDR STREAM MODEL FRAME_BYTES N [--rate HZ] [--backend memfd|shm|shm-key]
 *           [--outputs] [--slot-kib K] [--bench] [--spin adaptive|never|forever]
 *
 * Submits N frames of FRAME_BYTES bytes (byte j of frame k is k + 7j, mod 256),
 * each after the previous one's answer, or at HZ frames per second with --rate
 * (open loop; results are read as they come). Prints one line per result:
 *
 *   frame=K status=CODE bytes=N
 *
 * and, with --outputs, one line per output tensor after it:
 *
 *   output name=NAME datatype=TYPE shape=[D0,D1] hex=BYTES
 *
 * With --bench (closed loop only) it prints no result lines but, at the end, the
 * mean time from submit to result over the N frames (filling the frame is not
 * counted):
 *
 *   round_trip_us=MEAN p50_us=MEDIAN frames=N
 *
 * Exits 0 when every frame was answered, 1 on a ring error, 2 on bad usage.
 * Build: make shmring/c/example (or cc -O2 -std=c99 -o example example.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* syscall, ftruncate, SOCK_CLOEXEC under -std=c99 */
#endif
#define VIGRING_IMPLEMENTATION
#include "vigring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int usage(void)
{
	fprintf(stderr, "usage: example ADDR STREAM MODEL FRAME_BYTES N [--rate HZ] [--backend memfd|shm|shm-key] [--outputs] [--slot-kib K] [--bench] [--spin adaptive|never|forever]\n"
	                "  ADDR: vig's listen.ring, e.g. @vig-ring\n");
	return 2;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void print_result(const vigring *r, const vigring_result *res, int outputs)
{
	uint64_t total = 0, len;
	int i, j;
	for (i = 0; i < res->ntensors; i++)
		total += res->tensors[i].length;
	printf("frame=%llu status=%s bytes=%llu\n", (unsigned long long)res->frame, vigring_status_name(res->status), (unsigned long long)total);
	for (i = 0; outputs && i < res->ntensors; i++) {
		const vigring_tensor *t = &res->tensors[i];
		const uint8_t *p = vigring_output(r, res, i, &len);
		printf("output name=%s datatype=%s shape=[", t->name, t->datatype);
		for (j = 0; j < (int)t->rank; j++)
			printf("%s%lld", j ? "," : "", (long long)t->shape[j]);
		printf("] hex=");
		for (j = 0; p && j < (int)len; j++)
			printf("%02x", p[j]);
		printf("\n");
	}
	if (res->status != VIGRING_OK && res->message[0])
		fprintf(stderr, "frame %llu: %s: %s\n", (unsigned long long)res->frame, vigring_status_name(res->status), res->message);
}

int main(int argc, char **argv)
{
	vigring_config cfg = VIGRING_DEFAULT_CONFIG;
	vigring r;
	vigring_result res;
	const char *addr, *stream, *model;
	unsigned long long bytes, n, sent = 0, answered = 0;
	double rate = 0;
	int outputs = 0, bench = 0, i, rc;
	int64_t next_at, submitted_at = 0, rtt_total = 0, *rtts = NULL;

	if (argc < 6)
		return usage();
	addr = argv[1];
	stream = argv[2];
	model = argv[3];
	bytes = strtoull(argv[4], NULL, 10);
	n = strtoull(argv[5], NULL, 10);
	for (i = 6; i < argc; i++) {
		if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc) {
			rate = atof(argv[++i]);
		} else if (strcmp(argv[i], "--outputs") == 0) {
			outputs = 1;
		} else if (strcmp(argv[i], "--bench") == 0) {
			bench = 1;
		} else if (strcmp(argv[i], "--spin") == 0 && i + 1 < argc) {
			const char *m = argv[++i];
			if (strcmp(m, "adaptive") == 0)
				cfg.spin = 0;
			else if (strcmp(m, "never") == 0)
				cfg.spin = -1;
			else if (strcmp(m, "forever") == 0)
				cfg.spin = -2;
			else
				return usage();
		} else if (strcmp(argv[i], "--slot-kib") == 0 && i + 1 < argc) {
			cfg.responses.slot_size = strtoull(argv[++i], NULL, 10) << 10;
		} else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
			const char *b = argv[++i];
			if (strcmp(b, "memfd") == 0)
				cfg.backend = VIGRING_MEMFD;
			else if (strcmp(b, "shm") == 0)
				cfg.backend = VIGRING_SHM;
			else if (strcmp(b, "shm-key") == 0)
				cfg.backend = VIGRING_SHM_KEY;
			else
				return usage();
		} else {
			return usage();
		}
	}
	/* Size the request slots for the frame (at least the default 8 MiB). */
	if (bytes > cfg.requests.slot_size)
		cfg.requests.slot_size = bytes;
	if (bench && (rtts = (int64_t *)calloc(n ? n : 1, sizeof *rtts)) == NULL) {
		fprintf(stderr, "example: no memory for %llu round trips\n", n);
		return 1;
	}
	if ((rc = vigring_connect(&r, addr, &cfg)) != 0) {
		fprintf(stderr, "%s\n", vigring_error(&r));
		return 1;
	}
	next_at = vigring_now_ns();
	while (answered < n) {
		/* Submit while frames remain, the previous one is answered (closed
		 * loop) or its time has come (open loop), and vig can take one. */
		int due = sent < n && (rate > 0 ? vigring_now_ns() >= next_at : sent == answered);
		if (due && vigring_outstanding(&r) < r.max_outstanding) {
			uint32_t slot;
			uint8_t *buf;
			unsigned long long j;
			vigring_request q;
			if ((rc = vigring_loan(&r, &slot, &buf, 10000)) != 0)
				break;
			for (j = 0; j < bytes; j++)
				buf[j] = (uint8_t)(sent + 7 * j);
			memset(&q, 0, sizeof q);
			q.stream = stream;
			q.model = model;
			q.frame = sent;
			q.capture_ns = vigring_now_ns();
			q.len = bytes;
			submitted_at = vigring_now_ns();
			if ((rc = vigring_submit(&r, slot, &q, NULL)) != 0)
				break;
			sent++;
			next_at += rate > 0 ? (int64_t)(1e9 / rate) : 0;
			continue;
		}
		/* Open loop: wait for a result only until the next frame is due. */
		{
			int wait_ms = 30000;
			if (rate > 0 && sent < n && vigring_outstanding(&r) < r.max_outstanding) {
				int64_t left = next_at - vigring_now_ns();
				wait_ms = left > 0 ? (int)(left / 1000000) : 0;
			}
			rc = vigring_next(&r, &res, wait_ms);
		}
		if (rc == VIGRING_ETIMEOUT && rate > 0 && sent < n)
			continue;
		if (rc != 0)
			break;
		if (bench) {
			rtts[answered] = vigring_now_ns() - submitted_at;
			rtt_total += rtts[answered];
		}
		else
			print_result(&r, &res, outputs);
		vigring_release(&r, &res);
		answered++;
	}
	fflush(stdout);
	if (r.skipped)
		fprintf(stderr, "example: %llu malformed results skipped\n", (unsigned long long)r.skipped);
	if (answered < n) {
		fprintf(stderr, "example: %llu of %llu frames answered: %s\n", answered, n, vigring_error(&r));
		vigring_close(&r);
		return 1;
	}
	if (bench && n > 0) {
		qsort(rtts, n, sizeof *rtts, cmp_i64);
		printf("round_trip_us=%.2f p50_us=%.2f frames=%llu\n", (double)rtt_total / 1e3 / (double)n, (double)rtts[n / 2] / 1e3, n);
	}
	free(rtts);
	vigring_close(&r);
	return 0;
}
