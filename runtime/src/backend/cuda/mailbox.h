// The mailbox between the host and a resident streaming kernel: one
// cooperative kernel launched at session init that stays on the GPU and
// runs one request at a time (a step, a state copy, stop), fed through
// page-locked host memory mapped into the device's address space. A step
// then costs no launch, no cudaMemcpy and no driver call: the host writes
// the request and its sequence number (the doorbell), the kernel polls it,
// does the work, writes its status and the sequence number back, and the
// host, which polls that, returns.
//
// This file is the protocol, as plain C++ both sides compile: the memory
// layout, the request and reply words with their ordering (release on
// write, acquire on read, system scope: the other side is across PCIe or,
// on a Jetson, the same DRAM through another cache), and the host's side of
// it (post, wait with a bound and a waiting policy, stop, release while a
// wait is in progress). The kernel's side is two functions (mailbox_poll,
// mailbox_reply) the device code calls; tests/unit/test_cuda_mailbox.cpp
// drives the host side against a fake device, a thread that plays the
// kernel over the same memory with the same two functions.
//
// Layout (in mapped, page-locked host memory; the payload of a request, x_t,
// y_t or the state, lies in the session's staging block beside it):
//   [request: seq, command, batch, arg][pad to 128 B][reply: done, status,
//   running, polls][pad to 128 B]
// Request and reply are on separate 128-byte lines (the device's coherence
// granule for host memory), so neither side's writes invalidate the line
// the other polls.
//
// The kernel marks itself running once when it starts (mailbox_start).
// Protocol, per request:
//   host:   payload; command, batch, arg; then seq (release).
//   kernel: sees seq != the last it served (acquire); copies the request
//           words (it never reads them again) and reads the payload; works; writes the reply payload, then status, then
//           done = seq (release).
//   host:   sees done == seq (acquire); reads status and the payload.
// Sequence numbers count 1, 2, ... and skip 0 when they wrap, so 0 means
// "none yet" on both sides. One request is in flight at a time; the host
// never writes the request words while one is. `running` is 1 from the
// kernel's first poll until it leaves (after a stop, or a fault it reports
// in `status`); `polls` counts its polls, so a wait that times out can say
// whether the kernel was still polling (a step slower than the bound) or
// not (a kernel that died or was never scheduled).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/device_weights.h"  // FERRY_HD

