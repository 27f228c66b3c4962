/*
 * sha1.h — SHA-1 (FIPS 180-4) for the UTS random stream.
 *
 * UTS only ever hashes 20 or 24 bytes, so this is a one-block SHA-1: messages
 * of up to 55 bytes, one compression each, no streaming context.
 *
 * Two implementations of the compression: a portable one (fully unrolled
 * rounds, the message schedule in a rolling window of 16 words) and, on
 * x86-64 processors with the SHA extensions, one with the SHA-NI
 * instructions. sha1_small() uses the SHA-NI one when the processor has it
 * (checked once, at the first call) and the portable one otherwise.
 */
#ifndef UTS_SHA1_H
#define UTS_SHA1_H

#include <stddef.h>
#include <stdint.h>

#define SHA1_SMALL_MAX 55

/* digest = SHA-1(msg[0 .. len)), len <= SHA1_SMALL_MAX. */
void sha1_small(const uint8_t *msg, size_t len, uint8_t digest[20]);

/* The implementations themselves. sha1_small_shani() may only be called
 * when sha1_have_shani() is 1. */
void sha1_small_portable(const uint8_t *msg, size_t len, uint8_t digest[20]);
void sha1_small_shani(const uint8_t *msg, size_t len, uint8_t digest[20]);
/* 1 if this build has the SHA-NI path and the processor runs it. */
int sha1_have_shani(void);

/* Chooses what sha1_small() runs: "auto" (SHA-NI if there, else portable),
 * "portable" or "shani". -1 (and no change) for an unknown name or "shani"
 * on a processor without it. */
int sha1_use(const char *name);
/* "portable" or "shani": what sha1_small() runs now. */
const char *sha1_impl_name(void);

/* 0 if every available implementation reproduces the FIPS 180 example
 * digests (one-block messages of 0, 3, 24 and 55 bytes). */
int sha1_selftest(void);

#endif /* UTS_SHA1_H */
