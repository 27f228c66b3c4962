/*
 * sync.c — the ULT synchronisation objects of mpiv.h: counter (a latch),
 * mutex (FIFO hand-off) and barrier (reusable). Each works between ULTs on
 * any workers and plain pthreads alike, because every waiter blocks on its
 * own sched_sync (switching to its scheduler, or sleeping on a futex).
 *
 * Each object is a util_spinlock guarding a few fields and a list of
 * waiter nodes that live on the waiters' stacks. The lock is held for a
 * handful of instructions and never across a wait or a signal.
 *
 * Invariants (lock held to read or write any of them):
 *   counter: value >= 0; waiters is non-empty only while value > 0.
 *            (value is also read without the lock by mpiv_counter_get.)
 *   mutex:   locked == 0 implies an empty queue and owner == 0; the queue
 *            is FIFO; unlock hands the mutex to the head directly (owner
 *            set before it is woken), so nobody can barge in between.
 *   barrier: 0 <= arrived < count; the waiters list holds `arrived` nodes.
 * A node is only read by the thread that detached it, and its `next` is
 * read before its sync is signalled: once signalled, the node (on the
 * waiter's stack) may be gone, and so may the object itself.
 */
#include <stddef.h>
#include <string.h>

#include "sched/sched_internal.h"

#define SYNC_MAGIC_COUNTER 0x436f6e74u
#define SYNC_MAGIC_MUTEX 0x4d757478u
#define SYNC_MAGIC_BARRIER 0x42617272u

struct sync_node {
    struct sync_node *next;
    uintptr_t who;
    sched_sync sync;
};

struct sync_counter {
    util_spinlock lock;
    uint32_t magic;
    _Atomic int64_t value;
    struct sync_node *waiters;
};

struct sync_mutex {
    util_spinlock lock;
    uint32_t magic;
    int locked;
    uintptr_t owner;
    struct sync_node *head, *tail;
};

struct sync_barrier {
    util_spinlock lock;
    uint32_t magic;
    int count, arrived;
    struct sync_node *waiters;
};

_Static_assert(sizeof(struct sync_counter) <= sizeof(mpiv_counter_t), "counter too big");
_Static_assert(sizeof(struct sync_mutex) <= sizeof(mpiv_mutex_t), "mutex too big");
_Static_assert(sizeof(struct sync_barrier) <= sizeof(mpiv_barrier_t), "barrier too big");

/* Who is calling: the ULT record, or for a pthread the address of a
 * thread-local byte (unique while the thread lives), tagged with bit 0. */
static uintptr_t sync_self(void)
{
    static _Thread_local char anchor;
    struct mpiv_ult *u = sched_self();
    return u ? (uintptr_t)u : ((uintptr_t)&anchor | 1);
}

static void wake_list(struct sync_node *n)
{
    while (n) {
        struct sync_node *next = n->next;
        sched_signal_inline(&n->sync);
        n = next;
    }
}

#define CHECK_READY(what)                                                       \
    do {                                                                        \
        if (!sched_ready())                                                     \
            return util_err(MPIV_ERR_STATE, what " before mpiv_init");          \
    } while (0)

/* --- counter --------------------------------------------------------------- */

static struct sync_counter *as_counter(mpiv_counter_t *c)
{
    struct sync_counter *k = (struct sync_counter *)c;
    return k && k->magic == SYNC_MAGIC_COUNTER ? k : NULL;
}

int mpiv_counter_init(mpiv_counter_t *c, int64_t value)
{
    CHECK_READY("mpiv_counter_init");
    if (!c || value < 0)
        return util_err(MPIV_ERR_ARG, "mpiv_counter_init: %s", c ? "negative value" : "NULL");
    struct sync_counter *k = (struct sync_counter *)c;
    memset(c, 0, sizeof *c);
    util_spin_init(&k->lock);
    atomic_init(&k->value, value);
    k->magic = SYNC_MAGIC_COUNTER;
    return MPIV_SUCCESS;
}

