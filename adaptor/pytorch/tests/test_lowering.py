"""Capture and lowering without a daemon: what the IR of a captured step contains."""

import unittest

import common  # noqa: F401  (paths)
from common import models, tandem, torch

import torch.nn as nn
import torch.nn.functional as F


def _ops(lowered):
    return [n["op"] for n in lowered.graph["nodes"]]


class LoweringTest(unittest.TestCase):
    def test_op_names_follow_the_registry_convention(self):
        from tandem.torch.lower import op_name
        self.assertEqual(op_name(torch.ops.aten.addmm.default), "addmm")
        self.assertEqual(op_name(torch.ops.aten.add.Tensor), "add.Tensor")
        self.assertEqual(op_name(torch.ops.aten.sum.dim_IntList), "sum.dim_IntList")
        # A primitive that torch 1.13's decompositions leave in a trace names its ATen op.
        if hasattr(torch.ops, "prims") and hasattr(torch.ops.prims, "where"):
            self.assertEqual(op_name(torch.ops.prims.where.default), "where.self")

    def test_mlp_sgd_step_layout(self):
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        capture, lowered = tandem.torch.capture_training_job(model, loss_fn, opt, make_batch(torch.Generator()))
        g = lowered.graph
        params = [n for n, _ in model.named_parameters()]
        updated = {u["persistent"] for u in g["updates"]}
        self.assertEqual(updated, set(params) | {f"optim/{p}/momentum_buffer" for p in params})
        self.assertEqual([f["name"] for f in g["feeds"]], ["optim/group0/lr", "batch/0", "batch/1"])
        self.assertEqual(g["feeds"][1]["shape"], ["6", "12"])
        self.assertEqual(g["feeds"][2]["dtype"], "INT64")
        # `momentum * buf` is a Python number times a tensor: the Scalar variant, with the value as attribute.
        muls = [n for n in g["nodes"] if n["op"] == "mul.Scalar"]
        self.assertTrue(muls and all(n["attrs"]["other"]["f"] == 0.9 for n in muls))
        # Every node is labelled with the module (or phase) it came from.
        labels = {n.get("label", "") for n in g["nodes"]}
        self.assertIn("model.0 (Linear)", labels)
        self.assertIn("backward", labels)
        self.assertIn("optimizer (SGD)", labels)
        defined = {f["name"] for f in g["feeds"]} | {n for n, _ in lowered.persistent}
        for node in g["nodes"]:
            for i in node["inputs"]:
                self.assertIn(i, defined, f"{node['op']} reads {i} before it is defined")
            defined.update(node["outputs"])
        self.assertIn(lowered.fetch_names["loss"], defined)

    def test_type_promotion_is_made_explicit(self):
        # An int64 mask times a float tensor: PyTorch promotes the mask; the IR converts it with _to_copy.
        class Masked(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.ones(4))

            def forward(self, x):
                return (x > 0).long() * (self.w * x)

        model = Masked()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _, lowered = tandem.torch.capture_training_job(model, F.mse_loss, opt, (torch.randn(3, 4), torch.randn(3, 4)))
        nodes = lowered.graph["nodes"]
        converted = {n["outputs"][0] for n in nodes
                     if n["op"] == "_to_copy" and n["attrs"]["dtype"]["dtype"] == "FLOAT32"}
        muls = [n for n in nodes if n["op"] == "mul.Tensor" and converted & set(n["inputs"])]
        self.assertTrue(muls, "the int64 mask reaches mul.Tensor through a float32 _to_copy")

    def test_integer_sums_reach_the_daemon_in_int64(self):
        # ATen sums a bool mask in int64 (torch 2's core decompositions leave sum(bool) in a trace; torch 1.13's
        # convert it first): the IR converts the mask with an int64 _to_copy, as the registry's kernels take.
        from torch.fx.experimental.proxy_tensor import make_fx
        from tandem.torch.lower import Input, Output, lower

        def f(x):
            keep = torch.ops.aten.gt.Scalar(x, 0)
            return torch.ops.aten.sum.dim_IntList(keep, [1]), torch.ops.aten.cumsum.default(keep, 1)

        x = torch.randn(3, 4)
        lowered = lower(make_fx(f)(x), [Input("feed", "x", x)], [Output("fetch", "count"), Output("fetch", "cum")],
                        (x,), record_values=True)
        nodes = lowered.graph["nodes"]
        widened = {n["outputs"][0] for n in nodes if n["op"] == "_to_copy" and n["attrs"]["dtype"]["dtype"] == "INT64"}
        for op in ("sum.dim_IntList", "cumsum"):
            users = [n for n in nodes if n["op"] == op]
            self.assertEqual(len(users), 1, op)
            self.assertIn(users[0]["inputs"][0], widened, f"{op} reads the mask through an int64 _to_copy")

    def test_batch_norm_running_statistics_become_updates(self):
        model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        batch = (torch.randn(6, 5), torch.tensor([0, 1, 2, 0, 1, 2]))
        _, lowered = tandem.torch.capture_training_job(model, F.cross_entropy, opt, batch)
        updates = {u["persistent"]: u["value"] for u in lowered.graph["updates"]}
        for stat in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
            self.assertIn(stat, updates)
        bn = next(n for n in lowered.graph["nodes"] if n["op"] == "_native_batch_norm_legit_functional")
        self.assertEqual(len(bn["inputs"]), 5)  # input, weight, bias, running_mean, running_var
        self.assertEqual(len(bn["outputs"]), 5)  # out, save_mean, save_invstd, new running mean and var
        self.assertEqual(updates["1.running_mean"], bn["outputs"][3])
        self.assertEqual(updates["1.running_var"], bn["outputs"][4])
        self.assertEqual(bn["attrs"]["momentum"]["f"], 0.1)
        # No statistic is recomputed outside the op.
        self.assertNotIn("mean.dim", {n["op"] for n in lowered.graph["nodes"]})

    def test_convolutions_carry_pytorchs_tf32_setting(self):
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        batch = (torch.randn(2, 3, 6, 6), torch.tensor([0, 2]))
        saved = torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic
        try:
            for allowed, deterministic in ((True, False), (False, True)):
                torch.backends.cudnn.allow_tf32 = allowed
                torch.backends.cudnn.deterministic = deterministic
                _, lowered = tandem.torch.capture_training_job(model, F.cross_entropy, opt, batch)
                convs = [n for n in lowered.graph["nodes"] if n["op"].startswith("convolution")]
                self.assertEqual({n["op"] for n in convs}, {"convolution", "convolution_backward"})
                self.assertTrue(all(n["attrs"]["allow_tf32"] == {"b": allowed} for n in convs))
                self.assertTrue(all(n["attrs"]["deterministic"] == {"b": deterministic} for n in convs))
                self.assertFalse(any("allow_tf32" in n.get("attrs", {}) for n in lowered.graph["nodes"]
                                     if not n["op"].startswith("convolution")))
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic = saved

    def test_state_read_behind_functional_call_is_refused(self):
        class CachedWeight(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(3, 4))
                self.cache = [self.weight]

            def forward(self, x):
                return x @ self.cache[0]

        model = CachedWeight()
        with self.assertRaises(tandem.CaptureError) as ctx:
            tandem.torch.capture_training_job(model, lambda out, y: F.cross_entropy(out, y),
                                              torch.optim.SGD(model.parameters(), lr=0.1),
                                              (torch.randn(2, 3), torch.tensor([0, 1])))
        self.assertIn("'weight'", str(ctx.exception))

    def test_frozen_parameters_are_not_updated(self):
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
        model[0].weight.requires_grad_(False)
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
        _, lowered = tandem.torch.capture_training_job(model, F.cross_entropy, opt,
                                                       (torch.randn(3, 4), torch.tensor([0, 1, 0])))
        updated = {u["persistent"] for u in lowered.graph["updates"]}
        self.assertNotIn("0.weight", updated)
        self.assertIn("0.bias", updated)
        self.assertIn("0.weight", [n for n, _ in lowered.persistent])

    def test_advanced_indexing_records_which_dims_the_index_tensors_index(self):
        class PickColumns(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(5, 6)
                self.register_buffer("columns", torch.tensor([4, 0, 2]))

            def forward(self, x):
                return self.linear(x)[:, self.columns]  # index.Tensor with [None, columns]

        model = PickColumns()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _, lowered = tandem.torch.capture_training_job(model, F.cross_entropy, opt,
                                                       (torch.randn(4, 5), torch.tensor([0, 1, 2, 0])))
        nodes = lowered.graph["nodes"]
        index = [n for n in nodes if n["op"] in ("index.Tensor", "_unsafe_index.Tensor")]
        self.assertEqual(len(index), 1)
        self.assertEqual(len(index[0]["inputs"]), 2)  # self and columns: the None is no input
        self.assertEqual(index[0]["attrs"]["indexed_dims"], {"ints": {"values": ["1"]}})
        # The backward puts the gradient back at the same dims.
        puts = [n for n in nodes if n["op"] in ("index_put", "_unsafe_index_put")]
        self.assertTrue(puts)
        self.assertTrue(all(n["attrs"]["indexed_dims"] == {"ints": {"values": ["1"]}} for n in puts))


if __name__ == "__main__":
    unittest.main()
