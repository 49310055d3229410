// A BERT encoder with a masked-language-model head, with HuggingFace BertForMaskedLM names
// (bert.embeddings.word_embeddings, bert.encoder.layer.N.attention.self.query, cls.predictions...).
#pragma once

#include "models/nn/attention.h"
#include "models/nn/layers.h"

namespace loom::models {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 1024;
  int64_t num_layers = 24;
  int64_t num_heads = 16;
  int64_t intermediate_size = 4096;
  int64_t max_positions = 512;
  int64_t type_vocab_size = 2;
  double dropout = 0.0;
  double eps = 1e-12;
};

class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertConfig& c);
  torch::Tensor forward(const torch::Tensor& ids);
  nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  nn::LayerNorm LayerNorm{nullptr};
  nn::Dropout dropout{nullptr};
};
LOOM_MODULE(BertEmbeddings);

class BertSelfAttentionImpl : public torch::nn::Module, public nn::AttentionKernelChoice {
 public:
  explicit BertSelfAttentionImpl(const BertConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear query{nullptr}, key{nullptr}, value{nullptr};
  nn::Dropout dropout{nullptr};
  int64_t head_dim;
};
LOOM_MODULE(BertSelfAttention);

// dense -> dropout -> LayerNorm(x + residual); used after attention and after the MLP.
class BertOutputImpl : public torch::nn::Module {
 public:
  BertOutputImpl(int64_t in, const BertConfig& c, const std::string& type_name);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& residual);
  nn::Linear dense{nullptr};
  nn::LayerNorm LayerNorm{nullptr};
  nn::Dropout dropout{nullptr};
};
LOOM_MODULE(BertOutput);

class BertAttentionImpl : public torch::nn::Module {
 public:
  explicit BertAttentionImpl(const BertConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  BertSelfAttention self{nullptr};
  BertOutput output{nullptr};
};
LOOM_MODULE(BertAttention);

class BertIntermediateImpl : public torch::nn::Module {
 public:
  explicit BertIntermediateImpl(const BertConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear dense{nullptr};
  nn::Activation intermediate_act_fn{nullptr};
};
LOOM_MODULE(BertIntermediate);

class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  BertAttention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertOutput output{nullptr};
};
LOOM_MODULE(BertLayer);

class BertEncoderImpl : public torch::nn::Module {
 public:
  explicit BertEncoderImpl(const BertConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  std::shared_ptr<nn::List<BertLayer>> layer;
};
LOOM_MODULE(BertEncoder);

class BertModelImpl : public torch::nn::Module {
 public:
  explicit BertModelImpl(const BertConfig& c);
  torch::Tensor forward(const torch::Tensor& ids);
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};
};
LOOM_MODULE(BertModel);

class BertPredictionHeadTransformImpl : public torch::nn::Module {
 public:
  explicit BertPredictionHeadTransformImpl(const BertConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear dense{nullptr};
  nn::Activation transform_act_fn{nullptr};
  nn::LayerNorm LayerNorm{nullptr};
};
LOOM_MODULE(BertPredictionHeadTransform);

// transform -> decoder, whose weight is the word embedding's.
class BertLMPredictionHeadImpl : public torch::nn::Module {
 public:
  BertLMPredictionHeadImpl(const BertConfig& c, const torch::Tensor& word_embeddings);
  torch::Tensor forward(const torch::Tensor& x);
  BertPredictionHeadTransform transform{nullptr};
  nn::Linear decoder{nullptr};
};
LOOM_MODULE(BertLMPredictionHead);

class BertOnlyMLMHeadImpl : public torch::nn::Module {
 public:
  BertOnlyMLMHeadImpl(const BertConfig& c, const torch::Tensor& word_embeddings);
  torch::Tensor forward(const torch::Tensor& x);
  BertLMPredictionHead predictions{nullptr};
};
LOOM_MODULE(BertOnlyMLMHead);

// Token ids (B, T) -> MLM logits (B, T, vocab).
class BertForMaskedLMImpl : public torch::nn::Module {
 public:
  explicit BertForMaskedLMImpl(const BertConfig& c);
  torch::Tensor forward(const torch::Tensor& ids);
  BertConfig config;
  BertModel bert{nullptr};
  BertOnlyMLMHead cls{nullptr};
};
LOOM_MODULE(BertForMaskedLM);

}  // namespace loom::models
