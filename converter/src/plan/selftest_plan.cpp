#include "plan/selftest_plan.h"

namespace ferry::conv {
namespace {

bool is_recurrent(LayerOp op) {
  return op == LayerOp::LSTM || op == LayerOp::GRU || op == LayerOp::RNN_TANH || op == LayerOp::RNN_RELU;
}

// The output steps of `seq` input steps through the chain's convolutions, or
// 0 where a conv gets fewer steps than its kernel spans (or than a reflect
// padding needs).
uint64_t output_steps(const ModelPlan& plan, uint64_t seq) {
  for (const LayerPlan& l : plan.layers) {
    if (l.op != LayerOp::Conv1d) continue;
    if (l.padding_mode == PaddingMode::Reflect && (l.pad_left >= seq || l.pad_right >= seq)) return 0;
    const uint64_t padded = seq + l.pad_left + l.pad_right, span = uint64_t{l.dilation} * (l.kernel_size - 1) + 1;
    if (padded < span) return 0;
    seq = (padded - span) / l.stride + 1;
  }
  return seq;
}

}  // namespace

std::vector<float> selftest_input(uint64_t seed, size_t count) {
  std::vector<float> v(count);
  uint64_t state = seed;
  for (float& x : v) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    // 24 random bits: exactly representable, uniform in [-1, 1).
    x = static_cast<float>(static_cast<int64_t>(z >> 40) - (int64_t{1} << 23)) / static_cast<float>(1 << 23);
  }
  return v;
}

void plan_selftest(ModelPlan& plan, const SelfTestOptions& options) {
  bool time_axis = plan.time_axis || plan.channels_first || plan.input_is_tokens;
  for (const LayerPlan& l : plan.layers) time_axis = time_axis || is_recurrent(l.op) || l.op == LayerOp::Conv1d;
  SelfTestPlan& st = plan.selftest;
  st.batch = options.batch;
  st.seq = time_axis ? options.seq : 1;
  // Long enough for every conv's kernel (and reflect padding).
  while (time_axis && output_steps(plan, st.seq) == 0 && st.seq < 4096) ++st.seq;
  st.input = selftest_input(options.seed, size_t{st.batch} * st.seq * plan.input_size);
  const size_t steps = time_axis && plan.output_is_sequence ? output_steps(plan, st.seq) : 1;
  st.output.assign(size_t{st.batch} * steps * plan.output_size, 0.0f);
  // Non-zero so the field is stored (FlatBuffers omits default values) and
  // can be overwritten in place by the writer.
  st.tolerance = 1.0f;
  st.relative_tolerance = options.relative_tolerance;
}

}  // namespace ferry::conv
