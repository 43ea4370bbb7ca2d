// preempt.h: a run that is asked to stop, and a run started again after it finished.
//
// Kubernetes and Slurm send SIGTERM to a job some time before they kill it (the grace
// period: Kubernetes' terminationGracePeriodSeconds, 30 s by default; Slurm's
// GraceTime or KillWait); Ctrl-C sends SIGINT. The handlers below only record the
// signal. After each optimizer step every rank calls preempt_poll, which ORs the
// record across the ranks (one small collective per step), so all ranks stop after
// the same step even when only one was signalled. The trainer then saves the usual
// checkpoint of that step (rank 0 writes it, atomically), logs the stop and exits
// with 128 + the signal (preempt_exit_status); `-y 1` continues exactly where it
// stopped. A signal during the last step or after it lets the run finish as usual
// (final validation, evaluation, checkpoint).
//
// A second SIGINT ends the process at once (a checkpoint write it cuts leaves the
// previous checkpoint and `latest` intact, as after kill -9); further SIGTERMs change
// nothing, because launchers repeat SIGTERM before their SIGKILL.
//
// What it is not: a watchdog. The grace period must cover the rest of a step and a
// checkpoint write, or the job is killed first and resumes from the checkpoint
// before. A rank that dies is noticed by the launcher (mpirun, torchrun) or the
// collectives' transport (NCCL's asynchronous error check), not here.
//
// run_already_finished: a job restarted after its run finished (Kubernetes restarts
// pods, Slurm requeues jobs) with `-y 1` says so and exits 0 without writing anything.
#ifndef SFT_PREEMPT_H
#define SFT_PREEMPT_H

#include <signal.h>
#include "dist.h"
#include "trainer.h"

// The first SIGTERM or SIGINT this process received; 0 = none.
static volatile sig_atomic_t preempt_signal;

// Only async-signal-safe calls here: record the signal, say so on stderr (write).
static void preempt_handler(int sig) {
    static const char term[] = "signal| SIGTERM: stopping after this step with a checkpoint\n";
    static const char intr[] = "signal| SIGINT: stopping after this step with a checkpoint (another Ctrl-C ends it at once)\n";
    if (!preempt_signal) preempt_signal = sig;
    if (sig == SIGTERM) { if (write(STDERR_FILENO, term, sizeof term - 1) < 0) {} }
    else if (write(STDERR_FILENO, intr, sizeof intr - 1) < 0) {}
}

// Installs the handlers; call first thing in main, before anything slow.
static void preempt_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = preempt_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // reads and writes in progress go on
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;  // the handler runs once: a second SIGINT takes the default action
    sigaction(SIGINT, &sa, NULL);
}

static const char *preempt_signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal"; }

// After each optimizer step, on every rank: the signal that stops the run now
// (received by this rank or by any other; SIGTERM when ranks got different ones),
// or 0 to go on. Every rank must call it after every step (a collective on W ranks).
static int preempt_poll(Dist *d) {
    int sig = preempt_signal;
    if (!dist_any(d, sig != 0)) return 0;
    return dist_any(d, sig == SIGTERM) ? SIGTERM : SIGINT;
}

// The exit status of a run stopped by `sig` (its checkpoint saved): 128 + sig, what a
// shell reports for a process that a signal ended (143 SIGTERM, 130 SIGINT). Not 0,
// because the run is not finished: a Kubernetes Job or restartPolicy OnFailure would
// take 0 for done and neither restart it nor run it again, while 130 and 143 are
// what Kubeflow's restartPolicy ExitCode retries, torchrun restarts, and a Slurm
// script can test before `scontrol requeue`.
static int preempt_exit_status(int sig) { return 128 + sig; }

// Ends a run stopped by `sig` after `step` of `steps`, once every rank has called
// save_checkpoint for `step` (rank 0 wrote it): where log is not NULL (the rank that
// logs), a line in metrics.jsonl, the report and the line that says how to continue;
// then waits for all ranks, so that none leaves while rank 0 still writes (launchers
// end the whole job at its first non-zero exit), ends the transport and exits.
static void preempt_exit(Dist *d, RunLog *log, int64_t step, int steps, int sig) __attribute__((noreturn));
static void preempt_exit(Dist *d, RunLog *log, int64_t step, int steps, int sig) {
    if (log) {
        log_break(log);
        fprintf(log->metrics, "{\"step\": %lld, \"stopped\": \"%s\"}\n", (long long)step, preempt_signal_name(sig));
        fclose(log->metrics);
        log->metrics = NULL;
        log_report(log);
        printf("stop  | stopped by %s at step %lld of %d; %s (exit status %d)\n", preempt_signal_name(sig), (long long)step, steps,
               log->args->ckpt_every < 0 ? "no checkpoint (-n -1)" : "resume with -y 1", preempt_exit_status(sig));
        fflush(stdout);
    }
    dist_any(d, 0);  // a barrier
    dist_finish(d);
    exit(preempt_exit_status(sig));
}

// ---------------------------------------------------------------------------
// Restarting a finished run.

// The step a checkpoint's state.bin was written at, from its header alone
// (resume_state reads and checks the whole file).
static int64_t state_file_step(const char *path) {
    char buf[32 * sizeof(int64_t)];
    int64_t h[32];
    FILE *f = fopen(path, "rb");
    if (!f) fatal("%s: cannot open: %s", path, strerror(errno));
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    read_state_header(path, buf, n, h);
    return h[7];
}

// With -y 1, after setup_run: 1 when the checkpoint resumed from is at or past the
// run's last step, i.e. the run already finished (a checkpoint at the last step is
// only ever the final one). Says so on stdout when `print`; the caller then exits 0
// before writing anything.
static int run_already_finished(const TrainArgs *a, const RunSetup *r, int print) {
    if (!a->resume) return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/state.bin", r->resume_dir);
    int64_t step = state_file_step(path);
    if (step < r->steps) return 0;
    if (print) printf("run already finished at step %lld (checkpoint %s); nothing to do\n", (long long)step, r->resume_dir);
    return 1;
}

#endif