int mpiv_counter_add(mpiv_counter_t *c, int64_t delta)
{
    CHECK_READY("mpiv_counter_add");
    struct sync_counter *k = as_counter(c);
    if (!k)
        return util_err(MPIV_ERR_ARG, "mpiv_counter_add: not an initialised counter");
    util_spin_lock(&k->lock);
    /* relaxed: the lock orders every writer */
    int64_t v = atomic_load_explicit(&k->value, memory_order_relaxed);
    if (delta < -v || (delta > 0 && v > INT64_MAX - delta)) {
        util_spin_unlock(&k->lock);
        return util_err(MPIV_ERR_ARG, "mpiv_counter_add(%lld) on value %lld: out of range",
                        (long long)delta, (long long)v);
    }
    v += delta;
    /* release: mpiv_counter_get's acquire load sees what came before */
    atomic_store_explicit(&k->value, v, memory_order_release);
    struct sync_node *wake = NULL;
    if (v == 0) {
        wake = k->waiters;
        k->waiters = NULL;
    }
    util_spin_unlock(&k->lock);
    wake_list(wake);
    return MPIV_SUCCESS;
}

int64_t mpiv_counter_get(mpiv_counter_t *c)
{
    struct sync_counter *k = as_counter(c);
    /* acquire: pairs with counter_add's release store */
    return k ? atomic_load_explicit(&k->value, memory_order_acquire) : 0;
}

int mpiv_counter_wait(mpiv_counter_t *c)
{
    CHECK_READY("mpiv_counter_wait");
    struct sync_counter *k = as_counter(c);
    if (!k)
        return util_err(MPIV_ERR_ARG, "mpiv_counter_wait: not an initialised counter");
    /* acquire: a zero seen here is one counter_add published */
    if (atomic_load_explicit(&k->value, memory_order_acquire) == 0)
        return MPIV_SUCCESS;
    struct sync_node n = {.next = NULL};
    sched_sync_init(&n.sync);
    util_spin_lock(&k->lock);
    /* relaxed: under the lock */
    if (atomic_load_explicit(&k->value, memory_order_relaxed) == 0) {
        util_spin_unlock(&k->lock);
        return MPIV_SUCCESS;
    }
    n.next = k->waiters;
    k->waiters = &n;
    util_spin_unlock(&k->lock);
    sched_wait_inline(&n.sync);
    return MPIV_SUCCESS;
}

int mpiv_counter_destroy(mpiv_counter_t *c)
{
    CHECK_READY("mpiv_counter_destroy");
    struct sync_counter *k = as_counter(c);
    if (!k)
        return util_err(MPIV_ERR_ARG, "mpiv_counter_destroy: not an initialised counter");
    util_spin_lock(&k->lock);
    bool busy = k->waiters != NULL;
    util_spin_unlock(&k->lock);
    if (busy)
        return util_err(MPIV_ERR_STATE, "mpiv_counter_destroy: the counter has waiters");
    k->magic = 0;
    return MPIV_SUCCESS;
}

/* --- mutex ----------------------------------------------------------------- */

static struct sync_mutex *as_mutex(mpiv_mutex_t *m)
{
    struct sync_mutex *x = (struct sync_mutex *)m;
    return x && x->magic == SYNC_MAGIC_MUTEX ? x : NULL;
}

int mpiv_mutex_init(mpiv_mutex_t *m)
{
    CHECK_READY("mpiv_mutex_init");
    if (!m)
        return util_err(MPIV_ERR_ARG, "mpiv_mutex_init: NULL");
    memset(m, 0, sizeof *m);
    struct sync_mutex *x = (struct sync_mutex *)m;
    util_spin_init(&x->lock);
    x->magic = SYNC_MAGIC_MUTEX;
    return MPIV_SUCCESS;
}

static int mutex_take(mpiv_mutex_t *m, bool block, int *acquired)
{
    struct sync_mutex *x = as_mutex(m);
    if (!x)
        return util_err(MPIV_ERR_ARG, "not an initialised mutex");
    uintptr_t me = sync_self();
    util_spin_lock(&x->lock);
    if (!x->locked) {
        x->locked = 1;
        x->owner = me;
        util_spin_unlock(&x->lock);
        if (acquired)
            *acquired = 1;
        return MPIV_SUCCESS;
    }
    if (x->owner == me) {
        util_spin_unlock(&x->lock);
        if (acquired)
            *acquired = 0;
        return block ? util_err(MPIV_ERR_DEADLOCK, "mpiv_mutex_lock: the caller holds it")
                     : MPIV_SUCCESS;
    }
    if (!block) {
        util_spin_unlock(&x->lock);
        *acquired = 0;
        return MPIV_SUCCESS;
    }
    struct sync_node n = {.next = NULL, .who = me};
    sched_sync_init(&n.sync);
    if (x->tail)
        x->tail->next = &n;
    else
        x->head = &n;
    x->tail = &n;
    util_spin_unlock(&x->lock);
    sched_wait_inline(&n.sync); /* unlock made us the owner */
    return MPIV_SUCCESS;
}

