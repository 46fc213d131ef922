// The host's side of the resident kernel's mailbox (mailbox.h).
#include "backend/cuda/mailbox.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/status.h"

namespace ferry {
namespace cuda {
namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void sleep_us(uint64_t us) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(us / 1000000u);
  ts.tv_nsec = static_cast<long>((us % 1000000u) * 1000u);
  nanosleep(&ts, nullptr);
}

}  // namespace

const char* mail_command_name(uint32_t command) {
  static const char* const names[kMailCommands] = {"none", "step", "state get", "state set", "state reset", "stop"};
  return command < kMailCommands ? names[command] : "unknown command";
}

const char* mail_status_name(int32_t status) {
  static const char* const names[kMailStatuses] = {"ok", "an unknown command", "a batch outside 1..max_batch",
                                                   "a fault in its own data"};
  return status >= 0 && status < kMailStatuses ? names[status] : "an unknown status";
}

void MailboxHost::init(Mailbox* box, const WaitPolicy& policy, const MailboxProbe& probe) {
  box_ = box;
  policy_ = policy;
  probe_ = probe;
  seq_ = 0;
  answered_ = 0;
  stop_seq_ = 0;
  stopped_ = false;
  broken_ = FERRY_OK;
  broken_message_[0] = '\0';
  __atomic_store_n(&abandoned_, 0u, __ATOMIC_RELEASE);
  __atomic_store_n(&waiting_, 0u, __ATOMIC_RELEASE);
}

ferry_status MailboxHost::fail_broken(ferry_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(broken_message_, sizeof(broken_message_), format, args);
  va_end(args);
  broken_ = status;
  return fail(status, "%s", broken_message_);
}

uint32_t MailboxHost::post(uint32_t command, uint32_t batch) {
  seq_ = mail_next(seq_);
  box_->request.command = command;
  box_->request.batch = batch;
  box_->request.arg = 0;
  mail_store(&box_->request.seq, seq_);  // the doorbell: after the words it publishes
  return seq_;
}

ferry_status MailboxHost::wait(uint32_t seq, uint32_t command, uint64_t timeout_us, bool stopping,
                               WaitStats* stats) {
  __atomic_store_n(&waiting_, 1u, __ATOMIC_SEQ_CST);
  const uint64_t start = now_ns();
  const uint64_t spin_ns = uint64_t{policy_.spin_us} * 1000u;
  const uint64_t limit_ns = timeout_us * 1000u;
  uint64_t spins = 0, yields = 0, next_probe_ns = spin_ns;
  uint32_t nap_us = 0;
  ferry_status st = FERRY_OK;
  for (;;) {
    const uint32_t done = mail_load(&box_->reply.done);
    if (done == seq) break;
    if (!stopping && __atomic_load_n(&abandoned_, __ATOMIC_ACQUIRE) != 0) {
      st = fail_broken(FERRY_INVALID_STATE,
                       "cuda resident kernel: the session was released while request %u (%s) waited", seq,
                       mail_command_name(command));
      break;
    }
    if (!stopping && done != answered_) {
      st = fail_broken(FERRY_INVALID_STATE,
                       "cuda resident kernel: it answered request %u while request %u (%s) waited; the mailbox is "
                       "out of step", done, seq, mail_command_name(command));
      break;
    }
    const uint64_t t = now_ns() - start;
    if (t >= limit_ns) {
      // Whether the kernel still polls: its poll counter over one more
      // millisecond (on this failing path only).
      const uint32_t polls_then = mail_load(&box_->reply.polls);
      sleep_us(1000);
      const uint32_t polls = mail_load(&box_->reply.polls);
      const uint32_t running = mail_load(&box_->reply.running);
      st = fail_broken(FERRY_INVALID_STATE,
                       "cuda resident kernel: no reply to request %u (%s) within %llu us (%s; its last reply was to "
                       "request %u)", seq, mail_command_name(command), static_cast<unsigned long long>(timeout_us),
                       running == 0 ? (polls == 0 ? "it never polled the mailbox" : "it is not running")
                       : polls != polls_then ? "it still polls but did not serve the request"
                                               : "it took the request and has not finished it",
                       done);
      break;
    }
    if (t < spin_ns) {
      ++spins;
      cpu_relax();
      continue;
    }
    ++yields;
    if (probe_.check && t >= next_probe_ns) {
      next_probe_ns = t + 1000000u;  // at most once a millisecond
      const ferry_status alive = probe_.check(probe_.ctx);
      if (alive != FERRY_OK) {
        // The probe's message is in ferry_last_error(); keep it as the reason.
        char reason[200];
        snprintf(reason, sizeof(reason), "%s", ferry_last_error());
        st = fail_broken(alive, "cuda resident kernel: request %u (%s) cannot complete: %s", seq,
                         mail_command_name(command), reason);
        break;
      }
    }
    if (nap_us == 0) {
      sched_yield();
      nap_us = 1;
    } else {
      const uint64_t left_us = (limit_ns - t) / 1000u + 1u;
      sleep_us(nap_us < left_us ? nap_us : left_us);
      nap_us = nap_us * 2 > policy_.max_sleep_us ? (policy_.max_sleep_us ? policy_.max_sleep_us : 1u) : nap_us * 2;
    }
  }
  if (stats) {
    stats->spins = spins;
    stats->yields = yields;
    stats->waited_ns = now_ns() - start;
  }
  __atomic_store_n(&waiting_, 0u, __ATOMIC_RELEASE);
  return st;
}

