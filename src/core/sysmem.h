/* sysmem.h: how much memory this process may still use, so a model that cannot fit
 * is refused with numbers before anything is allocated (not killed half-way). */
#ifndef TR_SYSMEM_H
#define TR_SYSMEM_H

#include <stddef.h>

/* MemAvailable of the node, or, where lower, the room left under a memory limit of
 * this process's cgroup (a batch job's: Slurm's --mem) or its address-space limit;
 * 0 when unknown. */
size_t tr_mem_available(void);
/* "1.5 GiB", "730.2 MiB": human-readable bytes into buf. */
const char *tr_bytes_str(char *buf, size_t len, double bytes);

#endif
