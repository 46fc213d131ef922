/*
 * Example firmware: a ferry model in flash, one inference, the golden
 * self-test, no heap and no OS.
 *
 *   model_data.h  the model as a const, 64-byte aligned array (flash), made
 *                 by `ferry convert model.pt model.fb --c-array model_data.h`
 *   g_handle      the model handle, in .bss: ferry_model_load allocates nothing
 *   g_arena       the session arena, in .bss, sized at build time by the
 *                 header's macros (exact; checked against the runtime)
 *
 * Results go to g_result (read it with a debugger) and, when built with
 * FIRMWARE_SEMIHOSTING=1, to the debugger's console through semihosting
 * (under qemu-system-arm -semihosting too, which then exits with the
 * firmware's status). A board without a debugger attached needs
 * FIRMWARE_SEMIHOSTING=0: a semihosting call without one stops the core.
 *
 * The console prints each output and the self-test's error twice: as
 * decimals and as IEEE-754 bit patterns (`output bits`, `selftest bits`),
 * so that two builds (soft and hard float, two cores) compare bit for bit
 * as text. It also prints what one ferry_step costs, timed with SysTick on
 * the processor clock (see "step timing" below).
 */
#include <ferry/ferry.h>
#include <stdint.h>
#include <string.h>

/* model_data.h declares model_data[] and model_data_len, and the memory
 * the model takes on this target as macros (MODEL_DATA_ARENA_BYTES, ...);
 * the build may name another header (FIRMWARE_MODEL_HEADER), its array and
 * its macros (CMakeLists.txt: from the header's name). */
#ifndef FIRMWARE_MODEL_HEADER
#define FIRMWARE_MODEL_HEADER "model_data.h"
#define FIRMWARE_MODEL model_data
#define FIRMWARE_MODEL_LEN model_data_len
#define FIRMWARE_ARENA_BYTES MODEL_DATA_ARENA_BYTES
#define FIRMWARE_SELFTEST_ARENA_BYTES MODEL_DATA_SELFTEST_ARENA_BYTES
#define FIRMWARE_HANDLE_BYTES MODEL_DATA_HANDLE_BYTES
#endif
#include FIRMWARE_MODEL_HEADER

/* One buffer for the streaming session, then for the self-test: each is
 * given exactly the bytes the header says. */
#define FIRMWARE_BUFFER_BYTES \
  (FIRMWARE_ARENA_BYTES > FIRMWARE_SELFTEST_ARENA_BYTES ? FIRMWARE_ARENA_BYTES : FIRMWARE_SELFTEST_ARENA_BYTES)
#ifndef FIRMWARE_SEMIHOSTING
#define FIRMWARE_SEMIHOSTING 0
#endif
/* FIRMWARE_QEMU_ICOUNT_SHIFT=N: the image is meant to run under
 * qemu-system-arm -icount shift=N (build.sh runs it with shift=0), where
 * virtual time advances 2^N ns per guest instruction; FIRMWARE_SYSCLK_HZ is
 * then the board's processor clock as QEMU models it (SysTick's clock). */
#if defined(FIRMWARE_QEMU_ICOUNT_SHIFT) && !defined(FIRMWARE_SYSCLK_HZ)
#error "FIRMWARE_QEMU_ICOUNT_SHIFT needs FIRMWARE_SYSCLK_HZ (the board's processor clock in QEMU)"
#endif
#define FIRMWARE_STEPS 8
#define FIRMWARE_MAX_OUTPUT 64

static uint8_t g_handle[FIRMWARE_HANDLE_BYTES] __attribute__((aligned(FERRY_ALIGNMENT)));
static uint8_t g_arena[FIRMWARE_BUFFER_BYTES] __attribute__((aligned(FERRY_ALIGNMENT)));
static float g_input[256];
static float g_output[FIRMWARE_MAX_OUTPUT];

/* For a debugger when there is no console. */
volatile struct {
  int32_t status; /* ferry_status of the failing call, 0 if none */
  int32_t selftest_passed;
  float selftest_max_error;
  float output[8];
  uint32_t arena_bytes;
  uint32_t cycles; /* DWT cycle count of the inference (0 where there is no DWT) */
  uint32_t step_ticks; /* SysTick ticks (processor clock) of one ferry_step, mean */
} g_result;

