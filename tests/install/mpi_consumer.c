/* An MPI program, unmodified, on the installed MPI face: one rank alone,
 * or several under mpiv_run. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int provided, rank, size, sum = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("MPI rank %d of %d, sum of ranks %d\n", rank, size, sum);
    int ok = provided == MPI_THREAD_MULTIPLE && sum == size * (size - 1) / 2;
    return MPI_Finalize() == MPI_SUCCESS && ok ? 0 : 1;
}
