"""The models a pair of the pair matrix can hold, and how a pair list is made: named, drawn at random, or both.

A model name is one of
  - the reference models of bench_common (fcn5, resnet50, vgg19, lstm, transformer: the sizes of GPU.md, or tiny
    with --small), which win where the zoo has the same name;
  - a zoo model of zoo/catalog.py (densenet121, resnet18, mobilenet_v2, decoder_lm, bigru, ...), built as
    bench/models/zoo_gpu.py builds it: size "full", or "small" with --small, weights seeded with 0, dropout and
    stochastic depth at p = 0 (so that a shared run trains what a solo run trains);
  - "zoo:NAME" for the zoo's model where a reference model has the same name (zoo:resnet50, zoo:vgg19).

The zoo (and with it torchvision) is imported only when a zoo name is asked for. Not thread-safe.
"""

import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))

import bench_common as bc  # noqa: E402

ZOO_PREFIX = "zoo:"
DEFAULT_PAIRS = "fcn5+fcn5,lstm+lstm,resnet50+resnet50,fcn5+vgg19,vgg19+lstm,fcn5+lstm"


def _catalog():
    if bc.REPO_ROOT not in sys.path:
        sys.path.insert(0, bc.REPO_ROOT)
    from zoo import catalog
    return catalog


def zoo_name(name):
    """The catalog name of a zoo model name, or None for a reference model. Raises ValueError when `name` is
    neither."""
    if name.startswith(ZOO_PREFIX):
        bare = name[len(ZOO_PREFIX):]
    elif name in bc.MODEL_NAMES:
        return None
    else:
        bare = name
    catalog = _catalog()
    if bare not in catalog.BY_NAME:
        raise ValueError(f"unknown model {name!r}: neither a reference model ({', '.join(bc.MODEL_NAMES)}) nor "
                         f"a zoo model (zoo/catalog.py has {len(catalog.BY_NAME)}, e.g. resnet18, densenet121)")
    return bare


def qualified(zoo_model):
    """The pair-matrix name of a zoo catalog name (prefixed where a reference model has that name)."""
    return ZOO_PREFIX + zoo_model if zoo_model in bc.MODEL_NAMES else zoo_model


def build(name, small):
    """(model on the CPU, loss_fn, make_batch(generator) -> (inputs..., target)) of a model name, with the same
    initial weights at every call."""
    bare = zoo_name(name)
    if bare is None:
        return bc.build_model(name, small)
    import torch
    catalog = _catalog()
    torch.manual_seed(0)
    model, loss_fn, make_batch = catalog.entry(bare).builder("small" if small else "full")
    catalog._without_randomness(model)  # as zoo_gpu.py: the full size keeps them otherwise
    return model, loss_fn, make_batch


def parse_pair(text):
    """(a, b) from "a+b"; ValueError on a malformed entry or an unknown name."""
    names = [n.strip() for n in text.split("+")]
    if len(names) != 2 or not all(names):
        raise ValueError(f"pair {text!r}: each entry is a+b")
    for n in names:
        zoo_name(n)
    return tuple(names)


def parse_pairs(text):
    return [parse_pair(x) for x in text.split(",") if x.strip()]


def parse_priority(text):
    """(high, best_effort) from "HIGH:BEST_EFFORT", or None for an empty text."""
    if not text:
        return None
    names = [n.strip() for n in text.split(":")]
    if len(names) != 2 or not all(names):
        raise ValueError("--priority: HIGH:BEST_EFFORT")
    for n in names:
        zoo_name(n)
    return tuple(names)


def random_pool(small):
    """(pool name, zoo model names) that random pairs are drawn from: the CI share of the zoo with --small
    (the models that train in minutes on a CPU), else every entry. Sorted, so that a seed draws the same pairs
    whatever order the installed torchvision lists its models in."""
    catalog = _catalog()
    if small:
        return "catalog.CI_NAMES", sorted(catalog.CI_NAMES)
    return "catalog.ENTRIES", sorted(e.name for e in catalog.ENTRIES)


def draw_pairs(count, seed, small):
    """`count` distinct unordered pairs drawn with random.Random(seed), each member drawn independently (a model
    may be paired with itself), and the pool's description for the results."""
    pool_name, names = random_pool(small)
    rng = random.Random(seed)
    possible = len(names) * (len(names) + 1) // 2
    drawn, seen = [], set()
    while len(drawn) < min(count, possible):
        a, b = rng.choice(names), rng.choice(names)
        key = tuple(sorted((a, b)))
        if key not in seen:
            seen.add(key)
            drawn.append((qualified(a), qualified(b)))
    return drawn, {"count": count, "seed": seed, "pool": pool_name, "pool_size": len(names),
                   "drawn": [list(p) for p in drawn]}


def without_repeats(pairs):
    """The pairs in their order, each unordered pair once (a pair's results are keyed by "a+b")."""
    seen, out = set(), []
    for p in pairs:
        key = tuple(sorted(p))
        if key not in seen:
            seen.add(key)
            out.append(tuple(p))
    return out
