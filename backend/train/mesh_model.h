// What one rank holds of the model: its unique parameters, those of its pipeline stage, and,
// for a checkpoint, the whole model put back together on rank 0 from a mesh's ranks.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "backend/comm/communicator.h"
#include "backend/exec/tensor_parallel.h"
#include "backend/lower/mesh_layout.h"
#include "backend/lower/pipeline_stages.h"

namespace loom {

// The model's parameters, each once: LibTorch's parameters() lists a tied tensor once per owner
// (wte and lm_head), and the optimizer and clipping must see it once (under its first name).
std::pair<std::vector<torch::Tensor>, std::vector<std::string>> unique_parameters(torch::nn::Module& model);

// Another stage's parameters: their memory goes, and this rank neither trains nor reduces them;
// `params` and `names` keep this stage's and those every stage holds.
void keep_stage_parameters(const PipelineStages& stages, int stage, std::vector<torch::Tensor>& params,
                           std::vector<std::string>& names);

// Under a mesh rank 0 holds only its slices and its stage: every rank calls this (with every
// parameter resident) to put the whole model together on rank 0, in `whole` (a fresh model of
// the same architecture, only on rank 0; null elsewhere). Each parameter comes from the ranks
// of replica 0 whose stage holds it (stage 0 for those every stage holds), its tensor-parallel
// slices concatenated along their axis, point to point over `world`. `model`: this rank's.
void gather_whole_model(comm::Group& world, const MeshLayout& at, torch::nn::Module& model, const TensorParallel& tensor_parallel,
                        const PipelineStages* stages, torch::nn::Module* whole);

}  // namespace loom
