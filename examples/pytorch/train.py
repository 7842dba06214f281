#!/usr/bin/env python3
"""Trains one of the five reference models through tandemd.

    tandemd --device=cpu &                     # or tandemd on a GPU machine
    python3 examples/pytorch/train.py --model=mlp --small --steps=50
    python3 examples/pytorch/train.py --model=resnet50 --optimizer=sgd --lr=0.1 --steps=200

--small trains the tiny versions used by the tests (fast on a CPU daemon);
without it the models have their usual sizes. Batches are synthetic. Progress
goes to a tqdm bar where tqdm is installed, else to a bar of its own (steps
done of those asked for, the rate and the time left); `tandemctl jobs` shows
the same for every job, from the daemon's side.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "adaptor", "pytorch"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python"))

import torch  # noqa: E402

import models  # noqa: E402
import tandem  # noqa: E402
import tandem.torch  # noqa: E402,F401

FULL = {
    "mlp": lambda: models.mlp(),
    "resnet50": lambda: models.resnet50(),
    "vgg19": lambda: models.vgg19(),
    "lstm": lambda: models.lstm_lm(),
    "transformer": lambda: models.transformer(),
}


class TextBar:
    """A one-line progress bar on a terminal (a line every 10% elsewhere): done/total, rate, time left, loss."""

    def __init__(self, total, width=30):
        self.total, self.width, self.done, self.loss = total, width, 0, None
        self.start = time.monotonic()
        self.tty = sys.stdout.isatty()
        self.last_printed = -1

    def update(self, n):
        self.done += n
        elapsed = time.monotonic() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        filled = self.width * self.done // max(1, self.total)
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} steps  {rate:.1f} steps/s  "
                f"{left:.1f} s left" + (f"  loss {self.loss}" if self.loss is not None else ""))
        if self.tty:
            print("\r" + line, end="", flush=True)
        elif self.done * 10 // max(1, self.total) != self.last_printed or self.done == self.total:
            self.last_printed = self.done * 10 // max(1, self.total)
            print(line, flush=True)

    def set_postfix(self, loss):
        self.loss = loss

    def close(self):
        if self.tty:
            print()


def progress(total):
    try:
        from tqdm import tqdm
        return tqdm(total=total, unit="step")
    except ImportError:
        return TextBar(total)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=models.MODELS, default="mlp")
    parser.add_argument("--small", action="store_true", help="the tiny version of the model")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="sgd")
    parser.add_argument("--lr", type=float, default=None, help="default: 0.05 for SGD, 1e-3 for Adam(W)")
    parser.add_argument("--in_flight", type=int, default=2, help="iterations kept in flight")
    parser.add_argument("--endpoint", default=None, help="tandemd endpoint (default: $TANDEM_ENDPOINT, else local)")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: the daemon's choice)")
    parser.add_argument("--priority", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(0)
    model, loss_fn, make_batch = models.tiny(args.model) if args.small else FULL[args.model]()
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr or 0.05, momentum=0.9)
    elif args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr or 1e-3)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr or 1e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    g = torch.Generator().manual_seed(1)
    batches = [make_batch(g) for _ in range(min(args.steps, 16))]  # a small synthetic dataset, cycled

    start = time.monotonic()
    try:
        job = tandem.torch.train(model, loss_fn, optimizer, batches[0], endpoint=args.endpoint,
                                 name=f"{args.model}{'-small' if args.small else ''}", priority=args.priority,
                                 expected_iterations=args.steps, device=args.device)
    except tandem.TandemError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    reg = job.registration
    print(f"{args.model}: registered in {time.monotonic() - start:.2f} s on {reg.get('device')} "
          f"(persistent {int(reg.get('persistent_bytes', 0)) / 2**20:.1f} MiB, "
          f"ephemeral peak {int(reg.get('ephemeral_peak_bytes', 0)) / 2**20:.1f} MiB)")
    bar = progress(args.steps)
    pending = []
    start = time.monotonic()
    try:
        with job:
            for step in range(args.steps):
                pending.append(job.step_async(*batches[step % len(batches)]))
                scheduler.step()
                if len(pending) >= args.in_flight or step == args.steps - 1:
                    while pending:
                        handle = pending.pop(0)
                        loss = handle.result()
                        bar.set_postfix(loss=f"{loss:.4f}")
                        bar.update(1)
            job.load_into(model)
    except tandem.TandemError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        bar.close()
    elapsed = time.monotonic() - start
    print(f"{args.steps} steps in {elapsed:.2f} s ({args.steps / elapsed:.1f} steps/s); trained weights copied "
          "back into the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
