/* A sum over every rank of a Slurm step, exchanged through PMIx (the wire-up MPI uses). */
#include <pmix.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    pmix_proc_t me, peer, wildcard;
    pmix_value_t value, *got = NULL, *size = NULL;
    long sum = 0;
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) { fprintf(stderr, "PMIx_Init failed\n"); return 1; }
    PMIX_PROC_CONSTRUCT(&wildcard);
    PMIX_LOAD_PROCID(&wildcard, me.nspace, PMIX_RANK_WILDCARD);
    if (PMIx_Get(&wildcard, PMIX_JOB_SIZE, NULL, 0, &size) != PMIX_SUCCESS) return 2;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_UINT32;
    value.data.uint32 = me.rank + 1;
    if (PMIx_Put(PMIX_GLOBAL, "gpucloud.value", &value) != PMIX_SUCCESS || PMIx_Commit() != PMIX_SUCCESS) return 3;
    pmix_info_t collect;
    int yes = 1;
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    if (PMIx_Fence(&wildcard, 1, &collect, 1) != PMIX_SUCCESS) return 4;
    for (uint32_t rank = 0; rank < size->data.uint32; rank++) {
        PMIX_LOAD_PROCID(&peer, me.nspace, rank);
        if (PMIx_Get(&peer, "gpucloud.value", NULL, 0, &got) != PMIX_SUCCESS) return 5;
        sum += got->data.uint32;
        PMIX_VALUE_RELEASE(got);
    }
    printf("rank %u of %u: sum %ld\n", me.rank, size->data.uint32, sum);
    PMIx_Finalize(NULL, 0);
    return 0;
}