/* ------------------------------------------------------------ console -- */

static int semihost(int op, const void* arg) {
#if FIRMWARE_SEMIHOSTING
  register int r0 __asm__("r0") = op;
  register const void* r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt #0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
#else
  (void)op;
  (void)arg;
  return 0;
#endif
}

static void put(const char* s) { semihost(0x04 /* SYS_WRITE0 */, s); }

static void put_uint(uint32_t v) {
  char buf[12];
  int i = 11;
  buf[i] = '\0';
  do buf[--i] = (char)('0' + v % 10u); while ((v /= 10u) != 0 && i > 0);
  put(&buf[i]);
}

/* The IEEE-754 bits of v as 8 hex digits, e.g. 3d969b8a. */
static void put_bits(float v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  char buf[9];
  for (int i = 7; i >= 0; --i, bits >>= 4) buf[i] = "0123456789abcdef"[bits & 0xFu];
  buf[8] = '\0';
  put(buf);
}

/* printf("%.6f") without newlib's float printf. */
static void put_float(float v) {
  if (v != v) { put("nan"); return; }
  if (v < 0) { put("-"); v = -v; }
  if (v > 4.0e9f) { put("inf"); return; }
  uint32_t whole = (uint32_t)v;
  uint32_t frac = (uint32_t)((v - (float)whole) * 1e6f + 0.5f);
  if (frac >= 1000000u) { whole += 1; frac -= 1000000u; }
  put_uint(whole);
  char digits[8] = ".000000";
  for (int i = 6; i >= 1; --i, frac /= 10u) digits[i] = (char)('0' + frac % 10u);
  put(digits);
}

void firmware_exit(int status) {
  /* SYS_EXIT: ADP_Stopped_ApplicationExit, or ADP_Stopped_InternalError. */
  semihost(0x18, (const void*)(uintptr_t)(status == 0 ? 0x20026u : 0x20024u));
  for (;;) __asm__ volatile("wfi");
}

static int failed(const char* what, ferry_status status) {
  g_result.status = (int32_t)status;
  put("ferry: ");
  put(what);
  put(": ");
  put(ferry_status_string(status));
  put(": ");
  put(ferry_last_error());
  put("\n");
  return 1;
}

/* A size the runtime asks for that is not the model header's figure. */
static int header_differs(const char* what, size_t runtime_bytes, size_t header_bytes) {
  put("ferry: the ");
  put(what);
  put(" takes ");
  put_uint((uint32_t)runtime_bytes);
  put(" bytes, the header says ");
  put_uint((uint32_t)header_bytes);
  put("\n");
  return failed(what, FERRY_ARENA_TOO_SMALL);
}

/* --------------------------------------------------------- cycle count -- */

#define DEMCR (*(volatile uint32_t*)0xE000EDFCu)
#define DWT_CTRL (*(volatile uint32_t*)0xE0001000u)
#define DWT_CYCCNT (*(volatile uint32_t*)0xE0001004u)

/* ---------------------------------------------------------- step timing --
 * SysTick counts down from RVR on the processor clock (CSR.CLKSOURCE = 1);
 * each wrap to RVR raises the SysTick exception, which counts the wraps, so
 * a 24-bit counter times runs of any length. On a real core a tick is a
 * cycle. QEMU does not emulate DWT CYCCNT (it reads 0), and its SysTick
 * follows QEMU's virtual clock at the board's SYSCLK: under -icount shift=N
 * that clock advances 2^N ns per instruction, so ticks * 1e9 / SYSCLK_HZ /
 * 2^N is an instruction count, to one tick (1e9 / SYSCLK_HZ / 2^N
 * instructions: 40 at mps2's 25 MHz, 50 at an505's 20 MHz, 31.25 at
 * an547's 32 MHz). Without -icount the virtual clock follows the host's
 * clock and the ticks measure nothing about the firmware. */
#define SYST_CSR (*(volatile uint32_t*)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018u)
#define SYST_RELOAD 0xFFFFFFu

