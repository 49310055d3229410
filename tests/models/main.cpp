// The doctest runner of the LibTorch-side tests (models, interception, trees).
#define DOCTEST_CONFIG_IMPLEMENT
#include "doctest_torch.h"

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  doctest::Context context(argc, argv);
  return context.run();
}
