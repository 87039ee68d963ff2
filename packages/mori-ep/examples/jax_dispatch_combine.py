# SPDX-License-Identifier: MIT
"""Dispatch -> experts -> combine inside one ``jax.jit`` on N local PEs (processes), no torch.

    pip install "mori-ep[jax]"
    python jax_dispatch_combine.py --pes 2                      # JAX's CPU platform, mori-ep's cpu backend
    python jax_dispatch_combine.py --pes 2 --platform cuda      # JAX on the GPU, the cuda backend (MPS)

Each PE routes its tokens to top-k of all experts, and one jitted step dispatches them, scales
every received row by 2 (the "experts") and combines. Combine sums a token's rows over the
distinct PEs it went to, so the result must be 2 * U * x (U = those PEs), which each PE checks
with numpy alone.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

from mori.shmem.testing import init_pe, run_pes

logger = logging.getLogger("jax_dispatch_combine")

HIDDEN, TOKENS, TOPK, EXPERTS_PER_PE = 128, 32, 4, 4


def pe_main(rank: int, world_size: int, uid: bytes) -> float:
    init_pe(rank, world_size, uid)  # or mori.jax.shmem_init_attr(rank, world_size) under jax.distributed
    import jax
    import jax.numpy as jnp

    import mori.jax
    from mori.ops import EpDispatchCombineConfig

    config = EpDispatchCombineConfig(
        data_type="bfloat16", rank=rank, world_size=world_size, hidden_dim=HIDDEN, scale_dim=0, scale_type_size=0,
        max_token_type_size=4, max_num_inp_token_per_rank=TOKENS, num_experts_per_rank=EXPERTS_PER_PE,
        num_experts_per_token=TOPK,
    )  # fmt: skip
    op = mori.jax.EpDispatchCombineOp(config)

    @jax.jit
    def moe_step(x: jax.Array, weights: jax.Array, indices: jax.Array) -> jax.Array:
        out, _, _, out_weights, _ = op.dispatch(x, weights, None, indices)
        expert_out = (out.astype(jnp.float32) * 2).astype(jnp.bfloat16)  # rows past total_recv are ignored
        combined, _ = op.combine(expert_out, out_weights, indices)
        return combined[: x.shape[0]]

    rng = np.random.default_rng(rank)
    x = rng.standard_normal((TOKENS, HIDDEN)).astype(jnp.bfloat16)
    indices = np.argsort(rng.random((TOKENS, world_size * EXPERTS_PER_PE)), axis=1)[:, :TOPK].astype(np.int32)
    weights = rng.random((TOKENS, TOPK)).astype(np.float32)
    combined = np.asarray(moe_step(jnp.asarray(x), jnp.asarray(weights), jnp.asarray(indices)), dtype=np.float32)

    pes_per_token = np.array([len(set((row // EXPERTS_PER_PE).tolist())) for row in indices])
    expected = 2 * pes_per_token[:, None] * x.astype(np.float32)
    error = float(np.max(np.abs(combined - expected) / (np.abs(expected) + 1e-3)))
    mori.jax.shmem_finalize()
    return error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pes", type=int, default=2)
    parser.add_argument("--platform", choices=("cpu", "cuda"), default="cpu", help="JAX's platform and mori's backend")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # JAX's platform and mori.shmem's backend go together: a CPU program cannot run on GPU memory.
    # The PEs share the GPU, so jax must not preallocate most of its memory in each of them.
    env = {
        "JAX_PLATFORMS": args.platform,
        "MORI_SHMEM_BACKEND": args.platform,
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    errors = run_pes(pe_main, args.pes, env=env, timeout=240)
    # bf16 rows summed in fp32 and rounded once to bf16: within bf16's half-ulp (2^-8) of 2 * U * x.
    worst = max(errors)
    if worst > 2**-8:
        raise SystemExit(f"combine differs from 2 * U * x by a relative {worst:.3g} (limit {2**-8:.3g})")
    logger.info("all %d PEs match 2 * U * x (worst relative error %.3g)", args.pes, worst)


if __name__ == "__main__":
    main()
