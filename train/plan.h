// train/plan.h: the memory planner's search. Given a function that says how many bytes a
// rank needs with a setting of the memory flags, it finds the cheapest change of those flags
// that makes a plan fit: the GPU trainer's refusal names it, and `train_sftcu --plan` prints
// it. It is not the plan itself (which the trainer computes from its own buffers).
//
// The flags it may turn, never lowering one: -Z (the ZeRO stage), -r (recompute), -b (rows
// per micro-batch: the step's tokens -d stay, in more micro-batches) and -O (the optimizer
// offloaded). Their cost in step time, rough but in this order, as additive weights: -Z 2 (1:
// the same traffic as -Z 1, sent unit by unit), -r 1 (2: the norms and the MLP's first
// product again), each halving of -b (4: smaller products, more of them), -r 2 (6 more: a
// second forward), -Z 3 (16: the weights gathered twice a step), -O 1 (32: AdamW on the CPU,
// the gradients and the weights across PCIe every step). Every combination is costed and
// the cheapest that fits wins (the first found on a tie).
#pragma once
#include <stdio.h>

typedef struct { int B, recompute, zero, offload; } PlanKnobs;
typedef struct { int zero, offload; } PlanLimits;  // the highest -Z and -O the run may take

// The bytes one rank needs with knobs k (ctx: the caller's model and shape).
typedef double (*PlanBytes)(const void *ctx, PlanKnobs k);

static int plan_cost(PlanKnobs from, PlanKnobs to) {
    int cost = (from.zero < 2 && to.zero >= 2) + 2 * (from.recompute < 1 && to.recompute >= 1) + 6 * (from.recompute < 2 && to.recompute == 2) +
               16 * (from.zero < 3 && to.zero == 3) + 32 * (!from.offload && to.offload);
    for (int b = to.B; b < from.B; b *= 2) cost += 4;  // the halvings from -b to B, rounded up
    return cost;
}

// The flags as they would be typed: the ones `to` changes from `from`, each after a space.
static void plan_flags(PlanKnobs from, PlanKnobs to, char *out, size_t n) {
    int k = 0;
    out[0] = 0;
    if (to.zero != from.zero) k += snprintf(out + k, n - k, " -Z %d", to.zero);
    if (to.recompute != from.recompute) k += snprintf(out + k, n - k, " -r %d", to.recompute);
    if (to.B != from.B) k += snprintf(out + k, n - k, " -b %d", to.B);
    if (to.offload != from.offload) snprintf(out + k, n - k, " -O 1");
}

// The cheapest knobs at or above `now` (within `max`) whose plan needs at most `available`
// bytes; 0 if none. -b takes the divisors of B that halvings reach, and 1, so that -d stays a
// multiple of B*T*W.
static int plan_cheapest_fit(PlanBytes bytes, const void *ctx, PlanLimits max, PlanKnobs now, double available, PlanKnobs *best) {
    int best_cost = -1;
    for (int z = now.zero; z <= (max.zero > now.zero ? max.zero : now.zero); z++)
        for (int r = now.recompute; r <= 2; r++)
            for (int o = now.offload; o <= (max.offload > now.offload ? max.offload : now.offload); o++)
                for (int b = now.B; b >= 1; b = b > 1 && b % 2 == 0 ? b / 2 : b > 1 ? 1 : 0) {
                    PlanKnobs k = {b, r, z, o};
                    int cost = plan_cost(now, k);
                    if ((best_cost < 0 || cost < best_cost) && bytes(ctx, k) <= available) best_cost = cost, *best = k;
                }
    return best_cost >= 0;
}
