// example.cpp: the C++17 sensor of vigring.hpp. It submits N frames of
// FRAME_BYTES bytes (byte j of frame k is k + 7j, mod 256), each after the
// previous one's answer, and prints what example.c prints with --outputs:
//
//   example-cxx ADDR STREAM MODEL FRAME_BYTES N
//
// Built in vig's tests with -std=c++17 -Wall -Wextra -pedantic -Werror.
#define VIGRING_IMPLEMENTATION
#include "vigring.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char **argv)
{
	if (argc != 6) {
		std::fprintf(stderr, "usage: example-cxx ADDR STREAM MODEL FRAME_BYTES N\n");
		return 2;
	}
	const std::size_t bytes = std::strtoull(argv[4], nullptr, 10);
	const uint64_t n = std::strtoull(argv[5], nullptr, 10);
	try {
		vigring_config cfg = VIGRING_DEFAULT_CONFIG;
		if (bytes > cfg.requests.slot_size)
			cfg.requests.slot_size = bytes;
		vig::ring ring(argv[1], &cfg);
		for (uint64_t k = 0; k < n; k++) {
			vig::frame frame = ring.loan(std::chrono::milliseconds(10000));
			for (std::size_t j = 0; j < bytes; j++)
				frame.data()[j] = static_cast<uint8_t>(k + 7 * j);
			ring.submit(std::move(frame), {argv[3], argv[2], k, vigring_now_ns(), bytes});
			vig::result res = ring.next(std::chrono::milliseconds(30000));
			std::size_t total = 0;
			for (int i = 0; i < res.outputs(); i++)
				total += res.output(i).bytes.size();
			std::printf("frame=%llu status=%s bytes=%zu\n", static_cast<unsigned long long>(res.frame()), std::string(res.status_name()).c_str(), total);
			for (int i = 0; i < res.outputs(); i++) {
				vig::output_view o = res.output(i);
				std::string shape, hex;
				for (int64_t d : o.shape)
					shape += (shape.empty() ? "" : ",") + std::to_string(d);
				for (uint8_t b : o.bytes) {
					char h[3];
					std::snprintf(h, sizeof h, "%02x", b);
					hex += h;
				}
				std::printf("output name=%s datatype=%s shape=[%s] hex=%s\n", std::string(o.name).c_str(), std::string(o.datatype).c_str(), shape.c_str(), hex.c_str());
			}
		}
	} catch (const vig::error &e) {
		std::fprintf(stderr, "%s (code %d)\n", e.what(), e.code());
		return 1;
	}
	return 0;
}
