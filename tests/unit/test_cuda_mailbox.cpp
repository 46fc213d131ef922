// The resident kernel's mailbox (runtime/src/backend/cuda/mailbox.h), host
// side, against a fake device: a thread that plays the kernel's side over
// the same memory with the same two functions the kernel calls
// (mailbox_poll, mailbox_reply). What is checked: requests served in order
// across the sequence number's wrap, the state through the mailbox, stop,
// a reply that does not come within the bound (and what the message says
// about the kernel), a session released while a request waits, the
// device's status, a reply out of step, a kernel that died (the probe), the
// waiting policies, and the registry that stops every kernel at exit.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/mailbox.h"
#include "common/status.h"
#include "ferry/ferry.h"

namespace {

namespace fc = ferry::cuda;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxBatch = 4;
constexpr uint32_t kWidth = 3;

// The payload a session keeps beside the mailbox in its staging block: x_t,
// y_t and the state, [batch][width] each.
struct Payload {
  float x[kMaxBatch * kWidth];
  float y[kMaxBatch * kWidth];
  float state[kMaxBatch * kWidth];
};

// A stand-in for the resident kernel. Its "chain" is s += x, y = 2 s per
// sample, with the state kept on the device side (its own array), so state
// get / set / reset go through the payload as on the GPU.
class FakeDevice {
 public:
  FakeDevice(fc::Mailbox* box, Payload* payload) : box_(box), payload_(payload) {}
  ~FakeDevice() { join(); }

  void start() { thread_ = std::thread([this] { run(); }); }
  bool started() const { return thread_.joinable(); }
  void join() {
    release_stall.store(true);
    quit.store(true);
    if (thread_.joinable()) thread_.join();
  }

  std::atomic<uint32_t> stall_at{0};       // take this request, then wait for release_stall
  std::atomic<bool> release_stall{false};
  std::atomic<uint32_t> delay_us{0};       // every request takes this long
  std::atomic<uint32_t> die_at{0};         // take this request and leave without a reply
  std::atomic<uint32_t> wrong_reply_at{0}; // answer this request with another sequence number
  std::atomic<bool> dead{false};
  std::atomic<bool> quit{false};           // leave without a stop (the test is over)
  std::atomic<int> served{0};