int mpiv_mutex_lock(mpiv_mutex_t *m)
{
    CHECK_READY("mpiv_mutex_lock");
    return mutex_take(m, true, NULL);
}

int mpiv_mutex_trylock(mpiv_mutex_t *m, int *acquired)
{
    CHECK_READY("mpiv_mutex_trylock");
    if (!acquired)
        return util_err(MPIV_ERR_ARG, "mpiv_mutex_trylock: acquired is NULL");
    return mutex_take(m, false, acquired);
}

int mpiv_mutex_unlock(mpiv_mutex_t *m)
{
    CHECK_READY("mpiv_mutex_unlock");
    struct sync_mutex *x = as_mutex(m);
    if (!x)
        return util_err(MPIV_ERR_ARG, "mpiv_mutex_unlock: not an initialised mutex");
    uintptr_t me = sync_self();
    util_spin_lock(&x->lock);
    if (!x->locked || x->owner != me) {
        util_spin_unlock(&x->lock);
        return util_err(MPIV_ERR_STATE, "mpiv_mutex_unlock: the caller does not hold it");
    }
    struct sync_node *n = x->head;
    if (n) {
        x->head = n->next;
        if (!x->head)
            x->tail = NULL;
        x->owner = n->who;
    } else {
        x->locked = 0;
        x->owner = 0;
    }
    util_spin_unlock(&x->lock);
    if (n)
        sched_signal_inline(&n->sync);
    return MPIV_SUCCESS;
}

int mpiv_mutex_destroy(mpiv_mutex_t *m)
{
    CHECK_READY("mpiv_mutex_destroy");
    struct sync_mutex *x = as_mutex(m);
    if (!x)
        return util_err(MPIV_ERR_ARG, "mpiv_mutex_destroy: not an initialised mutex");
    util_spin_lock(&x->lock);
    bool busy = x->locked;
    util_spin_unlock(&x->lock);
    if (busy)
        return util_err(MPIV_ERR_STATE, "mpiv_mutex_destroy: the mutex is locked");
    x->magic = 0;
    return MPIV_SUCCESS;
}

/* --- barrier --------------------------------------------------------------- */

static struct sync_barrier *as_barrier(mpiv_barrier_t *b)
{
    struct sync_barrier *x = (struct sync_barrier *)b;
    return x && x->magic == SYNC_MAGIC_BARRIER ? x : NULL;
}

int mpiv_barrier_init(mpiv_barrier_t *b, int count)
{
    CHECK_READY("mpiv_barrier_init");
    if (!b || count < 1)
        return util_err(MPIV_ERR_ARG, "mpiv_barrier_init: %s", b ? "count < 1" : "NULL");
    memset(b, 0, sizeof *b);
    struct sync_barrier *x = (struct sync_barrier *)b;
    util_spin_init(&x->lock);
    x->count = count;
    x->magic = SYNC_MAGIC_BARRIER;
    return MPIV_SUCCESS;
}

int mpiv_barrier_wait(mpiv_barrier_t *b)
{
    CHECK_READY("mpiv_barrier_wait");
    struct sync_barrier *x = as_barrier(b);
    if (!x)
        return util_err(MPIV_ERR_ARG, "mpiv_barrier_wait: not an initialised barrier");
    struct sync_node n = {.next = NULL};
    sched_sync_init(&n.sync);
    util_spin_lock(&x->lock);
    if (x->arrived + 1 == x->count) {
        struct sync_node *wake = x->waiters;
        x->waiters = NULL;
        x->arrived = 0;
        util_spin_unlock(&x->lock);
        wake_list(wake);
        return MPIV_SUCCESS;
    }
    x->arrived++;
    n.next = x->waiters;
    x->waiters = &n;
    util_spin_unlock(&x->lock);
    sched_wait_inline(&n.sync);
    return MPIV_SUCCESS;
}

int mpiv_barrier_destroy(mpiv_barrier_t *b)
{
    CHECK_READY("mpiv_barrier_destroy");
    struct sync_barrier *x = as_barrier(b);
    if (!x)
        return util_err(MPIV_ERR_ARG, "mpiv_barrier_destroy: not an initialised barrier");
    util_spin_lock(&x->lock);
    bool busy = x->arrived != 0;
    util_spin_unlock(&x->lock);
    if (busy)
        return util_err(MPIV_ERR_STATE, "mpiv_barrier_destroy: threads are waiting in it");
    x->magic = 0;
    return MPIV_SUCCESS;
}
