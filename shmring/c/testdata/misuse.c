/*
 * misuse: calls of the C client that cannot succeed fail at once, saying what
 * to do, and vigring_error is empty after a success. For vig's tests
 * (cmd/vig/clients_test.go); it also builds as C++17.
 *
 *   misuse ADDR    prints one "ok NAME" line per case, then "done"
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define VIGRING_IMPLEMENTATION
#include "../vigring.h"

#include <stdio.h>
#include <string.h>

static void expect(vigring *r, const char *name, int rc, int want, const char *words)
{
	if (rc != want)
		printf("FAIL %s: rc %d, want %d (%s)\n", name, rc, want, vigring_error(r));
	else if (strstr(vigring_error(r), words) == NULL)
		printf("FAIL %s: \"%s\" does not say \"%s\"\n", name, vigring_error(r), words);
	else
		printf("ok %s\n", name);
}

int main(int argc, char **argv)
{
	vigring r;
	vigring_config cfg = VIGRING_DEFAULT_CONFIG;
	vigring_result res;
	vigring_request q;
	uint32_t a, b, c;
	uint8_t *buf;
	if (argc != 2)
		return 2;
	cfg.requests.slots = 2;
	cfg.requests.slot_size = 4096;
	if (vigring_connect(&r, argv[1], &cfg) != 0) {
		fprintf(stderr, "%s\n", vigring_error(&r));
		return 1;
	}
	expect(&r, "next-nothing-outstanding", vigring_next(&r, &res, -1), VIGRING_EINVAL, "submit first");
	expect(&r, "next-timeout", vigring_next(&r, &res, 50), VIGRING_ETIMEOUT, "no result within 50 ms");
	if (vigring_loan(&r, &a, &buf, 1000) != 0)
		printf("FAIL first loan: %s\n", vigring_error(&r));
	if (vigring_loan(&r, &b, &buf, 1000) != 0)
		printf("FAIL second loan: %s\n", vigring_error(&r));
	expect(&r, "loan-all-held", vigring_loan(&r, &c, &buf, -1), VIGRING_EBUSY, "all 2 request slots");
	memset(&q, 0, sizeof q);
	q.stream = "cam";
	q.model = "det";
	q.len = 5000;
	expect(&r, "submit-length", vigring_submit(&r, a, &q, NULL), VIGRING_EINVAL, "outside the 4096-byte slot");
	q.len = 4; /* the failed submit kept the loan */
	if (vigring_submit(&r, a, &q, NULL) != 0 || vigring_next(&r, &res, 10000) != 0 || res.status != 0)
		printf("FAIL round trip after a failed submit: %s\n", vigring_error(&r));
	else
		printf("ok submit-keeps-loan\n");
	if (vigring_error(&r)[0] != 0) /* the failed submit's text, cleared by the submit that succeeded */
		printf("FAIL error-cleared: \"%s\" after successes\n", vigring_error(&r));
	else
		printf("ok error-cleared\n");
	vigring_release(&r, &res);
	vigring_close(&r);
	expect(&r, "after-close", vigring_loan(&r, &c, &buf, 0), VIGRING_ECLOSED, "closed");
	printf("done\n");
	return 0;
}
