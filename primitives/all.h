// The whole language at a glance: every built-in primitive, one file each in primitives/.
//
//   mesh(tp=, pp=)                          schedule-level tensor/pipeline degrees     mesh.cpp
//   shard(params, axis)                     Slapo tensor-parallel parameter sharding   shard.cpp
//   sync(mode, op)                          aggregate a sharded module's outputs/grads sync.cpp
//   checkpoint()                            recompute the module's forward in backward checkpoint.cpp
//   replace(impl)                           swap in a registered alternative module    replace.cpp
//   pipeline_split()                        pipeline stage boundary after this module  pipeline_split.cpp
//   shard_states(params=, grads=, optim=)   Lins sharding factors s_p, s_g, s_os       shard_states.cpp
//   fsdp()                                  shard_states(dp, dp, dp)                   fsdp.cpp
//   zero(stage=)                            ZeRO-1/2/3 as sharding factors             zero.cpp
//   prefetch(budget=)                       gather parameters ahead of use             prefetch.cpp
//   unshard(keep=)                          keep gathered parameters resident          unshard.cpp
//   offload(what, budget=)                  move optimizer states to host memory       offload.cpp
//   compress(ratio=, index_bits=, sparsity=) TAGC gradient compression                 compress.cpp
//   bucket()                                gather/reduce a module's parameters as one bucket.cpp
//   verify()                                differential test before training          verify.cpp
//   batch(micro=, accum=)                   per-rank micro-batch, micro-batches a step batch.cpp
// Test-only (LOOM_TEST_PRIMITIVES=1): faults that loom verify's tests must catch.
//   test_corrupt_shard(param=, rank=)       perturb one rank's shard of a weight       test_corrupt_shard.cpp
//   test_skip_reduction(param=)             never reduce one parameter's gradient      test_skip_reduction.cpp
//   test_release_early()                    backward finds the weights released        test_release_early.cpp
#pragma once

#define LOOM_BUILTIN_PRIMITIVES(X) \
  X(mesh) X(shard) X(sync) X(checkpoint) X(replace) X(pipeline_split) X(shard_states) X(fsdp) X(zero) \
  X(prefetch) X(unshard) X(offload) X(compress) X(bucket) X(verify) X(batch) \
  X(test_corrupt_shard) X(test_skip_reduction) X(test_release_early)

namespace loom {
// Makes sure every built-in primitive is linked and registered; idempotent.
void register_builtin_primitives();
// Whether test-only primitives may be used: LOOM_TEST_PRIMITIVES=1 in the environment.
bool test_primitives_enabled();
}  // namespace loom
