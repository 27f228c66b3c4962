/*
 * err.c — error codes, their names, and the per-thread detail message.
 */
#include <stdio.h>
#include <string.h>

#include "util.h"

static const char *const err_names[MPIV_ERR_LAST_] = {
    [MPIV_SUCCESS] = "success",
    [MPIV_ERR_NOT_IMPLEMENTED] = "not implemented yet",
    [MPIV_ERR_ARG] = "invalid argument",
    [MPIV_ERR_RANK] = "invalid rank",
    [MPIV_ERR_TAG] = "invalid tag",
    [MPIV_ERR_TRUNCATE] = "message truncated: larger than the receive buffer",
    [MPIV_ERR_NO_RESOURCES] = "out of resources",
    [MPIV_ERR_CONFIG] = "invalid configuration",
    [MPIV_ERR_STATE] = "invalid state for this call",
    [MPIV_ERR_NET] = "network error",
    [MPIV_ERR_PEER] = "peer rank is gone",
    [MPIV_ERR_BOOTSTRAP] = "bootstrap failed",
    [MPIV_ERR_DEADLOCK] = "call would deadlock",
    [MPIV_ERR_INTERNAL] = "internal error",
};

const char *mpiv_strerror(int err)
{
    if (err < 0 || err >= MPIV_ERR_LAST_ || !err_names[err])
        return "unknown error code";
    return err_names[err];
}

static _Thread_local char err_detail[512];

int util_err(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_detail, sizeof err_detail, fmt, ap);
    va_end(ap);
    util_log_debug("error %s: %s", mpiv_strerror(code), err_detail);
    return code;
}

void util_err_clear(void) { err_detail[0] = '\0'; }

const char *mpiv_error_detail(void) { return err_detail; }