ferry_status MailboxHost::call(uint32_t command, uint32_t batch, WaitStats* stats) {
  if (!box_) return fail(FERRY_INVALID_STATE, "cuda resident kernel: the mailbox was never set up");
  if (broken_ != FERRY_OK) {
    return fail(broken_, "cuda resident kernel: an earlier request failed, so the kernel's state is unknown (%s)",
                broken_message_);
  }
  if (__atomic_load_n(&abandoned_, __ATOMIC_ACQUIRE) != 0) {
    return fail(FERRY_INVALID_STATE, "cuda resident kernel: the session is being released");
  }
  if (stopped_ || stop_seq_ != 0) return fail(FERRY_INVALID_STATE, "cuda resident kernel: it was stopped");
  if (command == kMailNone || command == kMailStop || command >= kMailCommands) {
    return fail(FERRY_INVALID_ARGUMENT, "cuda resident kernel: command %u is not a request (%s)", command,
                mail_command_name(command));
  }
  const uint32_t seq = post(command, batch);
  const ferry_status st = wait(seq, command, policy_.timeout_us, false, stats);
  if (st != FERRY_OK) return st;
  answered_ = seq;
  const int32_t status = box_->reply.status;  // after the acquire of done == seq
  if (status != kMailOk) {
    return fail_broken(FERRY_INVALID_STATE, "cuda resident kernel: request %u (%s, batch %u) failed on the device: "
                       "%s (status %d)", seq, mail_command_name(command), batch, mail_status_name(status), status);
  }
  return FERRY_OK;
}

ferry_status MailboxHost::stop(uint64_t timeout_us) {
  if (!box_ || stopped_) return FERRY_OK;
  if (stop_seq_ == 0) {
    // After a request that timed out the kernel may still be working on it;
    // it copied that request's words when it took it, so the stop may
    // overwrite them, and it serves the stop when it next polls.
    stop_seq_ = post(kMailStop, 0);
  }
  const ferry_status saved = broken_;
  char saved_message[sizeof(broken_message_)];
  memcpy(saved_message, broken_message_, sizeof(saved_message));
  ferry_status st = wait(stop_seq_, kMailStop, timeout_us, true, nullptr);
  if (st == FERRY_OK) {
    stopped_ = true;
    st = box_->reply.status == kMailOk ? FERRY_OK
         : fail(FERRY_INVALID_STATE, "cuda resident kernel: it stopped with %s (status %d)",
                mail_status_name(box_->reply.status), box_->reply.status);
  }
  if (saved != FERRY_OK) {  // a stop keeps the first failure as the mailbox's reason
    broken_ = saved;
    memcpy(broken_message_, saved_message, sizeof(saved_message));
  } else if (!stopped_) {
    broken_ = st;
  }
  return st;
}

void MailboxHost::abandon() {
  __atomic_store_n(&abandoned_, 1u, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&waiting_, __ATOMIC_ACQUIRE) != 0) sched_yield();
}

// ------------------------------------------------------------ registry --

namespace {

MailboxHost* g_resident[kMaxResidentSessions];
int g_resident_lock = 0;

void lock_registry() {
  while (__atomic_exchange_n(&g_resident_lock, 1, __ATOMIC_ACQUIRE) != 0) sched_yield();
}
void unlock_registry() { __atomic_store_n(&g_resident_lock, 0, __ATOMIC_RELEASE); }

}  // namespace

bool resident_register(MailboxHost* host) {
  lock_registry();
  bool placed = false;
  for (MailboxHost*& slot : g_resident) {
    if (!slot) {
      slot = host;
      placed = true;
      break;
    }
  }
  unlock_registry();
  return placed;
}

void resident_unregister(MailboxHost* host) {
  lock_registry();
  for (MailboxHost*& slot : g_resident) {
    if (slot == host) slot = nullptr;
  }
  unlock_registry();
}

int resident_stop_all(uint64_t timeout_us) {
  MailboxHost* hosts[kMaxResidentSessions];
  lock_registry();
  memcpy(hosts, g_resident, sizeof(hosts));
  memset(g_resident, 0, sizeof(g_resident));
  unlock_registry();
  int failed = 0;
  for (MailboxHost* host : hosts) {
    if (host && host->stop(timeout_us) != FERRY_OK) ++failed;
  }
  return failed;
}

}  // namespace cuda
}  // namespace ferry
