/*
 * req.c — where the non-blocking calls' requests come from: a small free
 * list per pthread in front of malloc.
 *
 * Why: a window of non-blocking calls (64 isends, then a waitall) takes and
 * returns 64 requests of one size. glibc keeps 7 chunks of a size in its
 * per-thread cache and serves only chunks of up to 128 bytes from its fast
 * bins; a request is larger, so the rest of a window went through its
 * bins (docs/perf/pt2pt.md has what that cost).
 *
 * Invariants:
 *  C1  A cached request is owned by exactly one pthread's list: it is
 *      pushed by the pthread that frees it and popped only by that same
 *      pthread. No list is ever touched by another pthread, so none needs
 *      a lock or an atomic; the hand-over of a request between pthreads
 *      (taken on one, completed and freed on another) is ordered by the
 *      request's own state word, as it was with malloc and free.
 *  C2  A list holds at most REQ_CACHE_MAX requests; past that a freed
 *      request goes back to malloc's free.
 *  C3  Each call reads the thread-local list once and does not yield in
 *      between: a ULT that migrates to another worker between two calls
 *      uses that worker's list on the second, which C1 allows (the request
 *      merely changes lists). Both functions are kept out of line so that
 *      no caller's code can reuse one pthread's thread-local address after
 *      a context switch.
 *  C4  A pthread's list is emptied into free() when that pthread exits
 *      (a pthread key's destructor) and when it calls mpiv_finalize, so a
 *      program that starts and ends many pthreads does not leak.
 */
#include <pthread.h>
#include <stdlib.h>

#include "proto.h"

enum { REQ_CACHE_MAX = 256 };

struct req_free {
    struct req_free *next;
};

struct req_cache {
    struct req_free *head;
    int n;
    bool keyed; /* this pthread's destructor is registered (C4) */
};

static _Thread_local struct req_cache req_cache __attribute__((tls_model("initial-exec")));
static pthread_key_t req_key;
static pthread_once_t req_key_once = PTHREAD_ONCE_INIT;
static bool req_key_ok;

static void req_cache_drain(struct req_cache *c)
{
    while (c->head) {
        struct req_free *f = c->head;
        c->head = f->next;
        free(f);
    }
    c->n = 0;
}

static void req_thread_exit(void *arg)
{
    struct req_cache *c = arg;
    req_cache_drain(c);
    c->keyed = false; /* a later free on this pthread registers again */
}

static void req_key_make(void)
{
    req_key_ok = pthread_key_create(&req_key, req_thread_exit) == 0;
}

__attribute__((noinline)) struct mpiv_request *proto_req_new(void)
{
    struct req_cache *c = &req_cache;
    struct req_free *f = c->head;
    if (f) {
        c->head = f->next;
        c->n--;
        return (struct mpiv_request *)f;
    }
    return malloc(sizeof(struct mpiv_request));
}

static inline void cache_put(struct req_cache *c, struct mpiv_request *r)
{
    if (c->n >= REQ_CACHE_MAX) {
        free(r);
        return;
    }
    if (util_unlikely(!c->keyed)) {
        /* once per pthread: without a destructor its list would leak when
         * it exits (C4); if none can be had, do without the cache */
        pthread_once(&req_key_once, req_key_make);
        if (!req_key_ok || pthread_setspecific(req_key, c) != 0) {
            free(r);
            return;
        }
        c->keyed = true;
    }
    struct req_free *f = (struct req_free *)r;
    f->next = c->head;
    c->head = f;
    c->n++;
}

__attribute__((noinline)) void proto_req_delete(struct mpiv_request *r)
{
    if (r)
        cache_put(&req_cache, r);
}

/* One read of the thread-local list for the whole array (C3). */
__attribute__((noinline)) void proto_req_delete_n(struct mpiv_request **rs, int n)
{
    struct req_cache *c = &req_cache;
    for (int i = 0; i < n; i++) {
        if (rs[i])
            cache_put(c, rs[i]);
        rs[i] = NULL;
    }
}

void proto_req_cache_flush(void)
{
    req_cache_drain(&req_cache);
}
