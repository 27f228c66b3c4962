/*
 * MPI_ERRORS_ARE_FATAL is the default: a send to a rank that does not
 * exist ends the job with the error's class and MPIv's detail, and the
 * call never returns.
 */
#include <stdio.h>

#include <mpi.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size, v = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Send(&v, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD);
    printf("MPI_Send returned: the error handler did not end the job\n");
    MPI_Finalize();
    return 0;
}
