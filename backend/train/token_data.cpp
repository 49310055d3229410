#include "backend/train/token_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backend/train/output_paths.h"
#include "lang/diagnostics.h"

namespace loom {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'T', 'O', 'K', '1'};
constexpr size_t kHeaderBytes = 32;

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw UserError(SourceRange{}, "data file '" + path + "': " + what,
                  "write token files with `loom data prepare TEXT... --out FILE.bin`, or use --data synthetic");
}

class MappedTokenFile : public TokenSource {
 public:
  MappedTokenFile(std::string path, int64_t min_tokens) : path_(std::move(path)) {
    int fd = ::open(path_.c_str(), O_RDONLY);
    if (fd < 0) bad_file(path_, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    fstat(fd, &st);
    size_ = static_cast<size_t>(st.st_size);
    if (size_ == 0) {
      ::close(fd);
      bad_file(path_, "the file is empty");
    }
    if (size_ < kHeaderBytes) {
      ::close(fd);
      bad_file(path_, "truncated: " + std::to_string(size_) + " bytes, shorter than the 32-byte header");
    }
    data_ = static_cast<const uint8_t*>(mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0));
    ::close(fd);
    if (data_ == MAP_FAILED) bad_file(path_, std::string("cannot map: ") + std::strerror(errno));
    if (std::memcmp(data_, kMagic, 8) != 0) bad_file(path_, "not a Loom token file (no LOOMTOK1 header)");
    std::memcpy(&header_.vocab_size, data_ + 8, 4);
    std::memcpy(&header_.token_bytes, data_ + 12, 4);
    std::memcpy(&header_.count, data_ + 16, 8);
    if (header_.token_bytes != 1 && header_.token_bytes != 2)
      bad_file(path_, "header says " + std::to_string(header_.token_bytes) + " bytes per token; 1 or 2 are supported");
    if (header_.vocab_size == 0 || header_.vocab_size > (header_.token_bytes == 1 ? 256u : 65536u))
      bad_file(path_, "header has an invalid vocabulary size " + std::to_string(header_.vocab_size));
    uint64_t need = kHeaderBytes + header_.count * header_.token_bytes;
    if (size_ < need)
      bad_file(path_, "truncated: the header promises " + std::to_string(header_.count) + " tokens (" + std::to_string(need) +
                          " bytes) but the file has " + std::to_string(size_) + " bytes");
    if (header_.count == 0) bad_file(path_, "it holds no tokens");
    if (static_cast<int64_t>(header_.count) < min_tokens)
      bad_file(path_, "it holds " + std::to_string(header_.count) + " tokens, fewer than one sequence of " +
                          std::to_string(min_tokens) + "; use more text or a shorter --seq");
  }
  ~MappedTokenFile() override {
    if (data_ && data_ != MAP_FAILED) munmap(const_cast<uint8_t*>(data_), size_);
  }
  uint32_t vocab_size() const override { return header_.vocab_size; }
  void sample(uint64_t index, int64_t length, int64_t* out) const override {
    // Each sample starts at a pseudo-random offset, the same on every rank and run.
    uint64_t span = header_.count - static_cast<uint64_t>(length) + 1;
    uint64_t start = mix64(index) % span;
    const uint8_t* p = data_ + kHeaderBytes + start * header_.token_bytes;
    for (int64_t i = 0; i < length; ++i) {
      if (header_.token_bytes == 1) {
        out[i] = p[i];
      } else {
        uint16_t t;
        std::memcpy(&t, p + 2 * i, 2);
        out[i] = t;
      }
    }
  }
  std::string describe() const override {
    return path_ + " (" + std::to_string(header_.count) + " tokens, vocabulary " + std::to_string(header_.vocab_size) + ")";
  }

 private:
  std::string path_;
  size_t size_ = 0;
  const uint8_t* data_ = nullptr;
  TokenFileHeader header_;
};

class SyntheticTokens : public TokenSource {
 public:
  SyntheticTokens(uint32_t vocab, uint64_t seed) : vocab_(vocab), seed_(seed) {}
  uint32_t vocab_size() const override { return vocab_; }
  void sample(uint64_t index, int64_t length, int64_t* out) const override {
    for (int64_t i = 0; i < length; ++i) out[i] = static_cast<int64_t>(mix64(seed_ ^ mix64(index * 1000003ULL + i)) % vocab_);
  }
  std::string describe() const override { return "synthetic tokens (vocabulary " + std::to_string(vocab_) + ")"; }

 private:
  uint32_t vocab_;
  uint64_t seed_;
};

}  // namespace

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

TokenFileHeader prepare_token_file(const std::vector<std::string>& inputs, const std::string& out) {
  if (inputs.empty()) throw UserError(SourceRange{}, "no input text files given", "usage: loom data prepare TEXT... --out FILE.bin");
  std::string tokens;
  for (auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError(SourceRange{}, "cannot read text file '" + path + "'", "check the path");
    std::stringstream buf;
    buf << in.rdbuf();
    tokens += buf.str();
  }
  if (tokens.empty()) throw UserError(SourceRange{}, "the input text files are empty", "give files with some text");
  TokenFileHeader h;
  h.count = tokens.size();
  std::string tmp = out + ".tmp";  // renamed over `out` once whole
  char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  std::memcpy(header + 8, &h.vocab_size, 4);
  std::memcpy(header + 12, &h.token_bytes, 4);
  std::memcpy(header + 16, &h.count, 8);
  write_output_file(tmp, {std::string_view(header, kHeaderBytes), tokens}, "--out", "free space, or choose another --out file");
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw UserError(SourceRange{}, "--out: cannot rename " + tmp + " to " + out + ": " + why, "choose another --out file");
  }
  return h;
}

std::unique_ptr<TokenSource> open_token_file(const std::string& path, int64_t min_tokens) {
  return std::make_unique<MappedTokenFile>(path, min_tokens);
}

std::unique_ptr<TokenSource> synthetic_tokens(uint32_t vocab_size, uint64_t seed) {
  return std::make_unique<SyntheticTokens>(vocab_size, seed);
}

uint64_t sample_index(int64_t step, int64_t micro, int64_t accum, int world, int rank, int64_t micro_batch, int64_t i) {
  uint64_t global_batch = static_cast<uint64_t>(world) * micro_batch;
  return (static_cast<uint64_t>(step) * accum + micro) * global_batch + static_cast<uint64_t>(rank) * micro_batch + i;
}

}  // namespace loom
