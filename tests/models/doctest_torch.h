// doctest after LibTorch: glog (pulled in by c10) defines CHECK* macros that
// would silently replace doctest's, so they are removed first.
#pragma once

#include <torch/torch.h>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>
