/*
 * Minimal Cortex-M startup for the example firmware: the vector table, a
 * reset handler that copies .data, zeroes .bss, enables the FPU (where the
 * core has one, __ARM_FP: not on a Cortex-M3 or a soft-float build) and calls
 * main, and the few system calls newlib (nosys) needs. No heap: _sbrk
 * fails, so malloc returns NULL. ferry needs no heap: the model handle, the
 * arena and the model bytes all live in memory the firmware gives it.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

extern uint32_t __data_load, __data_start, __data_end, __bss_start, __bss_end, __stack_top;
extern void (*__preinit_array_start[])(void), (*__preinit_array_end[])(void);
extern void (*__init_array_start[])(void), (*__init_array_end[])(void);
int main(void);
void firmware_exit(int status);

void Reset_Handler(void) {
  for (uint32_t *src = &__data_load, *dst = &__data_start; dst < &__data_end;) *dst++ = *src++;
  for (uint32_t* dst = &__bss_start; dst < &__bss_end;) *dst++ = 0;
#if defined(__ARM_FP)
  /* CPACR: full access to CP10/CP11 (the FPU), before any float code. */
  *(volatile uint32_t*)0xE000ED88u |= 0xFu << 20;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
  for (void (**f)(void) = __preinit_array_start; f < __preinit_array_end; ++f) (*f)();
  for (void (**f)(void) = __init_array_start; f < __init_array_end; ++f) (*f)();
  firmware_exit(main());
}

static void Default_Handler(void) {
  for (;;) __asm__ volatile("bkpt #0");
}
void NMI_Handler(void) __attribute__((weak, alias("Default_Handler")));
void HardFault_Handler(void) __attribute__((weak, alias("Default_Handler")));
void MemManage_Handler(void) __attribute__((weak, alias("Default_Handler")));
void BusFault_Handler(void) __attribute__((weak, alias("Default_Handler")));
void UsageFault_Handler(void) __attribute__((weak, alias("Default_Handler")));
void SysTick_Handler(void) __attribute__((weak, alias("Default_Handler")));

/* The 16 system vectors (no device interrupts are enabled). Slots 7-14
 * (SecureFault on Armv8-M, SVCall, DebugMonitor, PendSV) stay empty: the
 * firmware raises none of them. main.c times ferry_step with SysTick. */
__attribute__((section(".isr_vector"), used)) void* const g_vectors[16] = {
    &__stack_top,       (void*)Reset_Handler,     (void*)NMI_Handler,  (void*)HardFault_Handler,
    (void*)MemManage_Handler, (void*)BusFault_Handler, (void*)UsageFault_Handler,
    [15] = (void*)SysTick_Handler,
};

/* newlib system calls (nosys would warn on each). */
void* _sbrk(ptrdiff_t increment) {
  (void)increment;
  errno = ENOMEM;
  return (void*)-1;
}
