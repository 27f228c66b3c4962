/* check_main.c — main() for every Check test; see check_main.h. */
#include <stdio.h>
#include <stdlib.h>

#include "check_main.h"
#include "test_wait.h"

/* Check multiplies every timeout (CK_DEFAULT_TIMEOUT and tcase_set_timeout)
 * by CK_TIMEOUT_MULTIPLIER, read when a test case is created: setting it
 * before the suite is built scales them all. A multiplier given
 * explicitly is left alone. */
static void scale_check_timeouts(void)
{
    double scale = test_timeout_scale();
    if (scale == 1.0 || getenv("CK_TIMEOUT_MULTIPLIER"))
        return;
    char buf[32];
    snprintf(buf, sizeof buf, "%g", scale);
    setenv("CK_TIMEOUT_MULTIPLIER", buf, 1);
}

int main(int argc, char **argv)
{
    const struct check_main *m = &check_main_spec;
    scale_check_timeouts();
    if (m->init) {
        int rc = m->init(&argc, &argv);
        if (rc)
            return rc;
    }
    SRunner *sr = srunner_create(m->suite());
    if (m->fork != CK_FORK_GETENV)
        srunner_set_fork_status(sr, m->fork);
    srunner_run_all(sr, m->quiet && m->quiet() ? CK_SILENT : CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (m->fini)
        return m->fini(failed);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
