/* Every rank greets its neighbour and prints the greeting it received. */
#include <mpiv.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rc = mpiv_init(&argc, &argv);
    if (rc) {
        fprintf(stderr, "mpiv_init: %s: %s\n", mpiv_strerror(rc), mpiv_error_detail());
        return 1;
    }
    int me = mpiv_rank(), n = mpiv_size();
    char out[64], in[64];
    snprintf(out, sizeof out, "hello from rank %d of %d", me, n);
    mpiv_request_t r;
    rc = mpiv_irecv(in, sizeof in, (me + n - 1) % n, 0, &r);
    if (!rc)
        rc = mpiv_send(out, strlen(out) + 1, (me + 1) % n, 0);
    mpiv_status_t st;
    if (!rc)
        rc = mpiv_wait(&r, &st);
    if (rc) {
        fprintf(stderr, "rank %d: %s: %s\n", me, mpiv_strerror(rc), mpiv_error_detail());
        return 1;
    }
    printf("rank %d got \"%s\" (%zu bytes from rank %d)\n", me, in, st.size, st.source);
    return mpiv_finalize() ? 1 : 0;
}
