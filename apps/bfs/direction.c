/*
 * direction.c — the options of direction.h.
 */
#include <string.h>

#include "direction.h"

int bfs_dir_opt(struct opts *o, struct bfs_dir_config *c)
{
    if (opts_match(o, "--direction", 1)) {
        if (strcmp(o->val, "auto") == 0)
            c->dir = BFS_DIR_AUTO;
        else if (strcmp(o->val, "top-down") == 0)
            c->dir = BFS_DIR_TOP_DOWN;
        else if (strcmp(o->val, "bottom-up") == 0)
            c->dir = BFS_DIR_BOTTOM_UP;
        else
            opts_fail(o, "--direction %s: expected auto, top-down or bottom-up", o->val);
    } else if (opts_match(o, "--top-down-only", 0))
        c->dir = BFS_DIR_TOP_DOWN;
    else if (opts_match(o, "--alpha", 1))
        c->alpha = opts_f64(o, "--alpha", 1e-6, 1e12);
    else if (opts_match(o, "--beta", 1))
        c->beta = opts_f64(o, "--beta", 1e-6, 1e12);
    else
        return 0;
    return 1;
}
