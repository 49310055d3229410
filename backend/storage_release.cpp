#include "backend/storage_release.h"

namespace loom {

void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

void refill_storage(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl();
  size_t bytes = static_cast<size_t>(t.numel() * t.element_size());
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

}  // namespace loom
