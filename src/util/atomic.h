/*
 * atomic.h — C11 atomics with the few helpers the hot paths share.
 * Every atomic operation in MPIv says in a comment why its ordering is
 * enough; these wrappers only shorten the spelling.
 */
#ifndef MPIV_UTIL_ATOMIC_H
#define MPIV_UTIL_ATOMIC_H

#include <stdatomic.h>
#include <stdint.h>

#define util_load_relaxed(p) atomic_load_explicit((p), memory_order_relaxed)
#define util_load_acquire(p) atomic_load_explicit((p), memory_order_acquire)
#define util_store_relaxed(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define util_store_release(p, v) atomic_store_explicit((p), (v), memory_order_release)

/* A pause for spin loops: tells the core we are spinning (saves power, frees
 * the sibling hyper-thread, avoids a memory-order pipeline flush on exit). */
static inline void util_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

#endif
