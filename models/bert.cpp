#include "models/bert.h"

namespace loom::models {

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertConfig& c) : torch::nn::Module("BertEmbeddings") {
  word_embeddings = register_module("word_embeddings", nn::Embedding(c.vocab_size, c.hidden_size));
  position_embeddings = register_module("position_embeddings", nn::Embedding(c.max_positions, c.hidden_size));
  token_type_embeddings = register_module("token_type_embeddings", nn::Embedding(c.type_vocab_size, c.hidden_size));
  LayerNorm = register_module("LayerNorm", nn::LayerNorm(c.hidden_size, c.eps));
  dropout = register_module("dropout", nn::Dropout(c.dropout));
}

torch::Tensor BertEmbeddingsImpl::forward(const torch::Tensor& ids) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(ids.device());
  torch::Tensor pos = torch::arange(ids.size(1), opts);
  torch::Tensor types = torch::zeros_like(ids);
  return dropout(LayerNorm(word_embeddings(ids) + position_embeddings(pos) + token_type_embeddings(types)));
}

BertSelfAttentionImpl::BertSelfAttentionImpl(const BertConfig& c) : torch::nn::Module("BertSelfAttention"), head_dim(c.hidden_size / c.num_heads) {
  query = register_module("query", nn::Linear(c.hidden_size, c.hidden_size));
  key = register_module("key", nn::Linear(c.hidden_size, c.hidden_size));
  value = register_module("value", nn::Linear(c.hidden_size, c.hidden_size));
  dropout = register_module("dropout", nn::Dropout(c.dropout));
}

torch::Tensor BertSelfAttentionImpl::forward(const torch::Tensor& x) {
  auto y = attend(nn::split_heads(query(x), head_dim), nn::split_heads(key(x), head_dim),
                 nn::split_heads(value(x), head_dim), false, dropout->p, is_training());
  return nn::merge_heads(y);
}

BertOutputImpl::BertOutputImpl(int64_t in, const BertConfig& c, const std::string& type_name) : torch::nn::Module(type_name) {
  dense = register_module("dense", nn::Linear(in, c.hidden_size));
  LayerNorm = register_module("LayerNorm", nn::LayerNorm(c.hidden_size, c.eps));
  dropout = register_module("dropout", nn::Dropout(c.dropout));
}

torch::Tensor BertOutputImpl::forward(const torch::Tensor& x, const torch::Tensor& residual) {
  return LayerNorm(dropout(dense(x)) + residual);
}

BertAttentionImpl::BertAttentionImpl(const BertConfig& c) : torch::nn::Module("BertAttention") {
  self = register_module("self", BertSelfAttention(c));
  output = register_module("output", BertOutput(c.hidden_size, c, "BertSelfOutput"));
}

torch::Tensor BertAttentionImpl::forward(const torch::Tensor& x) { return output(self(x), x); }

BertIntermediateImpl::BertIntermediateImpl(const BertConfig& c) : torch::nn::Module("BertIntermediate") {
  dense = register_module("dense", nn::Linear(c.hidden_size, c.intermediate_size));
  intermediate_act_fn = register_module("intermediate_act_fn", nn::Activation("gelu"));
}

torch::Tensor BertIntermediateImpl::forward(const torch::Tensor& x) { return intermediate_act_fn(dense(x)); }

BertLayerImpl::BertLayerImpl(const BertConfig& c) : torch::nn::Module("BertLayer") {
  attention = register_module("attention", BertAttention(c));
  intermediate = register_module("intermediate", BertIntermediate(c));
  output = register_module("output", BertOutput(c.intermediate_size, c, "BertOutput"));
}

torch::Tensor BertLayerImpl::forward(const torch::Tensor& x) {
  torch::Tensor a = attention(x);
  return output(intermediate(a), a);
}

BertEncoderImpl::BertEncoderImpl(const BertConfig& c) : torch::nn::Module("BertEncoder") {
  layer = register_module("layer", std::make_shared<nn::List<BertLayer>>());
  for (int64_t i = 0; i < c.num_layers; ++i) layer->push_back(BertLayer(c));
}

torch::Tensor BertEncoderImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = x;
  for (auto& l : *layer) y = l(y);
  return y;
}

BertModelImpl::BertModelImpl(const BertConfig& c) : torch::nn::Module("BertModel") {
  embeddings = register_module("embeddings", BertEmbeddings(c));
  encoder = register_module("encoder", BertEncoder(c));
}

torch::Tensor BertModelImpl::forward(const torch::Tensor& ids) { return encoder(embeddings(ids)); }

BertPredictionHeadTransformImpl::BertPredictionHeadTransformImpl(const BertConfig& c)
    : torch::nn::Module("BertPredictionHeadTransform") {
  dense = register_module("dense", nn::Linear(c.hidden_size, c.hidden_size));
  transform_act_fn = register_module("transform_act_fn", nn::Activation("gelu"));
  LayerNorm = register_module("LayerNorm", nn::LayerNorm(c.hidden_size, c.eps));
}

torch::Tensor BertPredictionHeadTransformImpl::forward(const torch::Tensor& x) { return LayerNorm(transform_act_fn(dense(x))); }

BertLMPredictionHeadImpl::BertLMPredictionHeadImpl(const BertConfig& c, const torch::Tensor& word_embeddings)
    : torch::nn::Module("BertLMPredictionHead") {
  transform = register_module("transform", BertPredictionHeadTransform(c));
  decoder = register_module("decoder", nn::Linear(c.hidden_size, c.vocab_size, true, 0.02, word_embeddings));
}

torch::Tensor BertLMPredictionHeadImpl::forward(const torch::Tensor& x) { return decoder(transform(x)); }

BertOnlyMLMHeadImpl::BertOnlyMLMHeadImpl(const BertConfig& c, const torch::Tensor& word_embeddings)
    : torch::nn::Module("BertOnlyMLMHead") {
  predictions = register_module("predictions", BertLMPredictionHead(c, word_embeddings));
}

torch::Tensor BertOnlyMLMHeadImpl::forward(const torch::Tensor& x) { return predictions(x); }

BertForMaskedLMImpl::BertForMaskedLMImpl(const BertConfig& c) : torch::nn::Module("BertForMaskedLM"), config(c) {
  bert = register_module("bert", BertModel(c));
  cls = register_module("cls", BertOnlyMLMHead(c, bert->embeddings->word_embeddings->weight));
}

torch::Tensor BertForMaskedLMImpl::forward(const torch::Tensor& ids) { return cls(bert(ids)); }

}  // namespace loom::models