static volatile uint32_t g_systick_wraps;

/* Replaces the weak default handler in startup_cortex_m.c. */
void SysTick_Handler(void) { g_systick_wraps = g_systick_wraps + 1u; }

static void systick_start(void) {
  SYST_CSR = 0;
  SYST_RVR = SYST_RELOAD;
  SYST_CVR = 0; /* any write clears it: the count starts at RVR */
  g_systick_wraps = 0;
  SYST_CSR = 0x7u; /* CLKSOURCE (processor clock) | TICKINT | ENABLE */
}

/* Ticks since systick_start; a wrap between the two reads reads again. A
 * wrap whose exception is still pending (ICSR.PENDSTSET: the counter has
 * reloaded, the handler has not run yet) counts too, when the count was
 * read after the reload. */
#define SCB_ICSR (*(volatile uint32_t*)0xE000ED04u)
static uint64_t systick_now(void) {
  uint32_t wraps, count, pending;
  do {
    wraps = g_systick_wraps;
    count = SYST_CVR;
    pending = (SCB_ICSR >> 26) & 1u;
  } while (wraps != g_systick_wraps);
  if (pending && count > SYST_RELOAD / 2u) wraps += 1u;
  return (uint64_t)wraps * (SYST_RELOAD + 1u) + (SYST_RELOAD - count);
}

static void put_step_cost(uint64_t ticks, uint32_t steps) {
  if (steps == 0) return;
  const uint64_t mean_ticks = (ticks + steps / 2) / steps;
  g_result.step_ticks = (uint32_t)mean_ticks;
#if defined(FIRMWARE_QEMU_ICOUNT_SHIFT)
  if (g_result.cycles == 0) { /* no DWT CYCCNT: QEMU, as this build expects */
    /* One tick is 1e9 / SYSCLK_HZ ns, one instruction 2^shift ns. Each
     * step is timed on its own, so its ticks are exact to one tick, and so
     * is their mean. */
    const uint64_t per_insn_hz = (uint64_t)(FIRMWARE_SYSCLK_HZ) << (FIRMWARE_QEMU_ICOUNT_SHIFT);
    const uint64_t insns = (ticks * 1000000000u / steps + per_insn_hz / 2) / per_insn_hz;
    const uint32_t resolution = (uint32_t)((1000000000u + per_insn_hz - 1) / per_insn_hz);
    put("step instructions ");
    put_uint((uint32_t)insns);
    put(" (QEMU -icount shift=");
    put_uint((uint32_t)(FIRMWARE_QEMU_ICOUNT_SHIFT));
    put(", mean of ");
    put_uint(steps);
    put(" steps, +-");
    put_uint(resolution);
    put(")\n");
    return;
  }
#endif
  /* A real core (SysTick on the processor clock: ticks are cycles), or
   * QEMU without -icount (ticks of the host's clock: not a cost). */
  put("step SysTick ticks ");
  put_uint((uint32_t)mean_ticks);
  put(" (processor clock: cycles on a real core; mean of ");
  put_uint(steps);
  put(" steps, +-1)\n");
}

/* ----------------------------------------------------------------- main -- */

