/* A user's first program: one rank, started without a launcher. */
#include <mpiv.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rc = mpiv_init(&argc, &argv);
    if (rc) {
        fprintf(stderr, "mpiv_init: %s: %s\n", mpiv_strerror(rc), mpiv_error_detail());
        return 1;
    }
    printf("rank %d of %d\n", mpiv_rank(), mpiv_size());
    return mpiv_rank() == 0 && mpiv_size() == 1 && mpiv_finalize() == MPIV_SUCCESS ? 0 : 1;
}
