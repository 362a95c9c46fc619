/* sysmem.h: how much memory this process may still use, so a model that cannot fit
 * is refused with numbers before anything is allocated (not killed half-way). */
#ifndef TR_SYSMEM_H
#define TR_SYSMEM_H

#include <stddef.h>

/* MemAvailable of the node, or, where lower, the room left under a memory limit of
 * this process's cgroup (a batch job's: Slurm's --mem); 0 when unknown. What the
 * node's ranks share: RLIMIT_AS is each process's own (tr_address_space_limit). */
size_t tr_mem_available(void);
/* RLIMIT_AS (ulimit -v), the address space one process may map, counted in virtual
 * bytes, reserved or touched: 0 where unlimited. */
size_t tr_address_space_limit(void);
/* The address space a process maps now, VmSize of status (/proc/self/status): the
 * libraries, MPI's segments, thread stacks, malloc's arenas; 0 when unknown. */
size_t tr_mapped_bytes(const char *status);
/* The least room left under a memory limit of the cgroup that proc_cgroup
 * (/proc/self/cgroup) names, or of one above it (what a batch system such as Slurm
 * confines a job to), its file system found through mountinfo
 * (/proc/self/mountinfo): the limit less what the cgroup uses, the inactive file
 * cache, which the kernel reclaims first, not counted. cgroup v1's memory hierarchy
 * or v2. 0 where no limit is set or none can be read. */
size_t tr_cgroup_room(const char *proc_cgroup, const char *mountinfo);
/* "1.5 GiB", "730.2 MiB": human-readable bytes into buf. */
const char *tr_bytes_str(char *buf, size_t len, double bytes);

#endif
