// vigring.hpp: C++17 RAII wrappers over vigring.h (ring ABI version 3).
//
// A loan and a result give their slot back when they go out of scope; errors
// are vig::error exceptions carrying the VIGRING_E* code and vigring's
// message (what happened and what to do); outputs are typed views in place in
// shared memory. Timeouts are std::chrono::milliseconds (-1: no limit).
//
// In exactly one translation unit, before any other #include:
//
//     #define VIGRING_IMPLEMENTATION
//     #include "vigring.hpp"
//
// (vigring.hpp defines _GNU_SOURCE for it when needed; elsewhere a plain
// #include "vigring.hpp".) Use:
//
//     vig::ring ring;                               // "@vig-ring", a sealed memfd
//     vig::frame frame = ring.loan();                // a frame buffer in shared memory
//     std::size_t n = capture(frame.data(), frame.size());
//     ring.submit(std::move(frame), {"det", "cam", seq, vigring_now_ns(), n});
//     vig::result res = ring.next();                // spins briefly, then sleeps in poll
//     if (res.ok())
//         for (int i = 0; i < res.outputs(); i++) {
//             vig::output_view o = res.output(i);        // o.name, o.datatype, o.shape
//             for (float v : o.as<float>()) use(v);     // checked: FP32-sized, aligned
//         }
//     // res releases its slot here; ring closes the session at scope end
//
// The names live in namespace vig (vigring is the C struct). Threading is vigring.h's: loan/submit from one thread at a time, next from
// one thread at a time (results may be destroyed on the next thread).
#ifndef VIGRING_HPP
#define VIGRING_HPP

#if defined(VIGRING_IMPLEMENTATION) && !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE)
#define _GNU_SOURCE 1
#endif
#include "vigring.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace vig {

// error is a failed vigring call: code() is the VIGRING_E* value, what() the
// message (naming the fix).
class error : public std::runtime_error {
public:
	error(int code, const char *msg) : std::runtime_error(msg), code_(code) {}
	int code() const noexcept { return code_; }
	bool timed_out() const noexcept { return code_ == VIGRING_ETIMEOUT; }
	bool closed() const noexcept { return code_ == VIGRING_ECLOSED; }

private:
	int code_;
};

// view is a typed, bounds-known view of bytes in shared memory.
template <class T>
class view {
public:
	view(const T *p, std::size_t n) noexcept : p_(p), n_(n) {}
	const T *begin() const noexcept { return p_; }
	const T *end() const noexcept { return p_ + n_; }
	const T *data() const noexcept { return p_; }
	std::size_t size() const noexcept { return n_; }
	const T &operator[](std::size_t i) const noexcept { return p_[i]; }

private:
	const T *p_;
	std::size_t n_;
};

// output is one output tensor of a result, in place.
struct output_view {
	std::string_view name, datatype;
	view<int64_t> shape;
	view<uint8_t> bytes;

	// as views the bytes as T: throws vig::error (VIGRING_EINVAL) when the
	// length is not a multiple of sizeof(T) or the bytes are misaligned for T.
	template <class T>
	view<T> as() const
	{
		if (bytes.size() % sizeof(T) != 0 || reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(T) != 0)
			throw error(VIGRING_EINVAL, ("vigring: output " + std::string(name) + " (" + std::string(datatype) + ", " +
			                             std::to_string(bytes.size()) + " bytes) is not an array of " + std::to_string(sizeof(T)) + "-byte elements")
			                                .c_str());
		return view<T>(reinterpret_cast<const T *>(bytes.data()), bytes.size() / sizeof(T));
	}
};

class ring;

// frame is a request payload slot on loan (a frame buffer in shared memory):
// unloaned at destruction unless it was submitted (submit takes it by rvalue).
class frame {
public:
	frame(frame &&o) noexcept : r_(std::exchange(o.r_, nullptr)), slot_(o.slot_), buf_(o.buf_), size_(o.size_) {}
	frame &operator=(frame &&o) noexcept
	{
		if (this != &o) {
			reset();
			r_ = std::exchange(o.r_, nullptr);
			slot_ = o.slot_, buf_ = o.buf_, size_ = o.size_;
		}
		return *this;
	}
	frame(const frame &) = delete;
	frame &operator=(const frame &) = delete;
	~frame() { reset(); }

	uint8_t *data() const noexcept { return r_ ? buf_ : nullptr; }
	std::size_t size() const noexcept { return r_ ? size_ : 0; }
	uint32_t slot() const noexcept { return slot_; }
	explicit operator bool() const noexcept { return r_ != nullptr; }

private:
	friend class ring;
	frame(vigring *r, uint32_t slot, uint8_t *buf, std::size_t size) noexcept : r_(r), slot_(slot), buf_(buf), size_(size) {}
	void reset() noexcept
	{
		if (r_)
			vigring_unloan(r_, slot_);
		r_ = nullptr;
	}
	vigring *r_;
	uint32_t slot_;
	uint8_t *buf_;
	std::size_t size_;
};

