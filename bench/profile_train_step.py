"""One training step, taken apart offline: ours (EncoderLM, CLM or MLM) vs the HF model's own loss, interleaved
step by step in one process (a shared machine's load hits every side alike), and torch.profiler's top operators.

    python bench/profile_train_step.py [--rounds 10] [--profile ours-clm] [--masks] [--attention] [--vocab-loss]
                                       [--skip-steps] [--threads 1 --cpu-time] [--seq-len 256]

--masks times the CLM mask of the local layers as ``masking_utils`` builds it (with ``causal_mask_function``)
against ``attention._sdpa_sliding_causal`` (one broadcast comparison, kept per shape): the finding that brought
the CLM step from 0.86x to above the HF Trainer. --attention times one layer's attention forward+backward at the
step's shape and precision: sdpa with the local band mask (causal, bidirectional), ``attention.banded_attention``
(what the local layers run on CPU from 8 reaches on), sdpa causal, and the plain matmuls of
``attention.cpu_bf16_matmul_attention`` (what training under CPU bf16 autocast runs; in fp32 on an AMD EPYC without
AVX-512 they ran 4-5x *slower* than sdpa, so fp32 keeps sdpa). --vocab-loss times the vocabulary loss alone at CLM's
and MLM's rows: plain logits + cross-entropy, and under bf16 ``encoder_lm.cpu_bf16_vocab_loss`` (fp32 has no chunked
route: it saved 6% there). --seq-len sets the rows' length (4096 tokens per step). --skip-steps leaves out the
interleaved steps. --threads 1 --cpu-time times steps in process CPU time on one thread: on a machine shared by
many jobs (load 20 on 2 cores) wall time is mostly waiting, and a 2-thread step's barriers wait for a descheduled
thread, so that is the figure that still compares code. bf16 autocast where the precision probe picks it.
Prints only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.detour.attention import _modernbert_masks, _sdpa_sliding_causal  # noqa: E402
from backend.detour.encoder_lm import EncoderLM  # noqa: E402
from backend.engine.config import load_config  # noqa: E402
from backend.engine.models import load_masked_lm, load_tokenizer  # noqa: E402
from backend.engine.precision import resolve_precision  # noqa: E402
from backend.engine.tokenstore import open_corpus  # noqa: E402
from backend.objectives import clm_labels, mlm_mask, replacement_vocab, special_ids  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="detour-tiny-en")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--profile", choices=["hf-clm", "ours-clm", "hf-mlm", "ours-mlm"], default=None)
    p.add_argument("--masks", action="store_true")
    p.add_argument("--attention", action="store_true")
    p.add_argument("--vocab-loss", action="store_true", help="time the vocabulary loss alone, plain vs chunked")
    p.add_argument("--skip-steps", action="store_true", help="only the --masks/--attention/--vocab-loss timings")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--cpu-time", action="store_true", help="time steps in process CPU time, not wall time")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per row; rows = 4096 // seq-len (one step's)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    clock = time.process_time if a.cpu_time else time.perf_counter
    tok = load_tokenizer(a.model)
    train, _, _ = open_corpus(load_config(None)["data"], tok, a.seq_len)
    model = load_masked_lm(a.model)
    lm = EncoderLM(model).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids, starts = train.rows(torch.arange(4096 // a.seq_len))
    spec = (special_ids(tok), tok.mask_token_id, replacement_vocab(tok))
    bf16 = resolve_precision("auto", "cpu")[0] == "bf16"

    def step(mode: str) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if mode == "hf-clm":  # the Trainer's "CLM" row: every token's logits, bidirectional
                loss = model(input_ids=ids, labels=ids).loss
            elif mode == "hf-mlm":  # the Trainer's MLM row: every token's logits, loss at the masked ones
                inputs, labels = mlm_mask(ids, 0.3, *spec, torch.Generator().manual_seed(0))
                loss = model(input_ids=inputs, labels=labels).loss
            elif mode == "ours-clm":
                loss = lm(ids, clm_labels(ids, starts), causal=True)[0]
            else:
                inputs, labels = mlm_mask(ids, 0.3, *spec, torch.Generator().manual_seed(0))
                loss = lm(inputs, labels, causal=False)[0]
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    modes = [] if a.skip_steps else ["hf-clm", "ours-clm", "hf-mlm", "ours-mlm"]
    for m in modes:
        step(m)
    times = {m: [] for m in modes}
    for _ in range(a.rounds):
        for m in modes:
            t0 = clock()
            step(m)
            times[m].append(clock() - t0)
    what = "CPU" if a.cpu_time else "wall"
    for m in modes:
        print(
            f"{m}: {ids.numel() / statistics.median(times[m]):,.0f} tok/s of {what} time, {torch.get_num_threads()} "
            f"thread(s) (median of {a.rounds} interleaved steps)"
        )
    if a.masks:
        b, t = ids.shape
        for name, build in (
            ("masking_utils", lambda: _modernbert_masks(model, ids, None, torch.float32)),
            (
                "broadcast",
                lambda: _sdpa_sliding_causal.__wrapped__(b, t, model.config.local_attention // 2, ids.device),
            ),
        ):
            build()
            t0 = time.perf_counter()
            for _ in range(5):
                build()
            print(f"CLM masks, {name}: {(time.perf_counter() - t0) / 5 * 1000:.1f} ms per step")
    if a.attention:
        attention_times(model, ids.shape, torch.bfloat16 if bf16 else torch.float32, clock=clock)
    if a.vocab_loss:
        vocab_loss_times(model, ids.shape, bf16)
    if a.profile:
        from torch.profiler import profile

        with profile() as prof:
            for _ in range(3):
                step(a.profile)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def vocab_loss_times(model, shape, bf16: bool, reps: int = 3) -> None:
    """The vocabulary loss and its backward alone (the decoder at CLM's every-token and MLM's 30% rows): autocast's
    or plain fp32 logits + ``F.cross_entropy`` vs ``encoder_lm._ChunkedVocabLoss`` (logits -> gradient in cache)."""
    from backend.detour.encoder_lm import cpu_bf16_vocab_loss

    dec = model.decoder
    for rows in (shape[0] * shape[1], int(0.3 * shape[0] * shape[1])):
        h = torch.randn(rows, dec.in_features, requires_grad=True)
        target = torch.randint(0, dec.out_features, (rows,))
        routes = {
            "plain logits + cross_entropy": lambda h=h, target=target: torch.nn.functional.cross_entropy(
                dec(h).float(), target, reduction="sum"
            ),
        }
        if bf16:  # fp32 has no chunked route: it saved 6% of the loss's CPU time there (docs/performance/cpu.md)
            routes["chunked (gradient in the same pass)"] = lambda h=h, t=target: cpu_bf16_vocab_loss(h, dec, t)
        times = {k: [] for k in routes}
        for _ in range(reps + 1):  # interleaved; the first round warms up
            for name, f in routes.items():
                t0 = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    f().backward()
                times[name].append(time.perf_counter() - t0)
        for name, t in times.items():
            print(f"vocab loss, {rows} rows x {dec.out_features}, {name}: {statistics.median(t[1:]) * 1000:.0f} ms")


def attention_times(model, shape, dtype=torch.bfloat16, reps: int = 5, clock=time.perf_counter) -> None:
    """One layer's attention forward+backward at the step's shape: sdpa with the local band mask (causal and
    bidirectional), sdpa's causal kernel, ``banded_attention`` (the local layers' route on CPU from 8 reaches on) and
    the matmul attention of CPU bf16 training."""
    from backend.detour.attention import banded_attention, cpu_bf16_matmul_attention

    b, t = shape
    h = model.config.num_attention_heads
    d = model.config.hidden_size // h
    reach = model.config.local_attention // 2
    band = _sdpa_sliding_causal.__wrapped__(b, t, reach, torch.device("cpu"))
    pos = torch.arange(t)
    band2 = (pos[:, None] - pos[None, :]).abs() <= reach
    sdpa = torch.nn.functional.scaled_dot_product_attention
    causal_module = type("M", (), {"is_causal": True})()
    routes = {
        "sdpa, causal band mask": lambda q, k, v: sdpa(q, k, v, attn_mask=band),
        "banded, causal": lambda q, k, v: banded_attention(q, k, v, reach, True),
        "sdpa, bidirectional band mask": lambda q, k, v: sdpa(q, k, v, attn_mask=band2),
        "banded, bidirectional": lambda q, k, v: banded_attention(q, k, v, reach, False),
        "sdpa, is_causal": lambda q, k, v: sdpa(q, k, v, is_causal=True),
        f"{str(dtype)[6:]} matmuls, band mask": lambda q, k, v: cpu_bf16_matmul_attention(None, q, k, v, band)[0],
        f"{str(dtype)[6:]} matmuls, causal": lambda q, k, v: cpu_bf16_matmul_attention(causal_module, q, k, v, None)[0],
    }
    for _ in range(2):  # interleaved: the load moves
        for name, f in routes.items():
            qkv = [torch.randn(b, t, h, d, dtype=dtype).transpose(1, 2).requires_grad_() for _ in range(3)]
            f(*qkv).sum().backward()
            t0 = clock()
            for _ in range(reps):
                f(*qkv).sum().backward()
            print(f"attention, {name}: {(clock() - t0) / reps * 1000:.1f} ms per layer fwd+bwd (reach {reach})")


if __name__ == "__main__":
    main()
