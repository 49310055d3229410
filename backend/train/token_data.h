// Training data: byte-level token files (memory-mapped) and reproducible synthetic tokens,
// sampled so that each rank takes its own deterministic slice of every global batch. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom {

// The token file format: a 32-byte header then the tokens, little-endian.
//   bytes 0-7   "LOOMTOK1"
//   bytes 8-11  vocabulary size (uint32)
//   bytes 12-15 bytes per token (uint32: 1 or 2)
//   bytes 16-23 token count (uint64)
//   bytes 24-31 reserved (zero)
struct TokenFileHeader {
  uint32_t vocab_size = 256;
  uint32_t token_bytes = 1;
  uint64_t count = 0;
};

// Writes the bytes of the given text files as one token file (vocabulary: the 256 byte values).
// Returns the header written. Unreadable inputs are a UserError.
TokenFileHeader prepare_token_file(const std::vector<std::string>& inputs, const std::string& out);

// A source of training sequences.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual uint32_t vocab_size() const = 0;
  // Writes `length` tokens of sample `index` (the same tokens on every rank and every run).
  virtual void sample(uint64_t index, int64_t length, int64_t* out) const = 0;
  virtual std::string describe() const = 0;
};

// Opens a token file, memory-mapped. A wrong magic, a truncated file, an empty file or
// one shorter than `min_tokens` is a UserError saying what is wrong and what to do.
std::unique_ptr<TokenSource> open_token_file(const std::string& path, int64_t min_tokens);
// Uniform random tokens from `seed`; the sample index selects them.
std::unique_ptr<TokenSource> synthetic_tokens(uint32_t vocab_size, uint64_t seed);

// Which samples a rank reads: the global batch of (step, micro) is world * micro_batch
// consecutive sample indices, and rank r reads its micro_batch of them. World 1 with the
// whole batch therefore reads exactly what world N reads together.
uint64_t sample_index(int64_t step, int64_t micro, int64_t accum, int world, int rank, int64_t micro_batch, int64_t i);

// Mixes bits of several values into a 64-bit hash (splitmix64), for reproducible sampling.
uint64_t mix64(uint64_t x);

}  // namespace loom
