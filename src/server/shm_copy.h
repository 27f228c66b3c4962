/*
 * shm_copy.h — which of two ways a sender copies a long payload into its
 * ring at a peer (shm.c, rec_copy), chosen per ring from how far the
 * peer's core is.
 *
 * The two ways, both `rep movsb`: one string copy of the whole payload
 * (WHOLE), or one per SHM_COPY_PIECE bytes (PIECES). Why both: from some
 * length on (2112 bytes on the AMD EPYC it was measured on) a string copy
 * stores whole lines without reading them first and without keeping them
 * in the writer's caches. Where the reader's core is far, that is the
 * fast way: a ring's lines were last read there, and plain stores wait
 * for each line to come back first. Where the two cores share a cache it
 * is the slow way, about half the bandwidth: the reader then fetches from
 * further out what the shared cache would have held. Which of the two a
 * pair of cores is can change while a job runs (a VM's vCPUs move
 * between host cores; docs/perf/pt2pt.md, "Two phases of this machine").
 *
 * What tells them apart is the time a line takes to come from the peer's
 * core: about 50 ns where PIECES was the faster way, about 165 ns where
 * WHOLE was, with nothing measured in between. The sender times its reads
 * of the ring's head (a line the receiver writes) when it reads it anyway.
 * (The time of the copy itself does not tell: plain stores wait for their
 * lines in the store buffer after the copy's last instruction, and timed
 * with a fence, the two ways looked alike where one was 1.5x faster.)
 *
 * The rule, per ring (under the ring's send lock):
 *  C1 WHOLE until the first sample: what a string copy does by itself,
 *     and the way glibc's memcpy takes at these lengths.
 *  C2 A sample is a read of head that found a value other than the one
 *     read before: the receiver wrote the line since, so it came from the
 *     receiver's core, not from our own cache (head has a 128-byte pair
 *     of lines to itself, SHM_PAIR in shm.c, so that no prefetch of a
 *     neighbour brings it over first).
 *  C3 The latency is a running mean of the samples in ticks that moves a
 *     quarter of the way to each one, and a sample counts as at most 4x
 *     the mean: one read stretched by an interrupt moves it by under 2x,
 *     and the following samples bring it back.
 *  C4 The way is PIECES while the mean is below the threshold
 *     (SHM_COPY_NEAR_NS in ticks, found at start-up), else WHOLE; no
 *     threshold (no usable clock), WHOLE always.
 *  C5 MPIV_SHM_COPY=whole|pieces fixes the way: samples change nothing.
 *  C6 A copy of more than SHM_COPY_PIECES_MAX is whole in auto, whatever
 *     the samples say: past it, whole was the faster way even where the
 *     cores share a cache (windows of 32 and 64 KiB messages; 16 KiB was
 *     still faster in pieces: docs/perf/pt2pt.md has the figures).
 * The way changes only the speed: both copy the same bytes to the same
 * place, before the record's stamp is published (R3 in shm.c).
 */
#ifndef MPIV_SHM_COPY_H
#define MPIV_SHM_COPY_H

#include <stddef.h>
#include <stdint.h>

enum { SHM_COPY_WHOLE = 0, SHM_COPY_PIECES = 1 };

/* Bytes of one piece: below the length from which a string copy stops
 * reading the lines it stores (2112 where measured). Copies of at most
 * this many bytes are the same in both ways. */
#define SHM_COPY_PIECE ((size_t)2048)
/* The longest copy made in pieces by auto's choice (C6). */
#define SHM_COPY_PIECES_MAX ((size_t)16 << 10)
/* The line latency below which the peer counts as near (C4), between the
 * two measured. */
#define SHM_COPY_NEAR_NS 100u

struct shm_copy_choice {
    uint16_t lat;  /* running mean of the samples in ticks (C3); 0: none */
    uint16_t samples; /* samples taken, up to UINT16_MAX (for tests)     */
    uint8_t way;   /* SHM_COPY_WHOLE or SHM_COPY_PIECES                 */
    uint8_t fixed; /* 1: MPIV_SHM_COPY fixed `way` (C5)                 */
    uint8_t pad[2];
};

/* A choice that follows the samples (way < 0), or one fixed to `way`. */
static inline struct shm_copy_choice shm_copy_choice_init(int way)
{
    struct shm_copy_choice c = {0, 0, SHM_COPY_WHOLE, 0, {0, 0}};
    if (way >= 0) {
        c.way = (uint8_t)way;
        c.fixed = 1;
    }
    return c;
}

/* Whether a copy of n bytes (more than SHM_COPY_PIECE) is made in pieces
 * (C4, C5, C6). */
static inline int shm_copy_in_pieces(const struct shm_copy_choice *c, size_t n)
{
    return c->way == SHM_COPY_PIECES && (c->fixed || n <= SHM_COPY_PIECES_MAX);
}

/* One sample (C2) of `ticks`; near_ticks is SHM_COPY_NEAR_NS in ticks, or
 * 0 if unknown (C4). */
static inline void shm_copy_learn(struct shm_copy_choice *c, uint64_t ticks, uint32_t near_ticks)
{
    if (c->fixed || !near_ticks)
        return;
    uint64_t s = ticks, old = c->lat;
    if (old) {
        if (s > 4 * old)
            s = 4 * old;
        s = (3 * old + s + 2) / 4;
    }
    if (s < 1)
        s = 1;
    if (s > UINT16_MAX)
        s = UINT16_MAX;
    c->lat = (uint16_t)s;
    if (c->samples < UINT16_MAX)
        c->samples++;
    c->way = s < near_ticks ? SHM_COPY_PIECES : SHM_COPY_WHOLE;
}

#endif
