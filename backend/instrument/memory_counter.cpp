#include "backend/instrument/memory_counter.h"

#include <sys/resource.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <string>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include "backend/torch_compat.h"

namespace loom::memory {
namespace {

std::atomic<int64_t> current{0};
std::atomic<int64_t> peak{0};
std::mutex sizes_mutex;
// Sizes live in a map, not in a header before the block: ATen requires the DataPtr's
// context to equal its data pointer (ENVIRONMENT.md).
std::unordered_map<void*, size_t>& sizes() {
  static auto* m = new std::unordered_map<void*, size_t>();
  return *m;
}

void release(void* ptr) {
  if (!ptr) return;
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(sizes_mutex);
    auto it = sizes().find(ptr);
    if (it != sizes().end()) {
      n = it->second;
      sizes().erase(it);
    }
  }
  current -= static_cast<int64_t>(n);
  c10::free_cpu(ptr);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) LOOM_ALLOCATOR_ALLOCATE_QUALIFIER override {
    void* ptr = n ? c10::alloc_cpu(n) : nullptr;
    if (ptr) {
      {
        std::lock_guard<std::mutex> lock(sizes_mutex);
        sizes()[ptr] = n;
      }
      int64_t now = current += static_cast<int64_t>(n);
      int64_t seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
    }
    return {ptr, ptr, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  LOOM_ALLOCATOR_COPY_DATA
};

CountingAllocator allocator;
std::atomic<bool> installed{false};

}  // namespace

void install_counting_allocator() {
  if (installed.exchange(true)) return;
  c10::SetCPUAllocator(&allocator, /*priority=*/100);
}

bool counting_installed() { return installed.load(); }
int64_t current_bytes() { return current.load(); }
int64_t peak_bytes() { return peak.load(); }
void reset_peak() { peak.store(current.load()); }

int64_t begin_window() {
  int64_t enclosing = peak.load();
  reset_peak();
  return enclosing;
}

int64_t end_window(int64_t enclosing) {
  int64_t window = peak.load();
  int64_t seen = window;
  while (enclosing > seen && !peak.compare_exchange_weak(seen, enclosing)) {
  }
  return window;
}

int64_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:   164128 kB"
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace loom::memory
