// misuse.cpp: vigring.hpp's errors and RAII, for vig's tests
// (cmd/vig/clients_test.go). Prints one "ok NAME" line per case, then "done".
#define VIGRING_IMPLEMENTATION
#include "../vigring.hpp"

#include <cstdio>
#include <cstring>
#include <functional>

static void expect(const char *name, int code, const char *words, const std::function<void()> &f)
{
	try {
		f();
		std::printf("FAIL %s: no error\n", name);
	} catch (const vig::error &e) {
		if (e.code() != code || std::strstr(e.what(), words) == nullptr)
			std::printf("FAIL %s: code %d \"%s\", want %d saying \"%s\"\n", name, e.code(), e.what(), code, words);
		else
			std::printf("ok %s\n", name);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	vigring_config cfg = VIGRING_DEFAULT_CONFIG;
	cfg.requests.slots = 2;
	cfg.requests.slot_size = 4096;
	expect("bad-address", VIGRING_ESYS, "is vig serving", [] { vig::ring r("@vig-misuse-nobody-listens"); });
	vig::ring ring(argv[1], &cfg);
	expect("next-nothing-outstanding", VIGRING_EINVAL, "submit first", [&] { ring.next(); });
	expect("next-timeout", VIGRING_ETIMEOUT, "no result within 50 ms", [&] { ring.next(std::chrono::milliseconds(50)); });
	{
		vig::frame a = ring.loan(), b = ring.loan();
		expect("loan-all-held", VIGRING_EBUSY, "all 2 request slots", [&] { ring.loan(); });
		expect("submit-too-long", VIGRING_EINVAL, "outside the 4096-byte slot", [&] { ring.submit(std::move(a), {"det", "cam", 0, 0, 5000}); });
		if (!a)
			std::printf("FAIL submit-keeps-loan: the failed submit took the frame\n");
		else
			std::printf("ok submit-keeps-loan\n");
	} // both frames unloaned here
	// Results release their slots at scope end: more round trips than the
	// response ring has slots (8) succeed.
	int okc = 0;
	for (uint64_t k = 0; k < 20; k++) {
		vig::frame f = ring.loan(std::chrono::milliseconds(5000));
		std::memset(f.data(), int(k), 16);
		ring.submit(std::move(f), {"det", "cam", k, vigring_now_ns(), 16});
		vig::result res = ring.next(std::chrono::milliseconds(10000));
		if (res.ok() && res.outputs() == 1 && res.output(0).as<int64_t>().size() == 2)
			okc++;
	}
	std::printf(okc == 20 ? "ok raii-release\n" : "FAIL raii-release: %d of 20\n", okc);
	{
		vig::frame f = ring.loan();
		ring.submit(std::move(f), {"det", "cam", 99, vigring_now_ns(), 16});
		vig::result res = ring.next(std::chrono::milliseconds(10000));
		expect("output-range", VIGRING_EINVAL, "output 5 of a result with 1", [&] { res.output(5); });
		expect("output-type", VIGRING_EINVAL, "not an array of 32-byte", [&] { res.output(0).as<char[32]>(); });
	}
	std::printf("done\n");
	return 0;
}
