"""ms/iter against the batch size: Tandem (2 iterations in flight) and PyTorch eager, side by side.

    python3 bench/models/batch_sweep.py [--model resnet18] [--batches 16,32,64,128,256] [--out sweep.json]

A large batch must cost what it costs in eager PyTorch, not fall off a cliff when its feeds outgrow the
client's shared-memory region (the client grows the region; before it did, ResNet-18 at batch 64 ran 5.4x
slower than eager because the second batch in flight travelled inline over the socket). Prints a table with
the Tandem/eager ratio per batch.
"""

import argparse
import copy
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_common as bc  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tandem.torch  # noqa: E402


def one_batch(model_name, batch, endpoint, iters):
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.get_model(model_name, weights=None, num_classes=1000)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(batch, 3, 224, 224, generator=g), torch.randint(0, 1000, (batch,), generator=g))
               for _ in range(2)]
    row = {"batch": batch, "feed_mb": round(batches[0][0].numel() * 4 / 2**20, 1)}
    reference = copy.deepcopy(model).cuda()
    job = tandem.torch.train(model, F.cross_entropy, bc.sgd(model.parameters()), batches[0], endpoint=endpoint,
                             name=f"sweep-{batch}")
    with job:
        pending = []

        def tandem_iteration(k=[0]):
            pending.append(job.step_async(*batches[k[0] % 2]))
            k[0] += 1
            if len(pending) >= 2:
                pending.pop(0).result()

        row["tandem_ms"] = round(bc.cuda_timed(tandem_iteration, iters) * 1e3, 2)
        for h in pending:
            h.result()
    optimizer = bc.sgd(reference.parameters())

    def eager(k=[0]):
        # As a user's loop: the batch comes from the host every step.
        x, y = (t.cuda(non_blocking=True) for t in batches[k[0] % 2])
        k[0] += 1
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(reference(x), y).backward()
        optimizer.step()

    row["eager_ms"] = round(bc.cuda_timed(eager, iters) * 1e3, 2)
    row["tandem_over_eager"] = round(row["tandem_ms"] / row["eager_ms"], 3)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batches", default="16,32,64,128,256")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--tandemd", default=None)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    rows = []
    flags = bc.daemon_flags_for_large_models() + bc.daemon_flags_beside_pytorch()
    with bc.Daemon(bc.find_tandemd(args.tandemd), "cuda", extra_flags=flags) as d:
        for batch in (int(b) for b in args.batches.split(",")):
            rows.append(one_batch(args.model, batch, d.endpoint, args.iters))
            torch.cuda.empty_cache()
            bc.log(rows[-1])
    print("| batch | feed MB | Tandem ms | eager ms | Tandem/eager |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['batch']} | {r['feed_mb']} | {r['tandem_ms']} | {r['eager_ms']} | {r['tandem_over_eager']} |")
    if args.out:
        bc.write_json(args.out, {"meta": bc.metadata("cuda"), "model": args.model, "rows": rows})


if __name__ == "__main__":
    main()
