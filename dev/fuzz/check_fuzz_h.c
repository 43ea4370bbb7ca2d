// check_fuzz_h: fuzz.h's own bookkeeping, checked where the harnesses rely on it.
// Not a fuzzer: one fixed run. Once fatal() jumps back, fz_after_fatal frees the
// blocks the parser left, and only those: a block another thread allocated while
// the parser ran (libFuzzer's watchdog threads do) stays its owner's to free. A
// harness that freed it would make that thread's own free() a double free, which
// AddressSanitizer reports in that thread (CI saw this once in fuzz_datafile).
//   make dev/fuzz/bin/check_fuzz_h && dev/fuzz/bin/check_fuzz_h -runs=1
#include "fuzz.h"
#include <pthread.h>

static pthread_barrier_t step;   // the two threads' steps, in order
static void *other_block;

static void *other_thread(void *arg) {
    (void)arg;
    pthread_barrier_wait(&step);  // 1: the parser runs, tracked
    other_block = malloc(32);
    pthread_barrier_wait(&step);  // 2: allocated; the parser calls fatal()
    pthread_barrier_wait(&step);  // 3: the harness has cleaned up
    free(other_block);            // a double free if the harness freed it
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)data; (void)size;
    pthread_t t;
    pthread_barrier_init(&step, NULL, 2);
    if (pthread_create(&t, NULL, other_thread, NULL)) fz_die_("check_fuzz_h: pthread_create failed\n");
    fz_begin();
    if (setjmp(fz_jmp)) {
        fz_after_fatal("check.bin");
        // the parser's block is freed (LeakSanitizer would report it otherwise);
        // the other thread's block is not (its free below would be reported)
        pthread_barrier_wait(&step);
        pthread_join(t, NULL);
        pthread_barrier_destroy(&step);
        return 0;
    }
    char *volatile parser_block = (char *)malloc(64);  // left for fz_after_fatal to free
    parser_block[0] = 1;
    pthread_barrier_wait(&step);
    pthread_barrier_wait(&step);
    fatal("check.bin: rejected on purpose");
    return 0;
}