namespace ferry {
namespace cuda {

enum MailboxCommand : uint32_t {
  kMailNone = 0,
  kMailStep = 1,        // one step of the whole chain: x_t in, y_t out, the state advanced
  kMailStateGet = 2,    // the state to the staging block (ferry_state_get's layout)
  kMailStateSet = 3,    // the state from the staging block
  kMailStateReset = 4,  // the state to zero (ferry_state_reset)
  kMailStop = 5,        // leave the loop; the kernel exits after replying
  kMailCommands = 6,
};

// The status word of a reply: 0, or what went wrong on the device.
enum MailboxStatus : int32_t {
  kMailOk = 0,
  kMailUnknownCommand = 1,  // a command word the kernel does not know
  kMailBadBatch = 2,        // batch 0 or above the session's max_batch
  kMailDeviceFault = 3,     // the kernel found its own data inconsistent (arg: where)
  kMailStatuses = 4,
};

constexpr size_t kMailLine = 128;

struct MailboxRequest {
  uint32_t seq;      // written last by the host
  uint32_t command;  // MailboxCommand
  uint32_t batch;    // samples of a step or state copy
  uint32_t arg;      // reserved: 0
};

struct MailboxReply {
  uint32_t done;     // the last request served, written last by the kernel
  int32_t status;    // MailboxStatus of that request
  uint32_t running;  // 1 while the kernel polls, 0 before its first poll and after it leaves
  uint32_t polls;    // the kernel's polls so far (wraps)
};

struct alignas(kMailLine) Mailbox {
  MailboxRequest request;
  uint8_t pad0[kMailLine - sizeof(MailboxRequest)];
  MailboxReply reply;
  uint8_t pad1[kMailLine - sizeof(MailboxReply)];
};
static_assert(sizeof(Mailbox) == 2 * kMailLine, "request and reply on their own lines");

// ---------------------------------------------------------- ordering --
// Loads with acquire and stores with release, system scope. On the device:
// volatile accesses with a system fence after the load and before the
// store (sm_70+ would allow ld.acquire.sys; the fence is what every
// architecture the build targets has). On the host: the compiler's atomics.

FERRY_HD uint32_t mail_load(const uint32_t* p) {
#if defined(__CUDA_ARCH__)
  const uint32_t v = *static_cast<const volatile uint32_t*>(p);
  __threadfence_system();
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

FERRY_HD void mail_store(uint32_t* p, uint32_t v) {
#if defined(__CUDA_ARCH__)
  __threadfence_system();
  *static_cast<volatile uint32_t*>(p) = v;
#else
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

// The sequence number after `seq`: 1, 2, ..., 0xFFFFFFFF, 1, ...
FERRY_HD uint32_t mail_next(uint32_t seq) { return seq == 0xFFFFFFFFu ? 1u : seq + 1u; }

// ----------------------------------------------------- kernel's side --
// Called by one thread of the resident kernel (which then shares the
// request with its grid through a grid-wide sync).

// The polls between two updates of reply.polls (each a write across the
// bus: a poll is one read).
constexpr uint32_t kPollsPublished = 64;

// Once, when the kernel starts polling.
FERRY_HD void mailbox_start(Mailbox* box) { mail_store(&box->reply.running, 1); }

// A new request (its seq differs from `served`, the last one answered):
// true and *out filled; false when there is none. `*polls` counts the
// caller's polls; every kPollsPublished-th goes to reply.polls.
FERRY_HD bool mailbox_poll(Mailbox* box, uint32_t served, uint32_t* polls, MailboxRequest* out) {
  if (++*polls % kPollsPublished == 0) mail_store(&box->reply.polls, *polls);  // only the kernel writes it
  const uint32_t seq = mail_load(&box->request.seq);
  if (seq == 0 || seq == served) return false;
  out->seq = seq;
  out->command = box->request.command;
  out->batch = box->request.batch;
  out->arg = box->request.arg;
  return true;
}

// Answers request `seq` with `status` (after the reply's payload is
// written); `leaving`: the kernel exits after this (a stop, or a fault it
// cannot continue from), so running drops to 0 first.
FERRY_HD void mailbox_reply(Mailbox* box, uint32_t seq, int32_t status, bool leaving) {
  box->reply.status = status;
  if (leaving) mail_store(&box->reply.running, 0);
  mail_store(&box->reply.done, seq);
}

// ------------------------------------------------------- host's side --

// How the host waits for a reply: spin for `spin_us` microseconds, then
// yield the CPU between polls (sched_yield, then sleeps growing to
// `max_sleep_us`), for at most `timeout_us` in all.
struct WaitPolicy {
  uint32_t spin_us = 50;
  uint32_t max_sleep_us = 100;
  uint64_t timeout_us = 2000000;  // 2 s
};

// How the host asks whether the kernel is still there, after the spin
// phase and then at most once a millisecond (never on a step that answers
// within the spin): FERRY_OK while it runs; otherwise the status and
// message to fail the wait with (the backend asks cudaStreamQuery: a kernel
// that faulted, or ended without replying).
struct MailboxProbe {
  ferry_status (*check)(void* ctx) = nullptr;
  void* ctx = nullptr;
};

// What a host wait saw, for tests and the profiler.
struct WaitStats {
  uint64_t spins = 0;   // polls while spinning
  uint64_t yields = 0;  // polls after the spin phase
  uint64_t waited_ns = 0;
};

// The host's end of one mailbox. Not thread-safe, except abandon(), which
// another thread may call while wait() runs (ferry_session_release while a
// step waits), and the waiting flag it reads.
class MailboxHost {
 public:
  // `box`: the host's view of the mapped mailbox, zeroed (the kernel is
  // launched after this).
  void init(Mailbox* box, const WaitPolicy& policy, const MailboxProbe& probe = MailboxProbe());

  // Posts a request and waits for its reply. FERRY_OK when the kernel
  // answered kMailOk; otherwise FERRY_INVALID_STATE with the reason in
  // ferry_last_error(): the kernel's status, no reply within the bound
  // (naming the request, the bound, and whether the kernel was still
  // polling), the kernel gone, a reply to another request, the session
  // released during the wait, or the mailbox already broken by one of
  // these (every call after the first failure says so: the kernel may
  // still write the payload of the request that failed).
  ferry_status call(uint32_t command, uint32_t batch, WaitStats* stats = nullptr);

  // Posts kMailStop and waits up to `timeout_us` for the kernel to leave
  // (running back to 0). FERRY_OK when it left; FERRY_INVALID_STATE
  // otherwise, and then the caller must not free the mapped memory the
  // kernel may still write. A second stop, or one after a failed stop,
  // checks again without posting.
  ferry_status stop(uint64_t timeout_us);

  // From another thread: makes a wait in progress return
  // FERRY_INVALID_STATE ("released while a request waited") within one
  // poll, and every later call fail. Returns once no wait is in progress.
  void abandon();

  bool broken() const { return broken_ != FERRY_OK; }
  bool stopped() const { return stopped_; }
  uint32_t last_seq() const { return seq_; }

  // Continues from request `seq`, answered (tests: the wrap past
  // 0xFFFFFFFF; the device's reply.done must say `seq` too).
  void set_sequence_for_test(uint32_t seq) { seq_ = answered_ = seq; }

 private:
  // Writes the request and rings: returns its sequence number.
  uint32_t post(uint32_t command, uint32_t batch);
  // `stopping`: stop()'s wait, which outlasts abandon() and accepts any
  // earlier reply while the stop is pending.
  ferry_status wait(uint32_t seq, uint32_t command, uint64_t timeout_us, bool stopping, WaitStats* stats);
  ferry_status fail_broken(ferry_status status, const char* format, ...);

  Mailbox* box_ = nullptr;
  WaitPolicy policy_;
  MailboxProbe probe_;
  uint32_t stop_seq_ = 0;      // the stop posted, 0 before
  uint32_t seq_ = 0;           // the last request posted
  uint32_t answered_ = 0;      // the last request whose reply was seen (reply.done before the next)
  bool stopped_ = false;       // a stop was answered
  ferry_status broken_ = FERRY_OK;
  char broken_message_[256] = {};
  uint32_t abandoned_ = 0;     // set by abandon(), read by wait() (atomics)
  uint32_t waiting_ = 0;       // 1 while wait() runs (atomics)
};

const char* mail_command_name(uint32_t command);
const char* mail_status_name(int32_t status);

// Every mailbox whose kernel runs, so that a process that exits without
// ferry_session_release stops them (a resident kernel would otherwise keep
// the context's teardown waiting). A fixed table: nothing allocates.
constexpr int kMaxResidentSessions = 64;
// false when the table is full (the session then refuses the resident path).
bool resident_register(MailboxHost* host);
void resident_unregister(MailboxHost* host);
// Stops every registered kernel (bounded by `timeout_us` each); the
// backend registers this with atexit. Returns how many failed to stop.
int resident_stop_all(uint64_t timeout_us);

}  // namespace cuda
}  // namespace ferry
