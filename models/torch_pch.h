// Precompiled header of the LibTorch-facing library (models/).
#pragma once
#include <torch/nn/module.h>
#include <torch/types.h>
