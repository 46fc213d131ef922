/*
 * ferry runtime — memory sizes at compile time.
 *
 * The model handle and the session arena as constant expressions, for
 * static buffers that are exactly as large as the runtime asks:
 *
 *   static uint8_t handle[FERRY_MODEL_HANDLE_BYTES];      (this build's capacities)
 *   static uint8_t arena[MODEL_ARENA_BYTES];              (from `ferry convert --c-array`)
 *
 * A model header made by `ferry convert ... --c-array model.h` defines its
 * arena figures with FERRY_ARENA_BYTES_CPU() below, from the parts of the
 * session that are the same on every target; the parts that hold pointers
 * come from this header, per pointer width. The runtime checks at build time
 * that each figure here is what it reserves (static_asserts in its sources), so
 * the macros are exact on every target it builds for, and a too-small
 * buffer is still refused at run time (FERRY_ARENA_TOO_SMALL).
 *
 * Included by ferry.h; C89 preprocessor arithmetic only.
 */
#ifndef FERRY_FERRY_SIZES_H_
#define FERRY_FERRY_SIZES_H_

#include <stdint.h>

/* Capacities of the model handle: the most elements of a model's chain and
 * the most recurrent (layer, direction) cells. A firmware build lowers them
 * (-DFERRY_MAX_CHAIN=16 -DFERRY_MAX_CELLS=8, or ferry/ferry_config.h in an
 * export) to shrink the handle; a model beyond them is refused at load, and
 * a model header says what its model needs (MODEL_MAX_CHAIN, MODEL_MAX_CELLS). */
#if defined(__has_include)
#if __has_include("ferry_config.h")
#include "ferry_config.h"
#endif
#endif
#ifndef FERRY_MAX_CHAIN
#define FERRY_MAX_CHAIN 64
#endif
#ifndef FERRY_MAX_CELLS
#define FERRY_MAX_CELLS 128
#endif

#define FERRY_ROUND_UP_64(n) ((((n) + 63u) / 64u) * 64u)

/* The parts that hold pointers: 64-bit targets, then 32-bit ones. */
#if UINTPTR_MAX > 0xFFFFFFFFu
#define FERRY_SIZEOF_HANDLE_HEAD 88u  /* the model handle before its layers */
#define FERRY_SIZEOF_LAYER 192u       /* one element of the chain */
#define FERRY_SIZEOF_CELL 168u        /* one (layer, direction) cell */
/* The CPU backend's control block: fixed on 64-bit targets. */
#define FERRY_SIZEOF_CPU_CONTROL 2048u
#define FERRY_SIZEOF_LONE_STEP 160u   /* a streaming cell's step, laid out at init */
#define FERRY_SIZEOF_STEP_PROGRAM 24u /* the streaming program's head */
#else
#define FERRY_SIZEOF_HANDLE_HEAD 72u
#define FERRY_SIZEOF_LAYER 160u
#define FERRY_SIZEOF_CELL 104u
/* Per element and cell of the capacities: the per-layer kernel choice. */
#define FERRY_SIZEOF_CPU_CONTROL (136u + 6u * (FERRY_MAX_CHAIN) + 5u * (FERRY_MAX_CELLS))
#define FERRY_SIZEOF_LONE_STEP 88u
#define FERRY_SIZEOF_STEP_PROGRAM 20u
#endif
#define FERRY_SIZEOF_STEP_OP 12u
#define FERRY_SIZEOF_SESSION_HEAD 64u /* what every session holds, rounded */

/* The model handle of this build (ferry_model_handle_size()). */
#define FERRY_MODEL_HANDLE_BYTES \
  (FERRY_SIZEOF_HANDLE_HEAD + (FERRY_MAX_CHAIN) * FERRY_SIZEOF_LAYER + (FERRY_MAX_CELLS) * FERRY_SIZEOF_CELL)

/* A CPU session's arena (ferry_session_arena_size()) from the figures a
 * model header gives: `portable` bytes of state, activations and scratch
 * (the same on every target), `lone_cells` cells with a lone step (0: none),
 * and `program_ops` ops of the streaming program (0: no program). */
#define FERRY_ARENA_BYTES_CPU(portable, lone_cells, program_ops)                                   \
  (FERRY_SIZEOF_SESSION_HEAD + FERRY_ROUND_UP_64(FERRY_SIZEOF_CPU_CONTROL) + (portable) +         \
   FERRY_ROUND_UP_64((lone_cells) * FERRY_SIZEOF_LONE_STEP) +                                      \
   ((program_ops) ? FERRY_ROUND_UP_64(FERRY_SIZEOF_STEP_PROGRAM + (program_ops) * FERRY_SIZEOF_STEP_OP) : 0u))

#endif /* FERRY_FERRY_SIZES_H_ */
