/*
 * handle.c — slot + generation handles: how a request is named on the wire
 * (see proto.h). A rendezvous send is named in its RTS and the RTR that
 * answers it; a rendezvous receive in the RTR's immediate; either in an
 * ABORT. Whoever ends the handle's use takes it (proto_handle_take), which
 * bumps the slot's generation: a second, late or forged packet naming the
 * same handle then finds nothing and is dropped.
 *
 * Invariants (all under `lock`):
 *  H1 req[s] != NULL  <=>  s is not in the free ring.
 *  H2 gen[s] changes exactly when req[s] goes back to NULL, so a handle
 *     (gen, s) names req[s] only from make to take.
 *  H3 The free ring is first-in, first-out: a slot freed now is reused only
 *     after every slot freed before it, so a slot's generation moves at
 *     most once per HANDLE_SLOTS handles of the whole process.
 *  H4 Handle value 0 is never made (generations start at 1).
 *  H5 The live list (first/next/prev, NIL-terminated) holds exactly the
 *     slots with req[s] != NULL, in the order they were made, so a walk
 *     over live requests costs what is live, not HANDLE_SLOTS.
 *  H6 Until head first wraps, the ring's entry at head is head itself and
 *     was never written: the ring starts as 0, 1, 2, ... and a slot freed
 *     during the first lap goes to position (head + len) mod HANDLE_SLOTS,
 *     which is the count of slots freed before it, below head (no more
 *     slots are freed than made). So the ring is not filled at init: make
 *     takes head itself until `wrapped`, and from then on every position
 *     it reads was written by a free.
 * The table costs memory in proportion to the slots ever used: its pages,
 * the ring's included (H6), are committed when first touched, not at
 * init, so a process that makes few rendezvous handles commits little.
 */
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "util/spinlock.h"

#define SLOT_MASK (HANDLE_SLOTS - 1)
#define IMM_GEN_MASK ((1u << HANDLE_IMM_GEN_BITS) - 1)

static struct {
    util_spinlock lock;
    struct mpiv_request **req;
    uint64_t *gen;      /* 44 significant bits: (gen << 20 | slot) fits 64 */
    uint32_t *ring;     /* free slots, FIFO (H3)                           */
    uint32_t head, len; /* next free slot at ring[head], len of them       */
    bool wrapped;       /* head has wrapped once (H6)                      */
    uint32_t *next, *prev; /* live list links (H5), NIL at either end      */
    uint32_t first, last;
} handles;

#define NIL UINT32_MAX
/* req, gen, ring, next and prev, one after the other */
#define TABLE_BYTES ((size_t)HANDLE_SLOTS * (sizeof(void *) + sizeof(uint64_t) + 3 * sizeof(uint32_t)))

int proto_handle_init(void)
{
    util_spin_init(&handles.lock);
    /* All five arrays in one mapping of their own, not from the heap: a
     * table made after another was freed would get the heap's recycled
     * memory, which calloc zeroes by writing it, so the new table would
     * commit what H6 leaves untouched. A fresh mapping reads zero and
     * commits a page at its first write. (4 KiB pages: the arrays are
     * written sparsely, one slot per live request.) */
    unsigned char *m = util_map_dense(TABLE_BYTES, TABLE_BYTES);
    if (!m)
        return util_err(MPIV_ERR_NO_RESOURCES, "cannot map the handle table");
    handles.req = (struct mpiv_request **)m;
    handles.gen = (uint64_t *)(m + HANDLE_SLOTS * sizeof *handles.req);
    handles.ring = (uint32_t *)((unsigned char *)handles.gen + HANDLE_SLOTS * sizeof *handles.gen);
    handles.next = handles.ring + HANDLE_SLOTS;
    handles.prev = handles.next + HANDLE_SLOTS;
    handles.head = 0; /* the ring reads 0, 1, 2, ... until head wraps (H6) */
    handles.wrapped = false;
    handles.len = HANDLE_SLOTS;
    handles.first = handles.last = NIL;
    return MPIV_SUCCESS;
}

void proto_handle_fini(void)
{
    util_unmap_dense(handles.req, TABLE_BYTES);
    memset(&handles, 0, sizeof handles);
}

static uint64_t handle_of(uint32_t s) { return ((handles.gen[s] + 1) << HANDLE_SLOT_BITS) | s; }

