// Batch invariance (`--batch-invariant`): a token's results do not depend on
// what else is in its batch. Every matmul row is computed as a one-row call
// computes it (the packed multi-row kernels are not used) and attention
// gives each query a block of its own, its keys split at the places a
// one-query call splits them. A verify step then computes each drafted
// position bit for bit as a decode step of that token would, a prefill
// chunk each prompt position as decoding it would, and output does not
// change with concurrency or chunk size — what the speculation oracle needs
// to keep its recorded path, and what users who compare runs need. It costs
// the multi-row kernels' speed: prefill and verify run near one-row speed
// (docs/engine.md). A hybrid's DeltaNet layers advance token by token in
// the mode (the chunked delta rule sums in another order).
//
// Process-wide: the engine sets it when it is created (EngineConfig::
// batch_invariant); workspaces are sized for the mode in force when made.
#pragma once

namespace sustain {

void set_batch_invariant(bool on);
bool batch_invariant();

}  // namespace sustain
