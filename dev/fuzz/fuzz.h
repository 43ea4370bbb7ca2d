// fuzz.h: what the libFuzzer harnesses in dev/fuzz share (see dev/fuzz/README.md).
//
// The parsers end the program through fatal() on bad input. A fuzz build
// (-DSFT_FUZZ) makes fatal() longjmp back to the harness instead (base/util.h),
// so one process can run millions of inputs. What the parser had allocated before
// it gave up would then leak (a real program exits instead), so while a parser runs
// the harness records every live heap block through the sanitizer allocator's
// malloc/free hooks and frees the ones left over when fatal() jumps back. On the
// normal path nothing is freed for the parser: a block it forgets is reported by
// LeakSanitizer as a real leak.
//
//   fz_begin();
//   if (setjmp(fz_jmp)) { fz_after_fatal("name"); return 0; }   // the parser rejected the input
//   ... parse, check properties, free ...
//   fz_end();
#ifndef SFT_FUZZ_H
#define SFT_FUZZ_H

#ifndef SFT_FUZZ
#error "build the harnesses with -DSFT_FUZZ (make fuzz)"
#endif

#include <sanitizer/allocator_interface.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../base/util.h"

// ---- live heap blocks of the parser under test: open addressing, linear probing,
// deletion by backward shift. Fixed size: the hooks must not allocate.
#define FZ_SLOTS (1u << 18)
static uintptr_t fz_slot[FZ_SLOTS];   // block address, 0 = empty
static size_t fz_live;                // occupied slots
static uintptr_t fz_log[FZ_SLOTS];    // every block tracked this run, so that clearing need not scan the table
static size_t fz_log_n;               // entries in fz_log; FZ_SLOTS + 1 once it overflowed
// 1 while a parser runs, in the thread that runs it: libFuzzer's own threads (the
// RSS watchdog dumping an input) allocate too, and their blocks are not ours to free
static __thread int fz_tracking;
static jmp_buf fz_jmp;

static size_t fz_home_(uintptr_t p) { return (size_t)(((uint64_t)p * 0x9E3779B97F4A7C15ull) >> 46) & (FZ_SLOTS - 1); }

static void fz_die_(const char *msg) {
    ssize_t r = write(2, msg, strlen(msg));
    (void)r;
    abort();
}

static void fz_malloc_hook_(const volatile void *ptr, size_t size) {
    (void)size;
    if (!fz_tracking || !ptr) return;
    if (2 * (fz_live + 1) > FZ_SLOTS) fz_die_("fuzz.h: more live blocks than FZ_SLOTS / 2; lower -max_len or raise FZ_SLOTS\n");
    uintptr_t p = (uintptr_t)ptr;
    size_t h = fz_home_(p);
    while (fz_slot[h]) h = (h + 1) & (FZ_SLOTS - 1);
    fz_slot[h] = p;
    fz_live++;
    if (fz_log_n < FZ_SLOTS) fz_log[fz_log_n++] = p;
    else fz_log_n = FZ_SLOTS + 1;
}

// Removes p from the table; returns 0 if it was not there.
static int fz_remove_(uintptr_t p) {
    size_t i = fz_home_(p);
    while (fz_slot[i] && fz_slot[i] != p) i = (i + 1) & (FZ_SLOTS - 1);
    if (!fz_slot[i]) return 0;
    // backward shift: pull later entries of the probe run into the hole when their
    // home does not lie cyclically in (hole, j]
    for (size_t j = i;;) {
        j = (j + 1) & (FZ_SLOTS - 1);
        if (!fz_slot[j]) break;
        size_t k = fz_home_(fz_slot[j]);
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) { fz_slot[i] = fz_slot[j]; i = j; }
    }
    fz_slot[i] = 0;
    fz_live--;
    return 1;
}

static void fz_free_hook_(const volatile void *ptr) {
    if (fz_tracking && ptr) fz_remove_((uintptr_t)ptr);  // not found: allocated before tracking began
}

// Empties the table (tracking off), freeing the blocks still in it if free_blocks.
static void fz_clear_(int free_blocks) {
    fz_tracking = 0;
    sft_fatal_jump = NULL;
    if (fz_live && fz_log_n <= FZ_SLOTS) {
        for (size_t k = 0; k < fz_log_n; k++)  // a logged block may be gone or logged twice
            if (fz_remove_(fz_log[k]) && free_blocks) free((void *)fz_log[k]);
    } else if (fz_live) {
        for (size_t i = 0; i < FZ_SLOTS; i++)
            if (fz_slot[i]) {
                if (free_blocks) free((void *)fz_slot[i]);
                fz_slot[i] = 0;
            }
        fz_live = 0;
    }
    fz_log_n = 0;
}

// Starts tracking; the caller then does `if (setjmp(fz_jmp)) ...`.
static void fz_begin(void) {
    static int hooks_installed;
    if (!hooks_installed) {
        if (!__sanitizer_install_malloc_and_free_hooks(fz_malloc_hook_, fz_free_hook_)) fz_die_("fuzz.h: cannot install malloc hooks\n");
        hooks_installed = 1;
    }
    fz_clear_(0);
    sft_fatal_jump = &fz_jmp;
    fz_tracking = 1;
}

// The parser returned normally: stop tracking (leaks stay for LeakSanitizer).
static void fz_end(void) { fz_clear_(0); }

// fatal() jumped back: free what the parser left, and check the message is one
// line naming the input (`name`, the path the harness gave the parser).
static void fz_after_fatal(const char *name) {
    fz_clear_(1);
    if (!sft_fatal_message[0] || strchr(sft_fatal_message, '\n')) {
        fprintf(stderr, "fatal message is not one line: [%s]\n", sft_fatal_message);
        abort();
    }
    if (name && !strstr(sft_fatal_message, name)) {
        fprintf(stderr, "fatal message does not name the file %s: [%s]\n", name, sft_fatal_message);
        abort();
    }
}

// Fails the run (a crash for libFuzzer) when a property does not hold.
#define FZ_CHECK(cond, ...)                                                  \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "property failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            abort();                                                         \
        }                                                                    \
    } while (0)

#endif
