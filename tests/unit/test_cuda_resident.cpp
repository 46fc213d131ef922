// The resident streaming kernel's plan (runtime/src/backend/cuda/
// resident.h) for the benchmark's workloads on an H100, an H200, an Orin and
// a Thor, their capabilities written down from the data sheets: the SMs it
// holds, which W_hh stay in shared memory, the shared memory per block, the
// batch slices, the grid syncs of a step, and what it refuses. The
// expectations are worked out by hand from the rule in resident.h (panel
// bytes: 8 units x G gates x K columns x 4 bytes in f32).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/cuda/device_math.h"
#include "backend/cuda/resident.h"
#include "ferry/ferry.h"
#include "model/model.h"

namespace {

namespace fc = ferry::cuda;
using ferry::DType;
using ferry::Op;

fc::DeviceCaps h100() {
  fc::DeviceCaps c;
  c.cc_major = 9, c.sm_count = 132;
  c.shared_per_block_optin = 232448, c.shared_per_sm = 233472;  // 227 KiB, 228 KiB
  c.can_map_host_memory = c.host_register_supported = c.cooperative_launch = true;
  return c;
}
fc::DeviceCaps h200() { return h100(); }  // the same GH100 die and SM count: more and faster HBM
fc::DeviceCaps orin() {
  fc::DeviceCaps c;
  c.cc_major = 8, c.cc_minor = 7, c.sm_count = 16;  // AGX Orin 64 GB
  c.shared_per_block_optin = 166912, c.shared_per_sm = 167936;  // 163 KiB, 164 KiB
  c.integrated = c.can_map_host_memory = c.host_register_supported = c.cooperative_launch = true;
  return c;
}
fc::DeviceCaps thor() {
  fc::DeviceCaps c;
  c.cc_major = 11, c.sm_count = 20;
  c.shared_per_block_optin = 232448, c.shared_per_sm = 233472;
  c.integrated = c.can_map_host_memory = c.host_register_supported = c.cooperative_launch = true;
  return c;
}

const uint8_t kDummy[16] = {};  // the plan reads shapes, never the weights' bytes

ferry::Weight matrix(uint32_t units, uint32_t gates, uint32_t cols, DType dtype) {
  ferry::Weight w;
  w.data = kDummy;
  w.units = units;
  w.gates = static_cast<uint8_t>(gates);
  w.cols = cols;
  w.dtype = dtype;
  w.layout = ferry::WeightLayout::kPanel8;
  return w;
}

// A chain built field by field: recurrent modules and Linear layers.
class Chain {
 public:
  Chain() : m_(std::make_unique<ferry_model>()) {}
  Chain& recurrent(Op op, uint32_t in, uint32_t hidden, uint32_t layers, DType dtype, uint32_t proj = 0) {
    ferry::Layer& l = next();
    l.op = op;
    l.in = in;
    l.hidden = hidden;
    l.h_out = proj ? proj : hidden;
    l.out = l.h_out;
    l.gates = op == Op::kLstm ? 4 : op == Op::kGru ? 3 : 1;
    l.num_layers = layers;
    l.dirs = 1;
    l.first_cell = m_->num_cells;
    l.dtype = dtype;
    l.panel8 = true;
    for (uint32_t k = 0; k < layers; ++k) {
      ferry::Cell& c = m_->cells[m_->num_cells++];
      c.in = k == 0 ? in : l.h_out;
      c.w_ih = matrix(hidden, l.gates, c.in, dtype);
      c.w_hh = matrix(hidden, l.gates, l.h_out, dtype);
      if (proj) c.w_hr = matrix(proj, 1, hidden, dtype);
    }
    return *this;
  }
  Chain& linear(uint32_t in, uint32_t out, DType dtype) {
    ferry::Layer& l = next();
    l.op = Op::kLinear;
    l.in = in;
    l.out = out;
    l.dtype = dtype;
    l.panel8 = true;
    l.weight = matrix(out, 1, in, dtype);
    return *this;
  }
  Chain& op(Op o) {
    next().op = o;
    return *this;
  }
  Chain& not_streamable() {
    m_->streamable = false;
    return *this;
  }
  const ferry_model* model() const { return m_.get(); }

