// The ATen schemas (native_functions.yaml) of the ops the .pt2 reader fills
// omitted arguments for. Keep rows in the order of the header: recurrent,
// weighted layers, time-axis ops, elementwise ops, shape ops, constants.
// Then the operators a node's target may name at all (aten_ops.inc).
#include "checkpoint/aten_schema.h"

#include <algorithm>
#include <iterator>

namespace ferry::conv {
namespace {

#include "checkpoint/aten_ops.inc"

// _SYM_OPS of torch/_export/serde/serialize.py that the verifier
// (torch/_export/verifier.py) also admits, as the serializer names them
// ("<module>.<name>"; torch.sym_sqrt is torch._sym_sqrt).
constexpr std::string_view kSymbolicOps[] = {
    "_operator.add",      "_operator.and_",   "_operator.eq",      "_operator.floordiv", "_operator.ge",
    "_operator.gt",       "_operator.le",     "_operator.lshift",  "_operator.lt",       "_operator.mod",
    "_operator.mul",      "_operator.ne",     "_operator.neg",     "_operator.or_",      "_operator.pow",
    "_operator.rshift",   "_operator.sub",    "_operator.truediv", "math.trunc",         "torch._sym_sqrt",
    "torch.sym_float",    "torch.sym_int",    "torch.sym_ite",     "torch.sym_max",      "torch.sym_min",
    "torch.sym_not",      "torch.sym_sqrt",
};

template <size_t N>
bool sorted_contains(const std::string_view (&table)[N], std::string_view s) {
  const auto it = std::lower_bound(std::begin(table), std::end(table), s);
  return it != std::end(table) && *it == s;
}

constexpr AtenDefault req() { return {AtenDefault::kRequired, 0, nullptr}; }
constexpr AtenDefault none() { return {AtenDefault::kNone, 0, nullptr}; }
constexpr AtenDefault integer(double v) { return {AtenDefault::kInt, v, nullptr}; }
constexpr AtenDefault ints1(double v) { return {AtenDefault::kInts1, v, nullptr}; }
constexpr AtenDefault ints_empty() { return {AtenDefault::kIntsEmpty, 0, nullptr}; }
constexpr AtenDefault real(double v) { return {AtenDefault::kFloat, v, nullptr}; }
constexpr AtenDefault boolean(bool v) { return {AtenDefault::kBool, v ? 1.0 : 0.0, nullptr}; }
constexpr AtenDefault text(const char* t) { return {AtenDefault::kString, 0, t}; }

// Recurrent ops: (input, hx, params, has_biases, num_layers, dropout, train,
// bidirectional, batch_first); lstm's hx is a list (h0, c0).
#define FERRY_RNN_ARGS                                                                              \
  {{"input", req()}, {"hx", req()}, {"params", req()}, {"has_biases", req()}, {"num_layers", req()}, \
   {"dropout", req()}, {"train", req()}, {"bidirectional", req()}, {"batch_first", req()}}
#define FERRY_RNN_ATTRIBUTES(nonlinearity)                                                     \
  {{"batch_first", "batch_first", nullptr}, {"bidirectional", "bidirectional", nullptr},      \
   {"num_layers", "num_layers", nullptr}, {"has_biases", "bias", nullptr},                    \
   {nullptr, "nonlinearity", nonlinearity}}
#define FERRY_CONV_ATTRIBUTES                                                                         \
  {{"stride", "stride", nullptr}, {"padding", "padding", nullptr}, {"dilation", "dilation", nullptr}, \
   {"groups", "groups", nullptr}}

const AtenSchema kSchemas[] = {
    // --- recurrent layers
    {"aten.lstm.input", FERRY_RNN_ARGS, "params", FERRY_RNN_ATTRIBUTES(nullptr)},
    {"aten.gru.input", FERRY_RNN_ARGS, "params", FERRY_RNN_ATTRIBUTES(nullptr)},
    {"aten.rnn_tanh.input", FERRY_RNN_ARGS, "params", FERRY_RNN_ATTRIBUTES("tanh")},
    {"aten.rnn_relu.input", FERRY_RNN_ARGS, "params", FERRY_RNN_ATTRIBUTES("relu")},
    // --- layers with weights
    {"aten.linear.default", {{"input", req()}, {"weight", req()}, {"bias", none()}}, "weight", {}},
    {"aten.conv1d.default",
     {{"input", req()}, {"weight", req()}, {"bias", none()}, {"stride", ints1(1)}, {"padding", ints1(0)},
      {"dilation", ints1(1)}, {"groups", integer(1)}},
     "weight",
     FERRY_CONV_ATTRIBUTES},
    {"aten.conv1d.padding",
     {{"input", req()}, {"weight", req()}, {"bias", none()}, {"stride", ints1(1)}, {"padding", text("valid")},
      {"dilation", ints1(1)}, {"groups", integer(1)}},
     "weight",
     FERRY_CONV_ATTRIBUTES},
    {"aten.convolution.default",
     {{"input", req()}, {"weight", req()}, {"bias", req()}, {"stride", req()}, {"padding", req()},
      {"dilation", req()}, {"transposed", req()}, {"output_padding", req()}, {"groups", req()}},
     "weight",
     FERRY_CONV_ATTRIBUTES},
    {"aten.batch_norm.default",
     {{"input", req()}, {"weight", req()}, {"bias", req()}, {"running_mean", req()}, {"running_var", req()},
      {"training", req()}, {"momentum", req()}, {"eps", req()}, {"cudnn_enabled", req()}},
     "running_mean",
     {{"eps", "eps", nullptr}}},
    {"aten._native_batch_norm_legit_no_training.default",
     {{"input", req()}, {"weight", req()}, {"bias", req()}, {"running_mean", req()}, {"running_var", req()},
      {"momentum", req()}, {"eps", req()}},
     "running_mean",
     {{"eps", "eps", nullptr}}},
    {"aten.layer_norm.default",
     {{"input", req()}, {"normalized_shape", req()}, {"weight", none()}, {"bias", none()}, {"eps", real(1e-5)},
      {"cudnn_enable", boolean(true)}},
     "weight",
     {{"eps", "eps", nullptr}}},
    {"aten.native_layer_norm.default",
     {{"input", req()}, {"normalized_shape", req()}, {"weight", req()}, {"bias", req()}, {"eps", req()}},
     "weight",
     {{"eps", "eps", nullptr}}},
    {"aten.prelu.default", {{"self", req()}, {"weight", req()}}, "weight", {}},
    {"aten._prelu_kernel.default", {{"self", req()}, {"weight", req()}}, "weight", {}},
    {"aten.embedding.default",
     {{"weight", req()}, {"indices", req()}, {"padding_idx", integer(-1)}, {"scale_grad_by_freq", boolean(false)},
      {"sparse", boolean(false)}},
     "weight",
     {}},
    // --- the time axis
    {"aten.select.int", {{"self", req()}, {"dim", req()}, {"index", req()}}, nullptr, {}},
    {"aten.slice.Tensor",
     {{"self", req()}, {"dim", integer(0)}, {"start", none()}, {"end", none()}, {"step", integer(1)}},
     nullptr,
     {}},
    {"aten.mean.dim", {{"self", req()}, {"dim", req()}, {"keepdim", boolean(false)}, {"dtype", none()}}, nullptr, {}},
    {"aten.amax.default", {{"self", req()}, {"dim", ints_empty()}, {"keepdim", boolean(false)}}, nullptr, {}},
    {"aten.max.dim", {{"self", req()}, {"dim", req()}, {"keepdim", boolean(false)}}, nullptr, {}},
    {"aten.squeeze.dim", {{"self", req()}, {"dim", req()}}, nullptr, {}},
    {"aten.squeeze.dims", {{"self", req()}, {"dim", req()}}, nullptr, {}},
    // --- elementwise
    {"aten.add.Tensor", {{"self", req()}, {"other", req()}, {"alpha", integer(1)}}, nullptr, {}},
    {"aten.relu.default", {{"self", req()}}, nullptr, {}},
    {"aten.relu_.default", {{"self", req()}}, nullptr, {}},
    {"aten.tanh.default", {{"self", req()}}, nullptr, {}},
    {"aten.tanh_.default", {{"self", req()}}, nullptr, {}},
    {"aten.sigmoid.default", {{"self", req()}}, nullptr, {}},
    {"aten.sigmoid_.default", {{"self", req()}}, nullptr, {}},
    {"aten.silu.default", {{"self", req()}}, nullptr, {}},
    {"aten.silu_.default", {{"self", req()}}, nullptr, {}},
    {"aten.relu6.default", {{"self", req()}}, nullptr, {}},
    {"aten.gelu.default", {{"self", req()}, {"approximate", text("none")}}, nullptr, {}},
    {"aten.gelu_.default", {{"self", req()}, {"approximate", text("none")}}, nullptr, {}},
    {"aten.elu.default",
     {{"self", req()}, {"alpha", integer(1)}, {"scale", integer(1)}, {"input_scale", integer(1)}},
     nullptr,
     {}},
    {"aten.elu_.default",
     {{"self", req()}, {"alpha", integer(1)}, {"scale", integer(1)}, {"input_scale", integer(1)}},
     nullptr,
     {}},
    {"aten.leaky_relu.default", {{"self", req()}, {"negative_slope", real(0.01)}}, nullptr, {}},
    {"aten.leaky_relu_.default", {{"self", req()}, {"negative_slope", real(0.01)}}, nullptr, {}},
    {"aten.hardtanh.default", {{"self", req()}, {"min_val", integer(-1)}, {"max_val", integer(1)}}, nullptr, {}},
    {"aten.hardtanh_.default", {{"self", req()}, {"min_val", integer(-1)}, {"max_val", integer(1)}}, nullptr, {}},
    {"aten.softmax.int", {{"self", req()}, {"dim", req()}, {"dtype", none()}}, nullptr, {}},
    {"aten._softmax.default", {{"self", req()}, {"dim", req()}, {"half_to_float", req()}}, nullptr, {}},
    {"aten.log_softmax.int", {{"self", req()}, {"dim", req()}, {"dtype", none()}}, nullptr, {}},
    {"aten._log_softmax.default", {{"self", req()}, {"dim", req()}, {"half_to_float", req()}}, nullptr, {}},
    {"aten.dropout.default", {{"input", req()}, {"p", req()}, {"train", req()}}, nullptr, {}},
    {"aten.native_dropout.default", {{"input", req()}, {"p", req()}, {"train", req()}}, nullptr, {}},
    // --- axes and copies
    {"aten.transpose.int", {{"self", req()}, {"dim0", req()}, {"dim1", req()}}, nullptr, {}},
    {"aten.permute.default", {{"self", req()}, {"dims", req()}}, nullptr, {}},
    {"aten.clone.default", {{"self", req()}, {"memory_format", none()}}, nullptr, {}},
    {"aten.alias.default", {{"self", req()}}, nullptr, {}},
    {"aten.detach.default", {{"self", req()}}, nullptr, {}},
    // --- initial states
    {"aten.zeros.default",
     {{"size", req()}, {"dtype", none()}, {"layout", none()}, {"device", none()}, {"pin_memory", none()}},
     nullptr,
     {}},
    {"aten.zeros_like.default",
     {{"self", req()}, {"dtype", none()}, {"layout", none()}, {"device", none()}, {"pin_memory", none()},
      {"memory_format", none()}},
     nullptr,
     {}},
    {"aten.new_zeros.default",
     {{"self", req()}, {"size", req()}, {"dtype", none()}, {"layout", none()}, {"device", none()},
      {"pin_memory", none()}},
     nullptr,
     {}},
    {"aten.full.default",
     {{"size", req()}, {"fill_value", req()}, {"dtype", none()}, {"layout", none()}, {"device", none()},
      {"pin_memory", none()}},
     nullptr,
     {}},
    {"aten.sym_size.int", {{"self", req()}, {"dim", req()}}, nullptr, {}},
};

#undef FERRY_RNN_ARGS
#undef FERRY_RNN_ATTRIBUTES
#undef FERRY_CONV_ATTRIBUTES

}  // namespace

const AtenSchema* find_aten_schema(std::string_view target) {
  for (const AtenSchema& s : kSchemas)
    if (target == s.target) return &s;
  return nullptr;
}

ExportTargetKind export_target_kind(std::string_view target) {
  constexpr std::string_view kAten = "torch.ops.aten.", kHigherOrder = "torch.ops.higher_order.";
  if (target.substr(0, kAten.size()) == kAten)
    return sorted_contains(kAtenOps, target.substr(kAten.size())) ? ExportTargetKind::kAten : ExportTargetKind::kUnknown;
  if (target.substr(0, kHigherOrder.size()) == kHigherOrder)
    return sorted_contains(kHigherOrderOps, target.substr(kHigherOrder.size())) ? ExportTargetKind::kHigherOrder
                                                                                   : ExportTargetKind::kUnknown;
  for (std::string_view op : kSymbolicOps)
    if (target == op) return ExportTargetKind::kSymbolic;
  return ExportTargetKind::kUnknown;
}

}  // namespace ferry::conv
