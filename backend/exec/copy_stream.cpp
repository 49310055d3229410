#include "backend/exec/copy_stream.h"

namespace loom {

CopyStream::CopyStream() : worker_([this] { serve(); }) {}

CopyStream::~CopyStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  worker_.join();
}

std::future<void> CopyStream::submit(std::function<void()> copy) {
  std::packaged_task<void()> task(std::move(copy));
  std::future<void> done = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push(std::move(task));
  }
  wake_.notify_one();
  return done;
}

void CopyStream::serve() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything submitted ran
      task = std::move(queue_.front());
      queue_.pop();
    }
    task();
  }
}

}  // namespace loom
