#include "backend/instrument/unpack_timer.h"

#include <atomic>
#include <chrono>

namespace loom::instrument {
namespace {
thread_local double unpack_ms_total = 0;
thread_local int64_t unpacked_bytes_total = 0;
std::atomic<int64_t> unpack_ns_all_threads{0}, unpacked_bytes_all_threads_total{0};

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

UnpackTimer::UnpackTimer(int64_t bytes) : bytes_(bytes), start_ms_(now_ms()), span_("unpack", "unpack") {}

UnpackTimer::~UnpackTimer() {
  double ms = now_ms() - start_ms_;
  unpack_ms_total += ms;
  unpacked_bytes_total += bytes_;
  unpack_ns_all_threads += static_cast<int64_t>(ms * 1e6);
  unpacked_bytes_all_threads_total += bytes_;
}

double unpacked_ms() { return unpack_ms_total; }
int64_t unpacked_bytes() { return unpacked_bytes_total; }
double unpacked_ms_all_threads() { return static_cast<double>(unpack_ns_all_threads.load()) / 1e6; }
int64_t unpacked_bytes_all_threads() { return unpacked_bytes_all_threads_total.load(); }

}  // namespace loom::instrument
