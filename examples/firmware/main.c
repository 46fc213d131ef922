/*
 * Example firmware: a ferry model in flash, one inference, the golden
 * self-test, no heap and no OS.
 *
 *   model_data.h  the model as a const, 64-byte aligned array (flash), made
 *                 by `ferry convert model.pt model.fb --c-array model_data.h`
 *   g_handle      the model handle, in .bss: ferry_model_load allocates nothing
 *   g_arena       the session arena, in .bss, sized at build time
 *
 * Results go to g_result (read it with a debugger) and, when built with
 * FIRMWARE_SEMIHOSTING=1, to the debugger's console through semihosting
 * (under qemu-system-arm -semihosting too, which then exits with the
 * firmware's status). A board without a debugger attached needs
 * FIRMWARE_SEMIHOSTING=0: a semihosting call without one stops the core.
 */
#include <ferry/ferry.h>
#include <stdint.h>
#include <string.h>

/* model_data.h declares model_data[] and model_data_len; the build may name
 * another header (FIRMWARE_MODEL_HEADER) and its array. */
#ifndef FIRMWARE_MODEL_HEADER
#define FIRMWARE_MODEL_HEADER "model_data.h"
#define FIRMWARE_MODEL model_data
#define FIRMWARE_MODEL_LEN model_data_len
#endif
#include FIRMWARE_MODEL_HEADER

#ifndef FIRMWARE_ARENA_BYTES
#define FIRMWARE_ARENA_BYTES (24u * 1024u)
#endif
#ifndef FIRMWARE_HANDLE_BYTES
#define FIRMWARE_HANDLE_BYTES (20u * 1024u)
#endif
#ifndef FIRMWARE_SEMIHOSTING
#define FIRMWARE_SEMIHOSTING 0
#endif
#define FIRMWARE_STEPS 8
#define FIRMWARE_MAX_OUTPUT 64

static uint8_t g_handle[FIRMWARE_HANDLE_BYTES] __attribute__((aligned(FERRY_ALIGNMENT)));
static uint8_t g_arena[FIRMWARE_ARENA_BYTES] __attribute__((aligned(FERRY_ALIGNMENT)));
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

/* --------------------------------------------------------- cycle count -- */

#define DEMCR (*(volatile uint32_t*)0xE000EDFCu)
#define DWT_CTRL (*(volatile uint32_t*)0xE0001000u)
#define DWT_CYCCNT (*(volatile uint32_t*)0xE0001004u)

/* ----------------------------------------------------------------- main -- */

int main(void) {
  put("ferry ");
  put(ferry_version());
  put(" on Cortex-M, model ");
  put_uint((uint32_t)FIRMWARE_MODEL_LEN);
  put(" bytes in flash\n");

  if (ferry_model_handle_size() > sizeof g_handle) {
    put("ferry: the model handle needs ");
    put_uint((uint32_t)ferry_model_handle_size());
    put(" bytes: raise FIRMWARE_HANDLE_BYTES\n");
    return failed("handle", FERRY_ARENA_TOO_SMALL);
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
  if (arena_bytes > sizeof g_arena) {
    put("ferry: the session needs ");
    put_uint((uint32_t)arena_bytes);
    put(" bytes: raise FIRMWARE_ARENA_BYTES\n");
    return failed("arena", FERRY_ARENA_TOO_SMALL);
  }
  g_result.arena_bytes = (uint32_t)arena_bytes;
  ferry_session* session = NULL;
  st = ferry_session_init(model, &so, g_arena, sizeof g_arena, &session);
  if (st != FERRY_OK) return failed("session", st);
  const size_t out_n = info.output_size < FIRMWARE_MAX_OUTPUT ? info.output_size : FIRMWARE_MAX_OUTPUT;
  if (info.output_size > FIRMWARE_MAX_OUTPUT) return failed("output too wide", FERRY_UNSUPPORTED);

  DEMCR |= 1u << 24; /* TRCENA */
  DWT_CYCCNT = 0;
  DWT_CTRL |= 1u; /* CYCCNTENA */
  const uint32_t t0 = DWT_CYCCNT;
  const size_t steps = info.has_time_axis ? FIRMWARE_STEPS : 1;
  for (size_t t = 0; t < steps && st == FERRY_OK; ++t) {
    for (size_t i = 0; i < info.input_size; ++i) g_input[i] = (float)((int)((t * 7 + i) % 17) - 8) / 8.0f;
    st = ferry_step(session, g_input, 1, g_output, info.output_size);
  }
  g_result.cycles = DWT_CYCCNT - t0;
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
  put("\n");

  /* The golden vectors stored in the model by ferry convert. */
  size_t selftest_bytes = 0;
  st = ferry_selftest_arena_size(model, &selftest_bytes);
  if (st != FERRY_OK) return failed("selftest arena size", st);
  if (selftest_bytes > sizeof g_arena) return failed("selftest arena", FERRY_ARENA_TOO_SMALL);
  int passed = 0;
  float max_error = 0;
  st = ferry_selftest(model, FERRY_BACKEND_AUTO, g_arena, sizeof g_arena, &passed, &max_error);
  if (st != FERRY_OK) return failed("selftest", st);
  g_result.selftest_passed = passed;
  g_result.selftest_max_error = max_error;
  put("selftest max abs error ");
  put_float(max_error);
  put(passed ? ": PASS\n" : ": FAIL\n");
  return passed ? 0 : 1;
}