// result is vig's answer to one request; its slot is released at destruction.
class result {
public:
	result(result &&o) noexcept : r_(std::exchange(o.r_, nullptr)), res_(o.res_) {}
	result &operator=(result &&o) noexcept
	{
		if (this != &o) {
			reset();
			r_ = std::exchange(o.r_, nullptr);
			res_ = o.res_;
		}
		return *this;
	}
	result(const result &) = delete;
	result &operator=(const result &) = delete;
	~result() { reset(); }

	bool ok() const noexcept { return res_.status == VIGRING_OK; }
	uint32_t status() const noexcept { return res_.status; }
	std::string_view status_name() const noexcept { return vigring_status_name(res_.status); }
	std::string_view message() const noexcept { return res_.message; } // why, when not ok()
	uint64_t tag() const noexcept { return res_.tag; }
	uint64_t frame() const noexcept { return res_.frame; }
	std::string_view stream() const noexcept { return res_.stream; }
	std::string_view model() const noexcept { return res_.model; }
	int outputs() const noexcept { return res_.ntensors; }

	// output i, in [0, outputs()): throws VIGRING_EINVAL outside. Valid while
	// this result lives.
	output_view output(int i) const
	{
		if (i < 0 || i >= res_.ntensors)
			throw error(VIGRING_EINVAL, ("vigring: output " + std::to_string(i) + " of a result with " + std::to_string(res_.ntensors) + " outputs").c_str());
		const vigring_tensor &t = res_.tensors[i];
		uint64_t len = 0;
		const uint8_t *p = r_ ? vigring_output(r_, &res_, i, &len) : nullptr;
		return output_view{t.name, t.datatype, view<int64_t>(t.shape, t.rank), view<uint8_t>(p, p ? static_cast<std::size_t>(len) : 0)};
	}
	const vigring_result &raw() const noexcept { return res_; }

private:
	friend class ring;
	result(vigring *r, const vigring_result &res) noexcept : r_(r), res_(res) {}
	void reset() noexcept
	{
		if (r_)
			vigring_release(r_, &res_);
		r_ = nullptr;
	}
	vigring *r_;
	vigring_result res_;
};

// request names what to run on a submitted frame.
struct request {
	std::string model;
	std::string stream;     // "": the model's name
	uint64_t frame = 0;
	int64_t capture_ns = 0; // CLOCK_MONOTONIC (vigring_now_ns); 0: none
	std::size_t len = 0;    // bytes written at the start of the loan
};

// ring is one session with vig, closed at destruction.
class ring {
public:
	explicit ring(const std::string &addr = VIGRING_DEFAULT_ADDRESS, const vigring_config *cfg = nullptr)
	{
		int rc = vigring_connect(&r_, addr.c_str(), cfg);
		if (rc != 0)
			throw error(rc, vigring_error(&r_));
	}
	ring(const ring &) = delete;
	ring &operator=(const ring &) = delete;
	~ring() { vigring_close(&r_); }

	// loan waits for a free request slot (fails at once when this process
	// holds every slot on loan).
	vig::frame loan(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1))
	{
		uint32_t slot;
		uint8_t *buf;
		check(vigring_loan(&r_, &slot, &buf, ms(timeout)));
		return vig::frame(&r_, slot, buf, static_cast<std::size_t>(vigring_slot_size(&r_)));
	}

	// submit posts the loaned frame and returns the tag its result will carry.
	// On failure (an exception) l keeps the loan: std::move(l) only casts, so
	// the caller's frame still holds the slot, to retry or to unloan at scope
	// end.
	uint64_t submit(vig::frame &&l, const request &q)
	{
		if (!l)
			throw error(VIGRING_EINVAL, "vigring: submit of an empty loan (already submitted or moved from)");
		vigring_request c;
		std::memset(&c, 0, sizeof c);
		c.model = q.model.c_str();
		c.stream = q.stream.c_str();
		c.frame = q.frame;
		c.capture_ns = q.capture_ns;
		c.len = q.len;
		uint64_t tag = 0;
		check(vigring_submit(&r_, l.slot_, &c, &tag));
		l.r_ = nullptr; // vig owns the slot until it answers
		return tag;
	}

	// next waits for the next result (fails at once without a timeout when no
	// request awaits one).
	result next(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1))
	{
		vigring_result res;
		check(vigring_next(&r_, &res, ms(timeout)));
		return result(&r_, res);
	}

	int outstanding() const noexcept { return vigring_outstanding(&r_); }
	int max_outstanding() const noexcept { return r_.max_outstanding; }
	std::size_t slot_size() const noexcept { return static_cast<std::size_t>(vigring_slot_size(&r_)); }
	vigring *raw() noexcept { return &r_; }

private:
	static int ms(std::chrono::milliseconds t) { return t.count() < 0 ? -1 : static_cast<int>(t.count()); }
	void check(int rc)
	{
		if (rc != 0)
			throw error(rc, vigring_error(&r_));
	}
	vigring r_;
};

} // namespace vig

#endif // VIGRING_HPP
