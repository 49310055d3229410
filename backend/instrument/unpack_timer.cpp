#include "backend/instrument/unpack_timer.h"

#include <chrono>

namespace loom::instrument {
namespace {
thread_local double unpack_ms_total = 0;
thread_local int64_t unpacked_bytes_total = 0;

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

UnpackTimer::UnpackTimer(int64_t bytes) : bytes_(bytes), start_ms_(now_ms()), span_("unpack", "unpack") {}

UnpackTimer::~UnpackTimer() {
  unpack_ms_total += now_ms() - start_ms_;
  unpacked_bytes_total += bytes_;
}

double unpacked_ms() { return unpack_ms_total; }
int64_t unpacked_bytes() { return unpacked_bytes_total; }

}  // namespace loom::instrument