 private:
  ferry::Layer& next() { return m_->layers[m_->num_layers++]; }
  std::unique_ptr<ferry_model> m_;
};

fc::ResidentPlan plan(const Chain& chain, size_t batch, const fc::DeviceCaps& caps, uint32_t max_sms = 0) {
  fc::ResidentOptions options;
  options.max_sms = max_sms;
  fc::ResidentPlan p;
  EXPECT_EQ(fc::plan_resident(chain.model(), batch, caps, options, &p), FERRY_OK) << ferry_last_error();
  return p;
}

// What every plan that fits must satisfy, whatever the case.
void check_consistent(const Chain& chain, size_t batch, const fc::DeviceCaps& caps, const fc::ResidentPlan& p,
                      uint32_t max_sms) {
  ASSERT_TRUE(p.fits) << p.reason;
  const uint32_t cap = max_sms && max_sms < caps.sm_count ? max_sms : caps.sm_count;
  EXPECT_LE(p.blocks, cap);
  EXPECT_EQ(p.blocks, p.panel_groups * p.batch_slices);
  EXPECT_EQ(p.shared_limit, std::min(caps.shared_per_block_optin, caps.shared_per_sm - 1024));
  EXPECT_LE(p.shared_per_block, p.shared_limit);
  EXPECT_EQ(p.shared_per_block, p.weights_per_block + p.work_per_block);
  size_t held = 0, work = 0;
  const ferry_model* m = chain.model();
  for (uint32_t i = 0; i < p.num_cells; ++i) {
    const fc::ResidentCell& c = p.cells[i];
    const ferry::Layer& l = m->layers[c.layer];
    const int32_t type = static_cast<int32_t>(l.dtype);
    // Every panel is some block's: the groups cover the panels, and no
    // group is idle for the cell with the most panels.
    EXPECT_EQ(c.panels, fc::panels_of(l.hidden));
    EXPECT_GE(c.panels_per_block * p.panel_groups, c.panels);
    EXPECT_EQ(c.slice_bytes, fc::align16(size_t{c.panels_per_block} * fc::panel_bytes(type, l.gates, l.h_out)));
    if (c.in_shared) held += c.slice_bytes;
    size_t w = fc::phase_a_bytes(type, l.gates, l.h_out, c.panels_per_block, p.batch_tile);
    if (c.proj_panels) w = std::max(w, fc::phase_b_bytes(type, l.hidden, c.proj_panels_per_block, p.batch_tile));
    EXPECT_EQ(c.work_bytes, w);
    work = std::max(work, w);
  }
  EXPECT_EQ(p.weights_per_block, held);
  EXPECT_EQ(p.work_per_block, work);
  // The tile is the largest that fits, up to a slice's samples.
  const uint32_t slice = static_cast<uint32_t>((batch + p.batch_slices - 1) / p.batch_slices);
  EXPECT_GE(p.batch_tile, 1u);
  EXPECT_LE(p.batch_tile, slice);
  if (p.batch_tile < slice) {
    size_t bigger = 0;
    for (uint32_t i = 0; i < p.num_cells; ++i) {
      const ferry::Layer& l = m->layers[p.cells[i].layer];
      bigger = std::max(bigger, fc::phase_a_bytes(static_cast<int32_t>(l.dtype), l.gates, l.h_out,
                                                  p.cells[i].panels_per_block, p.batch_tile + 1));
    }
    EXPECT_GT(held + bigger + 64, p.shared_limit) << "a tile of " << p.batch_tile + 1 << " would fit too";
  }
}

struct Expect {
  uint32_t blocks, groups, slices, per_block;
  bool in_shared;
};

void expect(const char* what, const Chain& chain, size_t batch, const fc::DeviceCaps& caps, const Expect& e,
            uint32_t max_sms = 0) {
  SCOPED_TRACE(what);
  const fc::ResidentPlan p = plan(chain, batch, caps, max_sms);
  check_consistent(chain, batch, caps, p, max_sms);
  EXPECT_EQ(p.blocks, e.blocks);
  EXPECT_EQ(p.panel_groups, e.groups);
  EXPECT_EQ(p.batch_slices, e.slices);
  for (uint32_t i = 0; i < p.num_cells; ++i) {
    EXPECT_EQ(p.cells[i].panels_per_block, e.per_block) << "cell " << i;
    EXPECT_EQ(p.cells[i].in_shared, e.in_shared) << "cell " << i;
  }
}

Chain w1(uint32_t h, DType d = DType::kF32) { return std::move(Chain().recurrent(Op::kLstm, h, h, 1, d)); }
Chain w4(uint32_t h, DType d = DType::kF32) { return std::move(Chain().recurrent(Op::kGru, h, h, 1, d)); }
Chain w2(DType d = DType::kF32) { return std::move(Chain().recurrent(Op::kLstm, 32, 256, 2, d)); }
Chain w3(DType d = DType::kF32) { return std::move(Chain().recurrent(Op::kLstm, 64, 256, 1, d)); }

// W1 at batch 1. H 64: 8 panels of 8 KiB, one block holds them all (its step
// kernel is one block too). H 256: 32 panels of 32 KiB; the step kernel's 8
// blocks (2 column splits, 4 panels each) hold 128 KiB each. H 1024: 128
// panels of 128 KiB; one per block on an H100/H200 (128 of 132 SMs); an
// Orin's 16 SMs would need 8 (1 MiB) each, a Thor's 20 need 7: W_hh is read
// through L2 there, on every SM the device has.
TEST(CudaResident, W1OnEachDevice) {
  for (const auto& dev : {std::make_pair("h100", h100()), std::make_pair("h200", h200())}) {
    SCOPED_TRACE(dev.first);
    expect("H64", w1(64), 1, dev.second, {1, 1, 1, 8, true});
    expect("H256", w1(256), 1, dev.second, {8, 8, 1, 4, true});
    expect("H1024", w1(1024), 1, dev.second, {128, 128, 1, 1, true});
  }
  expect("orin H64", w1(64), 1, orin(), {1, 1, 1, 8, true});
  expect("orin H256", w1(256), 1, orin(), {8, 8, 1, 4, true});
  expect("orin H1024", w1(1024), 1, orin(), {16, 16, 1, 8, false});
  expect("thor H256", w1(256), 1, thor(), {8, 8, 1, 4, true});
  expect("thor H1024", w1(1024), 1, thor(), {19, 19, 1, 7, false});  // ceil(128 / 20) = 7: 19 blocks give the same
  const fc::ResidentPlan p = plan(w1(1024), 1, h100());
  EXPECT_EQ(p.weights_per_block, 131072u);
  EXPECT_EQ(p.weights_in_shared, 128u * 131072u);  // 16 MiB of W_hh on chip
  EXPECT_EQ(p.weights_streamed, 128u * 131072u);   // W_ih through L2 at each step
  EXPECT_EQ(p.phases, 4u);                         // request, x W_ih, recurrence, reply
  const fc::ResidentPlan o = plan(w1(1024), 1, orin());
  EXPECT_EQ(o.weights_per_block, 0u);
  EXPECT_EQ(o.weights_in_shared, 0u);
  EXPECT_EQ(o.weights_streamed, 2u * 128u * 131072u);  // W_ih and W_hh
}

// Narrower weights fit where f32 does not: W1 H1024 on an Orin holds W_hh
// in shared memory in int4 (8 panels x 16 KiB), not in int8 (8 x 32 KiB);
// on a Thor likewise (int8: 7 x 32 KiB = 224 KiB leaves too little for the
// step's work); an int8 / int4 step quantizes its input first.
TEST(CudaResident, NarrowerWeightsStayOnChipWhereF32CannotPerDevice) {
  expect("orin f16", w1(1024, DType::kF16), 1, orin(), {16, 16, 1, 8, false});
  expect("orin i8", w1(1024, DType::kI8), 1, orin(), {16, 16, 1, 8, false});
  expect("orin i4", w1(1024, DType::kI4), 1, orin(), {16, 16, 1, 8, true});
  expect("thor i8", w1(1024, DType::kI8), 1, thor(), {19, 19, 1, 7, false});
  expect("thor i4", w1(1024, DType::kI4), 1, thor(), {19, 19, 1, 7, true});
  expect("h100 f16", w1(1024, DType::kF16), 1, h100(), {128, 128, 1, 1, true});
  const fc::ResidentPlan p = plan(w1(1024, DType::kI4), 1, orin());
  EXPECT_EQ(p.weights_per_block, 8u * 16u * 1024u);
  EXPECT_EQ(p.phases, 5u);  // request, quantize x, x W_ih, recurrence, reply
  // A GRU's panels are 3/4 of an LSTM's: on an Orin 8 x 48 KiB (f16) and
  // 8 x 24 KiB (int8) do not fit either; 8 x 12 KiB (int4) do.
  expect("orin gru f16", w4(1024, DType::kF16), 1, orin(), {16, 16, 1, 8, false});
  expect("orin gru i8", w4(1024, DType::kI8), 1, orin(), {16, 16, 1, 8, false});
  expect("orin gru i4", w4(1024, DType::kI4), 1, orin(), {16, 16, 1, 8, true});
}

// W2: two LSTM(256) cells of 32 panels. At the step kernel's 8 blocks each
// would hold 2 x 128 KiB; 11 blocks of 3 panels hold 2 x 96 KiB. An Orin's
// 163 KiB takes 2 panels of each, on its 16 SMs.
TEST(CudaResident, W2HoldsBothLayersSlices) {
  expect("h100", w2(), 1, h100(), {11, 11, 1, 3, true});
  expect("thor", w2(), 1, thor(), {11, 11, 1, 3, true});
  expect("orin", w2(), 1, orin(), {16, 16, 1, 2, true});
  const fc::ResidentPlan p = plan(w2(), 1, h100());
  EXPECT_EQ(p.weights_per_block, 2u * 3u * 32768u);
  EXPECT_EQ(p.phases, 6u);  // request, two layers x (x W_ih, recurrence), reply
  // Capped at 8 SMs (a camera pipeline keeps the rest): 4 panels each, 2 x
  // 128 KiB do not fit: the larger slice... both are as large: the first
  // goes to L2, the second stays.
  const fc::ResidentPlan capped = plan(w2(), 1, h100(), 8);
  check_consistent(w2(), 1, h100(), capped, 8);
  EXPECT_EQ(capped.blocks, 8u);
  EXPECT_FALSE(capped.cells[0].in_shared);
  EXPECT_TRUE(capped.cells[1].in_shared);
  EXPECT_EQ(capped.weights_in_shared, 32u * 32768u);
}

// W3 at batch 64: the step kernel's 32 blocks (one panel each, 16 sample
// groups); the SMs left split the batch: 4 slices of 16 samples on an
// H100/H200 (128 SMs), none on an Orin (16 SMs: 2 panels each, all 64
// samples) or a Thor (20 SMs: still 2 panels each, so 16 blocks).
TEST(CudaResident, W3SplitsTheBatchOverTheSmsLeft) {
  expect("h100", w3(), 64, h100(), {128, 32, 4, 1, true});
  expect("h200", w3(), 64, h200(), {128, 32, 4, 1, true});
  expect("orin", w3(), 64, orin(), {16, 16, 1, 2, true});
  expect("thor", w3(), 64, thor(), {16, 16, 1, 2, true});
  EXPECT_EQ(plan(w3(), 64, h100()).batch_tile, 16u);
  // A cap halves the slices.
  expect("h100 at 64 SMs", w3(), 64, h100(), {64, 32, 2, 1, true}, 64);
}

TEST(CudaResident, OtherLayersAddTheirPhasesAndStream) {
  Chain c;
  c.recurrent(Op::kGru, 40, 128, 1, DType::kI8).linear(128, 10, DType::kI8).op(Op::kRelu).op(Op::kSoftmax);
  const fc::ResidentPlan p = plan(c, 1, h100());
  ASSERT_TRUE(p.fits) << p.reason;
  // request, quantize + x W_ih, recurrence, quantize + Linear, softmax, reply
  EXPECT_EQ(p.phases, 8u);
  EXPECT_EQ(p.weights_streamed, fc::panels_of(128) * fc::panel_bytes(fc::kWeightI8, 3, 40) +
                                    fc::panels_of(10) * fc::panel_bytes(fc::kWeightI8, 1, 128));
  // An LSTM with a projection holds W_hh's slices (here W_hh is 512 x 4 x
  // 128); W_hr is read through L2 with W_ih.
  Chain proj;
  proj.recurrent(Op::kLstm, 16, 512, 1, DType::kF32, 128);
  const fc::ResidentPlan q = plan(proj, 1, h100());
  check_consistent(proj, 1, h100(), q, 0);
  EXPECT_EQ(q.cells[0].proj_panels, 16u);
  EXPECT_GT(q.cells[0].proj_panels_per_block, 0u);
  EXPECT_TRUE(q.cells[0].in_shared);
  EXPECT_EQ(q.weights_in_shared, 64u * fc::panel_bytes(fc::kWeightF32, 4, 128));
  EXPECT_EQ(q.weights_streamed, 64u * fc::panel_bytes(fc::kWeightF32, 4, 16) + 16u * fc::panel_bytes(fc::kWeightF32, 1, 512));
  EXPECT_EQ(q.phases, 5u);  // request, x W_ih, recurrence, projection, reply
  const fc::RecurrentParams rp = fc::resident_cell_params(fc::RecurrentParams{}, q, 0);
  EXPECT_EQ(rp.panels_per_block, static_cast<int32_t>(q.cells[0].panels_per_block));
  EXPECT_EQ(rp.batch_slices, static_cast<int32_t>(q.batch_slices));
  EXPECT_EQ(rp.proj_batch_tile, static_cast<int32_t>(q.batch_tile));
}

// The kernel's own shared memory comes off what the slices may use: W1
// H1024 in int4 on an Orin holds 128 KiB of W_hh in its 163 KiB; with 32 KiB of
// the kernel's own, W_hh goes through L2.
TEST(CudaResident, TheKernelsOwnSharedMemoryIsReserved) {
  fc::ResidentOptions options;
  options.kernel_static_shared = 1072;
  fc::ResidentPlan p;
  ASSERT_EQ(fc::plan_resident(w1(1024, DType::kI4).model(), 1, orin(), options, &p), FERRY_OK);
  EXPECT_EQ(p.shared_limit, 166912u - 1072u);
  EXPECT_TRUE(p.cells[0].in_shared);
  options.kernel_static_shared = 32 * 1024;
  ASSERT_EQ(fc::plan_resident(w1(1024, DType::kI4).model(), 1, orin(), options, &p), FERRY_OK);
  EXPECT_FALSE(p.cells[0].in_shared);
  EXPECT_LE(p.shared_per_block, p.shared_limit);
}

TEST(CudaResident, RefusedWithTheReason) {
  fc::DeviceCaps no_coop = h100();
  no_coop.cooperative_launch = false;
  EXPECT_FALSE(plan(w1(256), 1, no_coop).fits);
  EXPECT_NE(std::string(plan(w1(256), 1, no_coop).reason).find("cooperative"), std::string::npos);
  fc::DeviceCaps no_map = orin();
  no_map.can_map_host_memory = false;
  EXPECT_NE(std::string(plan(w1(256), 1, no_map).reason).find("map host memory"), std::string::npos);
  Chain bi = w1(64);
  bi.not_streamable();
  EXPECT_NE(std::string(plan(bi, 1, h100()).reason).find("cannot stream"), std::string::npos);
  Chain dense;  // no recurrent layer: one SM
  dense.linear(8, 4, DType::kF32);
  const fc::ResidentPlan d = plan(dense, 4, h100());
  EXPECT_TRUE(d.fits) << d.reason;
  EXPECT_EQ(d.blocks, 1u);
  EXPECT_EQ(d.shared_per_block, 0u);
  EXPECT_EQ(d.phases, 3u);  // request, Linear, reply
  fc::ResidentPlan p;
  EXPECT_EQ(fc::plan_resident(w1(64).model(), 0, h100(), fc::ResidentOptions(), &p), FERRY_INVALID_ARGUMENT);
}

}  // namespace
