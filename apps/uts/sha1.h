/*
 * sha1.h — SHA-1 (FIPS 180-4) for the UTS random stream.
 *
 * UTS only ever hashes 20 or 24 bytes, so this is a one-block SHA-1: messages
 * of up to 55 bytes, one compression each, no streaming context.
 */
#ifndef UTS_SHA1_H
#define UTS_SHA1_H

#include <stddef.h>
#include <stdint.h>

#define SHA1_SMALL_MAX 55

/* digest = SHA-1(msg[0 .. len)), len <= SHA1_SMALL_MAX. */
void sha1_small(const uint8_t *msg, size_t len, uint8_t digest[20]);

/* 0 if the implementation reproduces the FIPS 180 example digests. */
int sha1_selftest(void);

#endif /* UTS_SHA1_H */