int main(void) {
  put("ferry ");
  put(ferry_version());
  put(" on Cortex-M, model ");
  put_uint((uint32_t)FIRMWARE_MODEL_LEN);
  put(" bytes in flash\n");

  /* The header's figures are exact: a difference is a bug worth stopping for. */
  if (ferry_model_handle_size() != sizeof g_handle) {
    return header_differs("handle", ferry_model_handle_size(), sizeof g_handle);
  }
  ferry_model_options options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.handle_memory = g_handle;
  options.handle_memory_size = sizeof g_handle;
  ferry_model* model = NULL;
  ferry_status st = ferry_model_load(FIRMWARE_MODEL, FIRMWARE_MODEL_LEN, &options, &model);
  if (st != FERRY_OK) return failed("load", st);

  ferry_model_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ferry_model_get_info(model, &info);
  if (info.input_size > sizeof g_input / sizeof g_input[0]) return failed("input too wide", FERRY_UNSUPPORTED);

  /* One inference: FIRMWARE_STEPS steps streamed through ferry_step. */
  ferry_session_options so;
  ferry_session_options_init(&so);
  so.max_batch = 1;
  so.max_seq = 1;
  size_t arena_bytes = 0;
  st = ferry_session_arena_size(model, &so, &arena_bytes);
  if (st != FERRY_OK) return failed("arena size", st);
  if (arena_bytes != FIRMWARE_ARENA_BYTES) return header_differs("arena", arena_bytes, FIRMWARE_ARENA_BYTES);
  g_result.arena_bytes = (uint32_t)arena_bytes;
  ferry_session* session = NULL;
  st = ferry_session_init(model, &so, g_arena, FIRMWARE_ARENA_BYTES, &session);
  if (st != FERRY_OK) return failed("session", st);
  const size_t out_n = info.output_size < FIRMWARE_MAX_OUTPUT ? info.output_size : FIRMWARE_MAX_OUTPUT;
  if (info.output_size > FIRMWARE_MAX_OUTPUT) return failed("output too wide", FERRY_UNSUPPORTED);

  DEMCR |= 1u << 24; /* TRCENA */
  DWT_CYCCNT = 0;
  DWT_CTRL |= 1u; /* CYCCNTENA */
  systick_start();
  uint64_t step_ticks = 0; /* the ferry_step calls only, not the input fill */
  const uint32_t t0 = DWT_CYCCNT;
  const size_t steps = info.has_time_axis ? FIRMWARE_STEPS : 1;
  for (size_t t = 0; t < steps && st == FERRY_OK; ++t) {
    for (size_t i = 0; i < info.input_size; ++i) g_input[i] = (float)((int)((t * 7 + i) % 17) - 8) / 8.0f;
    const uint64_t s0 = systick_now();
    st = ferry_step(session, g_input, 1, g_output, info.output_size);
    step_ticks += systick_now() - s0;
  }
  g_result.cycles = DWT_CYCCNT - t0;
  SYST_CSR = 0;
  if (st != FERRY_OK) return failed("step", st);
  put("inference ");
  put_uint((uint32_t)steps);
  put(" steps, arena ");
  put_uint((uint32_t)arena_bytes);
  put(" bytes");
  if (g_result.cycles) {
    put(", ");
    put_uint(g_result.cycles);
    put(" cycles");
  }
  put("\noutput");
  for (size_t i = 0; i < out_n; ++i) {
    if (i < 8) g_result.output[i] = g_output[i];
    put(" ");
    put_float(g_output[i]);
  }
  put("\noutput bits");
  for (size_t i = 0; i < out_n; ++i) {
    put(" ");
    put_bits(g_output[i]);
  }
  put("\n");
  put_step_cost(step_ticks, (uint32_t)steps);

  /* The golden vectors stored in the model by ferry convert (a model
   * converted without them has a SELFTEST_ARENA_BYTES of 0). */
  if (FIRMWARE_SELFTEST_ARENA_BYTES == 0) {
    put("selftest: the model holds no self-test vectors\n");
    return 0;
  }
  size_t selftest_bytes = 0;
  st = ferry_selftest_arena_size(model, &selftest_bytes);
  if (st != FERRY_OK) return failed("selftest arena size", st);
  if (selftest_bytes != FIRMWARE_SELFTEST_ARENA_BYTES) {
    return header_differs("selftest arena", selftest_bytes, FIRMWARE_SELFTEST_ARENA_BYTES);
  }
  int passed = 0;
  float max_error = 0;
  st = ferry_selftest(model, FERRY_BACKEND_AUTO, g_arena, FIRMWARE_SELFTEST_ARENA_BYTES, &passed, &max_error);
  if (st != FERRY_OK) return failed("selftest", st);
  g_result.selftest_passed = passed;
  g_result.selftest_max_error = max_error;
  put("selftest bits ");
  put_bits(max_error);
  put("\nselftest max abs error ");
  put_float(max_error);
  put(passed ? ": PASS\n" : ": FAIL\n");
  return passed ? 0 : 1;
}