 private:
  void run() {
    uint32_t last = fc::mail_load(&box_->reply.done), polls = 0;
    float state[kMaxBatch * kWidth] = {};
    fc::mailbox_start(box_);
    for (;;) {
      fc::MailboxRequest r;
      if (!fc::mailbox_poll(box_, last, &polls, &r)) {
        if (quit.load()) return;
        std::this_thread::yield();
        continue;
      }
      last = r.seq;
      if (r.seq == die_at.load()) {
        dead.store(true);
        return;
      }
      if (r.seq == stall_at.load()) {
        while (!release_stall.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (const uint32_t d = delay_us.load()) std::this_thread::sleep_for(std::chrono::microseconds(d));
      int32_t status = fc::kMailOk;
      const bool batch_ok = r.batch >= 1 && r.batch <= kMaxBatch;
      const size_t n = size_t{r.batch} * kWidth;
      switch (r.command) {
        case fc::kMailStep:
          if (!batch_ok) {
            status = fc::kMailBadBatch;
            break;
          }
          for (size_t i = 0; i < n; ++i) {
            state[i] += payload_->x[i];
            payload_->y[i] = 2.0f * state[i];
          }
          break;
        case fc::kMailStateGet:
          if (!batch_ok) status = fc::kMailBadBatch;
          else std::memcpy(payload_->state, state, n * sizeof(float));
          break;
        case fc::kMailStateSet:
          if (!batch_ok) status = fc::kMailBadBatch;
          else std::memcpy(state, payload_->state, n * sizeof(float));
          break;
        case fc::kMailStateReset: std::memset(state, 0, sizeof(state)); break;
        case fc::kMailStop:
          fc::mailbox_reply(box_, r.seq, fc::kMailOk, true);
          served.fetch_add(1);
          return;
        default: status = fc::kMailUnknownCommand; break;
      }
      const uint32_t answer = r.seq == wrong_reply_at.load() ? fc::mail_next(fc::mail_next(r.seq)) : r.seq;
      fc::mailbox_reply(box_, answer, status, false);
      served.fetch_add(1);
    }
  }

  fc::Mailbox* box_;
  Payload* payload_;
  std::thread thread_;
};

// The session's side: the mapped block (mailbox and payload) and the host.
struct Rig {
  fc::Mailbox box{};
  Payload payload{};
  fc::MailboxHost host;
  FakeDevice device{&box, &payload};

  explicit Rig(fc::WaitPolicy policy = fc::WaitPolicy(), fc::MailboxProbe probe = fc::MailboxProbe()) {
    std::memset(&box, 0, sizeof(box));
    host.init(&box, policy, probe);
  }
  ~Rig() {
    if (device.started()) host.stop(200000);
    device.join();
  }

  ferry_status step(uint32_t batch, float value, fc::WaitStats* stats = nullptr) {
    const uint32_t rows = batch < kMaxBatch ? batch : kMaxBatch;  // a batch the device must refuse: no more data
    for (uint32_t i = 0; i < rows * kWidth; ++i) payload.x[i] = value + static_cast<float>(i);
    return host.call(fc::kMailStep, batch, stats);
  }
};

fc::WaitPolicy with_timeout(uint64_t us) {
  fc::WaitPolicy p;
  p.timeout_us = us;
  return p;
}

bool has(const char* text, const char* part) { return std::string(text).find(part) != std::string::npos; }

TEST(CudaMailbox, LayoutPutsRequestAndReplyOnTheirOwnLines) {
  EXPECT_EQ(sizeof(fc::Mailbox), 2 * fc::kMailLine);
  EXPECT_EQ(alignof(fc::Mailbox), fc::kMailLine);
  EXPECT_EQ(offsetof(fc::Mailbox, request), 0u);
  EXPECT_EQ(offsetof(fc::Mailbox, reply), fc::kMailLine);
  EXPECT_EQ(offsetof(fc::MailboxRequest, seq), 0u);
  EXPECT_EQ(offsetof(fc::MailboxReply, done), 0u);
  EXPECT_EQ(fc::mail_next(1), 2u);
  EXPECT_EQ(fc::mail_next(0xFFFFFFFFu), 1u);  // 0 is "none yet": never a request
}

TEST(CudaMailbox, StepsAreServedInOrderAcrossTheWrap) {
  for (const uint32_t first : {0u, 0xFFFFFFF0u}) {
    SCOPED_TRACE("from sequence number " + std::to_string(first));
    Rig rig;
    rig.box.reply.done = first;  // the kernel served `first` last
    rig.host.set_sequence_for_test(first);
    rig.device.start();
    float expected[kMaxBatch * kWidth] = {};
    for (int t = 0; t < 40; ++t) {
      const uint32_t batch = 1 + static_cast<uint32_t>(t) % kMaxBatch;
      ASSERT_EQ(rig.step(batch, 0.5f * static_cast<float>(t)), FERRY_OK) << ferry_last_error();
      for (uint32_t i = 0; i < batch * kWidth; ++i) {
        expected[i] += 0.5f * static_cast<float>(t) + static_cast<float>(i);
        ASSERT_EQ(rig.payload.y[i], 2.0f * expected[i]) << "step " << t << " element " << i;
      }
    }
    EXPECT_EQ(rig.device.served.load(), 40);
    uint32_t seq = first;
    for (int i = 0; i < 40; ++i) seq = fc::mail_next(seq);
    EXPECT_EQ(rig.host.last_seq(), seq);
    EXPECT_EQ(rig.box.reply.done, seq);
    if (first != 0) EXPECT_LT(seq, first);  // it wrapped, past 0
  }
}

TEST(CudaMailbox, StateGoesThroughTheMailbox) {
  Rig rig;
  rig.device.start();
  for (uint32_t i = 0; i < 2 * kWidth; ++i) rig.payload.state[i] = 10.0f * static_cast<float>(i + 1);
  ASSERT_EQ(rig.host.call(fc::kMailStateSet, 2), FERRY_OK) << ferry_last_error();
  ASSERT_EQ(rig.step(2, 1.0f), FERRY_OK) << ferry_last_error();
  for (uint32_t i = 0; i < 2 * kWidth; ++i) EXPECT_EQ(rig.payload.y[i], 2.0f * (10.0f * (i + 1) + 1.0f + i));
  std::memset(rig.payload.state, 0xFF, sizeof(rig.payload.state));
  ASSERT_EQ(rig.host.call(fc::kMailStateGet, 2), FERRY_OK) << ferry_last_error();
  for (uint32_t i = 0; i < 2 * kWidth; ++i) EXPECT_EQ(rig.payload.state[i], 10.0f * (i + 1) + 1.0f + i);
  ASSERT_EQ(rig.host.call(fc::kMailStateReset, 0), FERRY_OK) << ferry_last_error();
  ASSERT_EQ(rig.host.call(fc::kMailStateGet, 2), FERRY_OK) << ferry_last_error();
  for (uint32_t i = 0; i < 2 * kWidth; ++i) EXPECT_EQ(rig.payload.state[i], 0.0f);
}

TEST(CudaMailbox, StopEndsTheKernelAndLaterRequestsAreRefused) {
  Rig rig;
  rig.device.start();
  ASSERT_EQ(rig.step(1, 1.0f), FERRY_OK) << ferry_last_error();
  ASSERT_EQ(fc::mail_load(&rig.box.reply.running), 1u);
  ASSERT_EQ(rig.host.stop(1000000), FERRY_OK) << ferry_last_error();
  EXPECT_TRUE(rig.host.stopped());
  EXPECT_EQ(fc::mail_load(&rig.box.reply.running), 0u);
  rig.device.join();  // the fake left its loop: the kernel exited
  EXPECT_EQ(rig.step(1, 1.0f), FERRY_INVALID_STATE);
  EXPECT_TRUE(has(ferry_last_error(), "stopped")) << ferry_last_error();
  EXPECT_EQ(rig.host.stop(1000), FERRY_OK);  // a second stop has nothing to do
  // Only requests are requests.
  Rig other;
  EXPECT_EQ(other.host.call(fc::kMailStop, 0), FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(other.host.call(fc::kMailNone, 0), FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(other.host.call(99, 0), FERRY_INVALID_ARGUMENT);
}

TEST(CudaMailbox, NoReplyWithinTheBoundIsInvalidStateNamingTheRequest) {
  Rig rig(with_timeout(50000));
  rig.device.stall_at.store(3);
  rig.device.start();
  ASSERT_EQ(rig.step(1, 1.0f), FERRY_OK);
  ASSERT_EQ(rig.step(1, 1.0f), FERRY_OK);
  const auto t0 = Clock::now();
  EXPECT_EQ(rig.step(1, 1.0f), FERRY_INVALID_STATE);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const std::string message = ferry_last_error();
  EXPECT_GE(ms, 50.0);
  EXPECT_LT(ms, 1000.0);
  EXPECT_TRUE(has(message.c_str(), "request 3 (step)")) << message;
  EXPECT_TRUE(has(message.c_str(), "within 50000 us")) << message;
  EXPECT_TRUE(has(message.c_str(), "took the request and has not finished it")) << message;
  EXPECT_TRUE(has(message.c_str(), "last reply was to request 2")) << message;
  EXPECT_TRUE(rig.host.broken());
  // Every later request says why, without touching the mailbox.
  EXPECT_EQ(rig.step(1, 1.0f), FERRY_INVALID_STATE);
  EXPECT_TRUE(has(ferry_last_error(), "an earlier request failed")) << ferry_last_error();
  EXPECT_EQ(rig.host.last_seq(), 3u);
  // The kernel finishes the slow step late, then serves the stop.
  rig.device.release_stall.store(true);
  EXPECT_EQ(rig.host.stop(1000000), FERRY_OK) << ferry_last_error();
  EXPECT_EQ(rig.device.served.load(), 4);
}

TEST(CudaMailbox, AKernelThatNeverRanIsNamedAndItsMemoryIsNotGivenBack) {
  Rig rig(with_timeout(20000));  // no device started
  EXPECT_EQ(rig.step(1, 1.0f), FERRY_INVALID_STATE);
  EXPECT_TRUE(has(ferry_last_error(), "never polled the mailbox")) << ferry_last_error();
  // The stop cannot be confirmed: the caller must keep the mapped memory.
  EXPECT_EQ(rig.host.stop(20000), FERRY_INVALID_STATE);
  EXPECT_FALSE(rig.host.stopped());
  // If the kernel starts late after all, it serves the stop (and the
  // request that timed out was overwritten by it).
  rig.device.start();
  EXPECT_EQ(rig.host.stop(1000000), FERRY_OK) << ferry_last_error();
  EXPECT_TRUE(rig.host.stopped());
}

TEST(CudaMailbox, ReleaseWhileARequestWaitsEndsTheWaitThenStopsTheKernel) {
  Rig rig;  // a 2 s bound: the release must end the wait long before it
  rig.device.start();
  ASSERT_EQ(rig.step(1, 1.0f), FERRY_OK);
  rig.device.delay_us.store(300000);
  ferry_status waited = FERRY_OK;
  std::string message;
  std::thread caller([&] {
    waited = rig.step(1, 1.0f);
    message = ferry_last_error();  // the message is per thread
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const auto t0 = Clock::now();
  rig.host.abandon();  // returns once the wait has left
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  caller.join();
  EXPECT_LT(ms, 500.0);  // one nap of the wait, not the 300 ms step nor the 2 s bound
  EXPECT_EQ(waited, FERRY_INVALID_STATE);
  EXPECT_TRUE(has(message.c_str(), "released while request 2 (step) waited")) << message;
  EXPECT_EQ(rig.step(1, 1.0f), FERRY_INVALID_STATE);
  // The release goes on: stop, which outlasts the slow step.
  rig.device.delay_us.store(0);
  EXPECT_EQ(rig.host.stop(2000000), FERRY_OK) << ferry_last_error();
  EXPECT_EQ(rig.device.served.load(), 3);  // the first step, the slow one, the stop
}

TEST(CudaMailbox, TheDevicesStatusFailsTheRequest) {
  Rig rig;
  rig.device.start();
  EXPECT_EQ(rig.step(kMaxBatch + 1, 1.0f), FERRY_INVALID_STATE);
  EXPECT_TRUE(has(ferry_last_error(), "request 1 (step, batch 5) failed on the device: a batch outside"))
      << ferry_last_error();
  EXPECT_EQ(rig.step(1, 1.0f), FERRY_INVALID_STATE);  // the mailbox is broken from then on
  Rig other;
  other.device.start();
  EXPECT_EQ(other.host.call(fc::kMailStateGet, 0), FERRY_INVALID_STATE);
  EXPECT_TRUE(has(ferry_last_error(), "state get")) << ferry_last_error();
}

TEST(CudaMailbox, AReplyOutOfStepIsCaught) {
  Rig rig;
  rig.device.wrong_reply_at.store(2);
  rig.device.start();
  ASSERT_EQ(rig.step(1, 1.0f), FERRY_OK);
  EXPECT_EQ(rig.step(1, 1.0f), FERRY_INVALID_STATE);
  EXPECT_TRUE(has(ferry_last_error(), "answered request 4 while request 2 (step) waited")) << ferry_last_error();
  EXPECT_TRUE(rig.host.broken());
}

TEST(CudaMailbox, TheProbeEndsTheWaitOnAKernelThatDied) {
  struct Probe {
    static ferry_status check(void* ctx) {
      if (!static_cast<FakeDevice*>(ctx)->dead.load()) return FERRY_OK;
      return ferry::fail(FERRY_INVALID_STATE, "the kernel ended with an illegal address");
    }
  };
  fc::Mailbox box{};
  Payload payload{};
  FakeDevice device(&box, &payload);
  fc::MailboxHost host;
  fc::MailboxProbe probe;
  probe.check = Probe::check;
  probe.ctx = &device;
  host.init(&box, fc::WaitPolicy(), probe);  // a 2 s bound
  device.die_at.store(2);
  device.start();
  payload.x[0] = 1.0f;
  ASSERT_EQ(host.call(fc::kMailStep, 1), FERRY_OK);
  const auto t0 = Clock::now();
  EXPECT_EQ(host.call(fc::kMailStep, 1), FERRY_INVALID_STATE);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_LT(ms, 1000.0);  // the probe, not the 2 s bound
  EXPECT_TRUE(has(ferry_last_error(), "request 2 (step) cannot complete: the kernel ended with an illegal address"))
      << ferry_last_error();
  device.join();
}

TEST(CudaMailbox, BothWaitingPoliciesServeEveryStep) {
  // Spin only: a fast step never yields.
  fc::WaitPolicy spin;
  spin.spin_us = 2000000;
  Rig spinning(spin);
  spinning.device.start();
  fc::WaitStats stats;
  for (int t = 0; t < 20; ++t) ASSERT_EQ(spinning.step(1, 1.0f, &stats), FERRY_OK);
  EXPECT_EQ(stats.yields, 0u);
  EXPECT_GT(stats.spins, 0u);
  // Spin 0 us, then back off: a 3 ms step is waited for by yields and naps.
  fc::WaitPolicy backoff;
  backoff.spin_us = 0;
  backoff.max_sleep_us = 200;
  Rig napping(backoff);
  napping.device.delay_us.store(3000);
  napping.device.start();
  for (int t = 0; t < 5; ++t) {
    ASSERT_EQ(napping.step(2, 1.0f, &stats), FERRY_OK) << ferry_last_error();
    EXPECT_GT(stats.yields, 0u);
    EXPECT_EQ(stats.spins, 0u);
    EXPECT_GE(stats.waited_ns, 3000000u);
    // With naps of at most 200 us, far fewer polls than a spin would make.
    EXPECT_LT(stats.yields, 3000u);
  }
  EXPECT_EQ(napping.payload.y[0], 2.0f * 5.0f);
}

TEST(CudaMailbox, TheRegistryStopsEveryKernelAtExit) {
  Rig a, b;
  a.device.start();
  b.device.start();
  ASSERT_TRUE(fc::resident_register(&a.host));
  ASSERT_TRUE(fc::resident_register(&b.host));
  ASSERT_EQ(a.step(1, 1.0f), FERRY_OK);
  EXPECT_EQ(fc::resident_stop_all(1000000), 0);
  EXPECT_TRUE(a.host.stopped());
  EXPECT_TRUE(b.host.stopped());
  EXPECT_EQ(fc::resident_stop_all(1000000), 0);  // the table is empty now
  // A full table refuses the next session; unregistering frees a slot.
  std::vector<fc::MailboxHost> hosts(fc::kMaxResidentSessions + 1);
  for (int i = 0; i < fc::kMaxResidentSessions; ++i) ASSERT_TRUE(fc::resident_register(&hosts[i]));
  EXPECT_FALSE(fc::resident_register(&hosts.back()));
  fc::resident_unregister(&hosts[5]);
  EXPECT_TRUE(fc::resident_register(&hosts.back()));
  for (fc::MailboxHost& h : hosts) fc::resident_unregister(&h);
}

}  // namespace