uint64_t proto_handle_make(struct mpiv_request *r)
{
    util_spin_lock(&handles.lock);
    if (handles.len == 0) {
        util_spin_unlock(&handles.lock);
        return 0;
    }
    uint32_t s = handles.wrapped ? handles.ring[handles.head] : handles.head; /* H6 */
    handles.head = (handles.head + 1) & SLOT_MASK;
    if (handles.head == 0)
        handles.wrapped = true;
    handles.len--;
    handles.req[s] = r;
    handles.next[s] = NIL; /* H5: append */
    handles.prev[s] = handles.last;
    if (handles.last == NIL)
        handles.first = s;
    else
        handles.next[handles.last] = s;
    handles.last = s;
    uint64_t h = handle_of(s); /* H4: gen + 1 >= 1 */
    r->handle = h;
    util_spin_unlock(&handles.lock);
    return h;
}

/* The slot h names if its generation matches; lock held. */
static int slot_of(uint64_t h)
{
    uint32_t s = (uint32_t)(h & SLOT_MASK);
    if (h == 0 || !handles.req || !handles.req[s] || handle_of(s) != h)
        return -1;
    return (int)s;
}

static void slot_free(uint32_t s)
{
    uint32_t n = handles.next[s], p = handles.prev[s]; /* H5: unlink */
    if (p == NIL)
        handles.first = n;
    else
        handles.next[p] = n;
    if (n == NIL)
        handles.last = p;
    else
        handles.prev[n] = p;
    handles.req[s] = NULL;
    handles.gen[s]++; /* H2 */
    handles.ring[(handles.head + handles.len) & SLOT_MASK] = s;
    handles.len++;
}

struct mpiv_request *proto_handle_peek(uint64_t h)
{
    util_spin_lock(&handles.lock);
    int s = slot_of(h);
    struct mpiv_request *r = s >= 0 ? handles.req[s] : NULL;
    util_spin_unlock(&handles.lock);
    return r;
}

struct mpiv_request *proto_handle_take(uint64_t h)
{
    util_spin_lock(&handles.lock);
    int s = slot_of(h);
    struct mpiv_request *r = NULL;
    if (s >= 0) {
        r = handles.req[s];
        slot_free((uint32_t)s);
    }
    util_spin_unlock(&handles.lock);
    return r;
}

uint32_t proto_handle_imm(uint64_t h)
{
    uint32_t s = (uint32_t)(h & SLOT_MASK);
    uint32_t g = (uint32_t)(h >> HANDLE_SLOT_BITS) & IMM_GEN_MASK;
    return (g << HANDLE_SLOT_BITS) | s;
}

uint64_t proto_handle_from_imm(uint32_t imm)
{
    uint32_t s = imm & SLOT_MASK;
    uint32_t g = imm >> HANDLE_SLOT_BITS;
    util_spin_lock(&handles.lock);
    uint64_t h = 0;
    if (handles.req && handles.req[s] && (((handles.gen[s] + 1) & IMM_GEN_MASK) == g))
        h = handle_of(s);
    util_spin_unlock(&handles.lock);
    return h;
}

void proto_handle_take_if(bool (*pred)(struct mpiv_request *r, void *arg), void *arg,
                          void (*fn)(struct mpiv_request *r, void *arg))
{
    enum { BATCH = 64 };
    struct mpiv_request *batch[BATCH];
    /* fn runs outside the lock (it completes requests, which may send), so
     * the live list is walked in batches. Between batches the cursor slot
     * may be taken (and even made again); its handle, kept with it, says
     * whether it still names the same live request (H2: taking it changed
     * its generation). If not, the walk starts over from the front: every
     * slot already freed by this walk is gone from the list, and the ones
     * left in front fail pred again, cheaply. cur_h 0 (never a handle, H4)
     * means the walk has not begun. */
    uint32_t cur = NIL;
    uint64_t cur_h = 0;
    for (;;) {
        int n = 0;
        util_spin_lock(&handles.lock);
        if (!handles.req) {
            util_spin_unlock(&handles.lock);
            return;
        }
        if (cur_h == 0 || handle_of(cur) != cur_h)
            cur = handles.first;
        while (cur != NIL && n < BATCH) {
            uint32_t s = cur;
            cur = handles.next[s];
            struct mpiv_request *r = handles.req[s];
            if (pred(r, arg)) {
                batch[n++] = r;
                slot_free(s);
            }
        }
        cur_h = cur != NIL ? handle_of(cur) : 0;
        util_spin_unlock(&handles.lock);
        for (int i = 0; i < n; i++)
            fn(batch[i], arg);
        if (cur == NIL)
            return;
    }
}
