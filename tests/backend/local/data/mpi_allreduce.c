/* An MPI program: every rank contributes its rank + 1 to an MPI_Allreduce (a sum), then prints it. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, mine, sum = 0;
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) { fprintf(stderr, "MPI_Init failed\n"); return 1; }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mine = rank + 1;
    if (MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
        fprintf(stderr, "rank %d: MPI_Allreduce failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    printf("rank %d of %d: sum %d\n", rank, size, sum);
    MPI_Finalize();
    return 0;
}
