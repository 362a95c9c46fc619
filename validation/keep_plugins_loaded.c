/* keep_plugins_loaded.c: linked into the trainer of the sanitizer build only
 * (TRAINER_SANITIZE), never into a release binary.
 *
 * Why: at exit, LeakSanitizer matches every leaked allocation's stack against
 * validation/lsan.supp, which looks up the library of each frame. OpenMPI unloads
 * its plugins (mca_*.so) in MPI_Finalize, so the frames of the allocations they made
 * at start-up (some 3,000 a process) belong to no library any more, and each lookup
 * of one re-reads /proc/self/maps. That took about 1 s of each sanitized trainer
 * process's exit on the test machine (2.9 s against 1.9 s for a 20-step MNIST run),
 * a large share of CI's sanitizer suite, which starts hundreds of them. A dlclose
 * that unloads nothing keeps the plugins mapped: the lookups find them, and the
 * reports name them. Every leak is still checked and reported as before.
 *
 * The executable's definition comes first in the dynamic linker's lookup order, so
 * the libraries' calls (OpenMPI's, and ASan's own interceptor) reach this one; the
 * link exports it (CMakeLists.txt, --export-dynamic-symbol). */
int dlclose(void *handle);

int dlclose(void *handle)
{
    (void)handle;
    return 0;
}
